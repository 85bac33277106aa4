"""The directed graph operators live in: the part of ``networkx.DiGraph`` the graph builders
and the compiler use, with the same iteration orders, and the three algorithms they call.

networkx costs a command ~80 ms to import (its algorithms, readers and backend discovery),
a third of what `rdu-sim step` may spend in all; a layer graph needs nodes with attributes,
edges with attributes, and neighbours in insertion order. networkx is loaded only to write
GraphML (``rdu_sim.graph.export``); :func:`to_networkx` converts for anyone who wants its
algorithms. tests/test_digraph.py checks every order and answer against networkx itself.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping
from itertools import pairwise
from types import MappingProxyType
from typing import Any, Literal, overload

Attributes = dict[str, Any]


class EdgeView:
    """``graph.edges``: ``(u, v)`` pairs in networkx's order (by source in node order, then
    by target in insertion order), ``edges[u, v]`` the attribute dict, and
    ``edges(data=True)`` the ``(u, v, attributes)`` triples."""

    def __init__(self, successors: dict[str, dict[str, Attributes]]) -> None:
        self._succ = successors

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for source, targets in self._succ.items():
            for target in targets:
                yield source, target

    def __len__(self) -> int:
        return sum(len(targets) for targets in self._succ.values())

    def __getitem__(self, edge: tuple[str, str]) -> Attributes:
        source, target = edge
        return self._succ[source][target]

    def __contains__(self, edge: object) -> bool:
        if not isinstance(edge, tuple) or len(edge) != 2:
            return False
        return edge[0] in self._succ and edge[1] in self._succ[edge[0]]

    @overload
    def __call__(self, data: Literal[False] = False) -> Iterator[tuple[str, str]]: ...

    @overload
    def __call__(self, data: Literal[True]) -> Iterator[tuple[str, str, Attributes]]: ...

    def __call__(self, data: bool = False) -> Iterator[Any]:
        if not data:
            return iter(self)
        return (
            (source, target, attributes)
            for source, targets in self._succ.items()
            for target, attributes in targets.items()
        )


class DiGraph:
    """A directed graph of named nodes, each node and edge with an attribute dict, and graph
    attributes in ``graph`` (``name`` among them). Adding a node or an edge again updates
    its attributes; an edge's endpoints are added when missing."""

    def __init__(self, **attributes: Any) -> None:
        self.graph: Attributes = dict(attributes)
        self._node: dict[str, Attributes] = {}
        self._succ: dict[str, dict[str, Attributes]] = {}
        self._pred: dict[str, dict[str, Attributes]] = {}
        self._topological: tuple[str, ...] | None = None  # until a node or edge is added

    @property
    def name(self) -> str:
        return str(self.graph.get("name", ""))

    @name.setter
    def name(self, value: str) -> None:
        self.graph["name"] = value

    @property
    def nodes(self) -> Mapping[str, Attributes]:
        """Node name -> its attributes, in the order the nodes were added (read-only)."""
        return MappingProxyType(self._node)

    def node_attributes(self, node: str) -> Attributes:
        """``nodes[node]`` without the read-only view ``nodes`` makes each call (the
        compiler reads a node's operator ~1 M times in a cluster run)."""
        return self._node[node]

    @property
    def edges(self) -> EdgeView:
        return EdgeView(self._succ)

    def __iter__(self) -> Iterator[str]:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def __contains__(self, node: object) -> bool:
        return node in self._node

    def add_node(self, node: str, **attributes: Any) -> None:
        if node not in self._node:
            self._node[node] = {}
            self._succ[node] = {}
            self._pred[node] = {}
            self._topological = None
        self._node[node].update(attributes)

    def add_edge(self, source: str, target: str, **attributes: Any) -> None:
        for node in (source, target):
            if node not in self._node:
                self.add_node(node)
        data = self._succ[source].get(target)
        if data is None:
            data = self._succ[source][target] = self._pred[target][source] = {}
            self._topological = None
        data.update(attributes)

    def copy(self) -> DiGraph:
        """An independent copy (each attribute dict copied, not the values in it), with the
        same orders: predecessors too."""
        copied = DiGraph(**self.graph)
        for node, attributes in self._node.items():
            copied.add_node(node, **attributes)
        for target, sources in self._pred.items():
            for source, attributes in sources.items():
                copied._succ[source][target] = copied._pred[target][source] = dict(attributes)
        for source, targets in self._succ.items():  # networkx's successor order
            copied._succ[source] = {target: copied._succ[source][target] for target in targets}
        return copied

    def has_edge(self, source: str, target: str) -> bool:
        return source in self._succ and target in self._succ[source]

    def successors(self, node: str) -> Iterator[str]:
        """The nodes ``node`` has an edge to, in the order those edges were added."""
        return iter(self._succ[node])

    def predecessors(self, node: str) -> Iterator[str]:
        """The nodes with an edge to ``node``, in the order those edges were added."""
        return iter(self._pred[node])

    def in_degree(self, node: str) -> int:
        return len(self._pred[node])

    def topological_order(self) -> tuple[str, ...]:
        """The nodes, each after all its predecessors, ties in node order
        (:func:`topological_sort` by the nodes' order), kept until a node or an edge is
        added: the compiler reads each graph's operators several times (sharding, fusing,
        the weight inventory, the stages), ~400 sorts of ~140 graphs in a step command.
        Raises ValueError when the graph has a cycle."""
        if self._topological is None:
            rank = {name: i for i, name in enumerate(self._node)}
            self._topological = tuple(topological_sort(self, key=rank.__getitem__))
        return self._topological


