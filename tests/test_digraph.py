"""rdu_sim.graph.digraph against networkx itself: the same node, edge, neighbour and
topological orders, the same ancestors and the same cycles found, on random graphs and on
every shipped layer graph."""

from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest

from rdu_sim import api
from rdu_sim.compiler.fusion import layer_graphs
from rdu_sim.graph.digraph import DiGraph, ancestors, find_cycle, to_networkx, topological_sort


def _random_pair(seed: int, acyclic: bool) -> tuple[DiGraph, nx.DiGraph]:
    """The same random graph built twice, edges added in a random order (attributes too)."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in rng.sample(range(100), rng.randint(1, 30))]
    ours, theirs = DiGraph(name=f"g{seed}"), nx.DiGraph(name=f"g{seed}")
    for name in names:
        if rng.random() < 0.7:  # some nodes arrive first through an edge
            ours.add_node(name, op=name.upper())
            theirs.add_node(name, op=name.upper())
    for _ in range(rng.randint(0, 60)):
        i, j = rng.randrange(len(names)), rng.randrange(len(names))
        if acyclic and i >= j:
            continue
        ours.add_edge(names[i], names[j], tensors=[str(i)])
        theirs.add_edge(names[i], names[j], tensors=[str(i)])
    for name in names:  # isolated leftovers
        ours.add_node(name)
        theirs.add_node(name)
    return ours, theirs


def _same(ours: DiGraph, theirs: nx.DiGraph, *, built_alike: bool = True) -> None:
    """Equal graphs, orders included (predecessors only when both were built by the same
    calls: a copy adds edges by source, which orders each node's predecessors differently)."""
    assert ours.name == theirs.name
    assert list(ours) == list(theirs) == list(ours.nodes)
    assert len(ours) == len(theirs)
    assert {n: dict(ours.nodes[n]) for n in ours} == {n: theirs.nodes[n] for n in theirs}
    assert list(ours.edges) == list(theirs.edges)
    assert list(ours.edges(data=True)) == list(theirs.edges(data=True))
    assert len(ours.edges) == theirs.number_of_edges()
    for u, v in theirs.edges:
        assert ours.has_edge(u, v) and (u, v) in ours.edges
        assert ours.edges[u, v] == theirs.edges[u, v]
    for node in theirs:
        assert list(ours.successors(node)) == list(theirs.successors(node))
        if built_alike:
            assert list(ours.predecessors(node)) == list(theirs.predecessors(node))
        assert sorted(ours.predecessors(node)) == sorted(theirs.predecessors(node))
        assert ancestors(ours, node) == nx.ancestors(theirs, node)


@pytest.mark.parametrize("seed", range(40))
def test_a_random_dag_matches_networkx(seed: int) -> None:
    ours, theirs = _random_pair(seed, acyclic=True)
    _same(ours, theirs)
    rng = random.Random(seed)
    keys = {name: rng.randrange(5) for name in theirs}  # ties too: broken by node order
    for key in (keys.__getitem__, {n: i for i, n in enumerate(theirs)}.__getitem__):
        expected = list(nx.lexicographical_topological_sort(theirs, key=key))
        assert list(topological_sort(ours, key)) == expected
    assert find_cycle(ours) is None
    _same(DiGraph(), nx.DiGraph())
    copied = ours.copy()
    _same(copied, theirs)
    for u, v in list(theirs.edges)[:3]:
        copied.edges[u, v]["tensors"] = []
        assert ours.edges[u, v] == theirs.edges[u, v] != copied.edges[u, v]
    back = to_networkx(ours)
    assert nx.utils.graphs_equal(back, theirs)


@pytest.mark.parametrize("seed", range(40))
def test_a_random_graph_has_a_cycle_exactly_when_networkx_finds_one(seed: int) -> None:
    ours, theirs = _random_pair(seed, acyclic=False)
    _same(ours, theirs)
    cycle = find_cycle(ours)
    assert (cycle is not None) == (not nx.is_directed_acyclic_graph(theirs))
    if cycle is not None:
        assert cycle[0][0] == cycle[-1][1]  # closed
        assert all(a[1] == b[0] for a, b in itertools.pairwise(cycle))
        assert all(theirs.has_edge(u, v) for u, v in cycle)
        with pytest.raises(ValueError, match="has a cycle"):
            list(topological_sort(ours, str))


def test_adding_again_updates_attributes_and_shares_the_edge_dict() -> None:
    graph = DiGraph(name="g")
    graph.add_node("a", op=1)
    graph.add_node("a", size=2)
    graph.add_edge("a", "b", tensors=["x"])
    graph.edges["a", "b"]["tensors"].append("y")
    graph.add_edge("a", "b", kind="k")
    assert dict(graph.nodes["a"]) == {"op": 1, "size": 2}
    assert dict(graph.nodes["b"]) == {}
    assert list(graph.edges(data=True)) == [("a", "b", {"tensors": ["x", "y"], "kind": "k"})]
    graph.name = "h"
    assert graph.graph == {"name": "h"}
    with pytest.raises(TypeError):
        graph.nodes["c"] = {}  # type: ignore[index]


def test_the_kept_topological_order_follows_every_node_and_edge_added() -> None:
    """``topological_order`` is kept between calls, and a node or an edge added after one
    is in the next (attributes changed alone keep it: they order nothing)."""
    graph = DiGraph(name="g")
    graph.add_edge("b", "c")
    graph.add_node("a")
    assert graph.topological_order() == ("b", "c", "a")
    graph.add_edge("a", "c")
    assert graph.topological_order() == ("b", "a", "c")
    graph.add_node("d")
    assert graph.topological_order() == ("b", "a", "c", "d")
    kept = graph.topological_order()
    graph.add_node("a", op=1)
    graph.add_edge("b", "c", tensors=["x"])
    assert graph.topological_order() is kept
    graph.add_edge("c", "b")
    with pytest.raises(ValueError, match="has a cycle"):
        graph.topological_order()


@pytest.mark.parametrize(
    "workload", ["deepseek-r1-128k-snapstream", "llama3.1-8b-8socket", "qwen3-235b-a22b-16socket"]
)
def test_every_layer_graph_sorts_as_networkx_does(workload: str) -> None:
    """The compiler's graphs (sharded, per layer group), converted to networkx: the same
    operator order the builders' topological sort gives."""
    scenario = api.load(f"workloads/{workload}.yaml")
    shape = api.default_step_shape(scenario)
    for _, graph in layer_graphs(scenario, shape):
        theirs = to_networkx(graph)
        _same(graph, theirs, built_alike=False)
        rank = {name: i for i, name in enumerate(graph)}.__getitem__
        expected = list(nx.lexicographical_topological_sort(theirs, key=rank))
        assert list(topological_sort(graph, rank)) == expected
        assert list(graph.topological_order()) == expected
