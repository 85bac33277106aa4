"""Assemble Operators into a DiGraph (``rdu_sim.graph.digraph``), wiring edges by tensor name.

Every tensor has one producer: an operator, or the graph's declared external inputs (the
layer's input hidden state, token ids, tensors read back from HBM). Adding an operator
connects it to the producers of its inputs; an edge carries the names of the tensors it
moves (`tensors` attribute). Graph attributes `inputs` and `outputs` map tensor names to
their specs: these are the tensors that cross the kernel boundary (through HBM).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.operator import Operator, TensorSpec


class GraphBuilder:
    """Collects operators in order and builds the DAG between them."""

    def __init__(self, name: str, inputs: Iterable[TensorSpec]) -> None:
        self.graph: DiGraph = DiGraph(name=name)
        external = {t.name: t for t in inputs}
        self.graph.graph["inputs"] = external
        self._producer: dict[str, tuple[str | None, TensorSpec]] = {
            name: (None, spec) for name, spec in external.items()
        }

    def tensor(self, name: str) -> TensorSpec:
        """The spec of an already produced (or external) tensor."""
        return self._producer[name][1]

    def add(self, op: Operator) -> Operator:
        """Add an operator; its inputs must already have producers."""
        if op.name in self.graph:
            raise ValueError(f"operator {op.name!r} is already in graph {self.graph.name!r}")
        self.graph.add_node(op.name, op=op)
        for spec in op.inputs:
            if spec.name not in self._producer:
                raise ValueError(
                    f"operator {op.name!r} reads tensor {spec.name!r}, which nothing produces"
                )
            source = self._producer[spec.name][0]
            if source is not None:
                if self.graph.has_edge(source, op.name):
                    self.graph.edges[source, op.name]["tensors"].append(spec.name)
                else:
                    self.graph.add_edge(source, op.name, tensors=[spec.name])
        for spec in op.outputs:
            if spec.name in self._producer:
                raise ValueError(f"tensor {spec.name!r} has two producers (second: {op.name!r})")
            self._producer[spec.name] = (op.name, spec)
        return op

    def finish(self, outputs: Iterable[str]) -> DiGraph:
        """Declare the graph's output tensors and return the graph."""
        declared: dict[str, TensorSpec] = {}
        for name in outputs:
            source, spec = self._producer[name]
            if source is None:
                raise ValueError(f"graph output {name!r} is an input, not produced")
            declared[name] = spec
        self.graph.graph["outputs"] = declared
        return self.graph


class PrefixedBuilder(GraphBuilder):
    """A view of a builder that adds under a prefix: the operators' names and the tensors
    they make, read back under the prefix; tensors made before it keep their own names. A
    second copy of a part of a layer (a mixed step's decode attention) is built by the same
    code as the first."""

    def __init__(self, parent: GraphBuilder, prefix: str, resident: bool = True) -> None:
        """``resident=False``: the copy re-reads weights the first copy holds (its operators
        stream them under the same names, holding none: the model's parameters count once)."""
        # the parent's graph and producers, shared: what this view adds is the parent's
        self.graph = parent.graph
        self._producer = parent._producer
        self._prefix = prefix
        self._resident = resident
        self._made: set[str] = set()  # the unprefixed names of the tensors made here

    def add(self, op: Operator) -> Operator:
        """Add ``op`` under the prefix (module docstring); returns it as added."""
        prefix, made = self._prefix, self._made
        renamed = replace(
            op,
            name=prefix + op.name,
            inputs=tuple(
                replace(t, name=prefix + t.name) if t.name in made else t for t in op.inputs
            ),
            outputs=tuple(replace(t, name=prefix + t.name) for t in op.outputs),
        )
        if not self._resident and renamed.weight_params:
            renamed = replace(renamed, weight_params=0, weight_bytes=0, weights=op.weight_name)
        made.update(t.name for t in op.outputs)
        return super().add(renamed)


def op(graph: DiGraph, name: str) -> Operator:
    """The Operator at node `name`."""
    result: Operator = graph.node_attributes(name)["op"]
    return result


def operators(graph: DiGraph) -> Iterator[Operator]:
    """The graph's operators in a deterministic topological order (`DiGraph.topological_order`)."""
    for name in graph.topological_order():
        yield op(graph, name)
