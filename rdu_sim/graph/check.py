"""Structural checks of a dataflow graph: acyclic, and every input shape-consistent.

A graph is sound when it is a DAG; every resident weight has a size in bytes; every edge's
tensors are outputs of its source and inputs of its target with the same shape and element
size; every input of every operator comes from exactly one place (an in-edge or the graph's
external inputs) with a matching spec; and every declared graph output is produced by an
operator.
"""

from __future__ import annotations

from rdu_sim.graph.digraph import DiGraph, find_cycle
from rdu_sim.graph.operator import Operator, TensorSpec


def graph_problems(graph: DiGraph) -> list[str]:
    """Everything wrong with `graph`, one sentence each (empty when it is sound)."""
    problems: list[str] = []
    cycle = find_cycle(graph)
    if cycle is not None:
        problems.append(f"graph {graph.name!r} has a cycle: {cycle}")
    external: dict[str, TensorSpec] = graph.graph.get("inputs", {})
    for name in graph.nodes:
        node: Operator = graph.nodes[name]["op"]
        if node.name != name:
            problems.append(f"node {name!r} holds operator {node.name!r}")
        if node.weight_params and node.weight_bytes <= 0:
            problems.append(f"{name!r} has {node.weight_params} resident weights of no bytes")
        arriving: dict[str, TensorSpec] = {}
        for source in graph.predecessors(name):
            producer: Operator = graph.nodes[source]["op"]
            made = {t.name: t for t in producer.outputs}
            for tensor in graph.edges[source, name]["tensors"]:
                if tensor not in made:
                    problems.append(
                        f"edge {source!r} -> {name!r} carries {tensor!r}, which "
                        f"{source!r} does not produce"
                    )
                elif tensor in arriving:
                    problems.append(f"{name!r} receives {tensor!r} twice")
                else:
                    arriving[tensor] = made[tensor]
        for spec in node.inputs:
            found = arriving.get(spec.name, external.get(spec.name))
            if found is None:
                problems.append(f"{name!r} input {spec.name!r} has no producer")
            elif (found.shape, found.dtype_bytes) != (spec.shape, spec.dtype_bytes):
                problems.append(
                    f"{name!r} input {spec.name!r} expects {spec.shape} x "
                    f"{spec.dtype_bytes} B, its producer gives {found.shape} x "
                    f"{found.dtype_bytes} B"
                )
        for tensor in set(arriving) - {t.name for t in node.inputs}:
            problems.append(f"{name!r} receives {tensor!r} but does not read it")
    produced = {t.name for n in graph.nodes for t in graph.nodes[n]["op"].outputs}
    for tensor in graph.graph.get("outputs", {}):
        if tensor not in produced:
            problems.append(f"graph output {tensor!r} is not produced by any operator")
    return problems


def check_graph(graph: DiGraph) -> None:
    """Raise ValueError listing every problem of `graph` (see `graph_problems`)."""
    problems = graph_problems(graph)
    if problems:
        raise ValueError(f"graph {graph.name!r} is not sound:\n  " + "\n  ".join(problems))