def topological_sort(graph: DiGraph, key: Callable[[str], Any]) -> Iterator[str]:
    """The nodes, each after all its predecessors, the ready node of smallest ``key`` first
    (networkx's ``lexicographical_topological_sort``; ties by node order). Raises ValueError
    when the graph has a cycle."""
    order = {node: i for i, node in enumerate(graph)}
    waiting = {node: graph.in_degree(node) for node in graph if graph.in_degree(node)}
    ready = [(key(node), order[node], node) for node in graph if not graph.in_degree(node)]
    heapq.heapify(ready)
    while ready:
        node = heapq.heappop(ready)[2]
        for child in graph.successors(node):
            waiting[child] -= 1
            if not waiting[child]:
                del waiting[child]
                heapq.heappush(ready, (key(child), order[child], child))
        yield node
    if waiting:
        raise ValueError(f"graph {graph.name!r} has a cycle")


def ancestors(graph: DiGraph, node: str) -> set[str]:
    """Every node with a path to ``node`` (never ``node`` itself, as in networkx)."""
    found: set[str] = set()
    pending = [node]
    while pending:
        for parent in graph.predecessors(pending.pop()):
            if parent not in found:
                found.add(parent)
                pending.append(parent)
    found.discard(node)
    return found


def find_cycle(graph: DiGraph) -> list[tuple[str, str]] | None:
    """The edges of one cycle, in order, or None when the graph is acyclic (a depth-first
    search from each node in node order)."""
    done: set[str] = set()
    for start in graph:
        if start in done:
            continue
        path: list[str] = [start]
        on_path = {start}
        branches: list[Iterator[str]] = [graph.successors(start)]
        while branches:
            child = next(branches[-1], None)
            if child is None:
                branches.pop()
                on_path.discard(path[-1])
                done.add(path.pop())
            elif child in on_path:
                cycle = [*path[path.index(child) :], child]
                return list(pairwise(cycle))
            elif child not in done:
                path.append(child)
                on_path.add(child)
                branches.append(graph.successors(child))
    return None


def to_networkx(
    graph: DiGraph,
    node_attributes: Callable[[Attributes], Attributes] = dict,
    edge_attributes: Callable[[Attributes], Attributes] = dict,
) -> Any:
    """The same graph as a ``networkx.DiGraph`` (imported here), attributes mapped through
    the given functions (as they are, by default)."""
    import networkx as nx

    copy = nx.DiGraph(**graph.graph)
    for node, attributes in graph.nodes.items():
        copy.add_node(node, **node_attributes(attributes))
    for source, target, attributes in graph.edges(data=True):
        copy.add_edge(source, target, **edge_attributes(attributes))
    return copy
