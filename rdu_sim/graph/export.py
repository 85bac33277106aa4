"""Export a layer graph for people: Graphviz DOT text and GraphML (networkx).

Nodes are labelled with the operator name, kind, and its FLOPs and bytes; edges with the
tensors they carry. DOT is written by hand (no pydot dependency); GraphML goes through
networkx (imported only here, when asked for) with scalar attributes only, so any GraphML
reader opens it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rdu_sim import human
from rdu_sim.graph.digraph import DiGraph, to_networkx
from rdu_sim.graph.operator import Operator

_COLOURS = {
    "gemm": "lightblue",
    "batched_gemm": "lightblue",
    "expert_gemm": "lightblue",
    "router": "lightblue",
    "attention_score": "lightsalmon",
    "attention_value": "lightsalmon",
    "kv_read": "palegreen",
    "kv_write": "palegreen",
    "gather": "palegreen",
    "allreduce": "plum",
    "allgather": "plum",
    "reduce_scatter": "plum",
}


def _quote(text: str) -> str:
    """A DOT string; backslashes pass through so label escapes like \\n keep working."""
    return '"' + text.replace('"', '\\"') + '"'


def node_attributes(node: Operator) -> dict[str, Any]:
    """Scalar attributes of an operator, for GraphML and JSON."""
    return {
        "kind": node.kind,
        "flops": float(node.flops),
        "vector_flops": float(node.vector_flops),
        "weight_params": int(node.weight_params),
        "weight_read_bytes": float(node.weight_read_bytes),
        "kv_read_bytes": float(node.kv_read_bytes),
        "kv_write_bytes": float(node.kv_write_bytes),
        "act_read_bytes": float(node.act_read_bytes),
        "act_write_bytes": float(node.act_write_bytes),
        "collective": node.collective or "",
        "collective_bytes": float(node.collective_bytes),
    }


def graph_records(graph: DiGraph) -> dict[str, Any]:
    """A JSON-ready description of a graph: its nodes (with attributes) and edges."""
    return {
        "name": str(graph.name or "graph"),
        "nodes": [
            {"name": str(name), **node_attributes(graph.nodes[name]["op"])} for name in graph.nodes
        ],
        "edges": [
            {"source": str(s), "target": str(t), "tensors": list(d.get("tensors", []))}
            for s, t, d in graph.edges(data=True)
        ],
    }


def dot_from_records(records: dict[str, Any]) -> str:
    """Graphviz DOT text from `graph_records` output (so JSON results can be drawn too)."""
    lines = [
        f"digraph {_quote(str(records.get('name', 'graph')))} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fillcolor=white];',
    ]
    for node in records["nodes"]:
        detail: list[str] = [str(node["kind"])]
        if node.get("flops"):
            detail.append(human.si(node["flops"], "FLOP"))
        if node.get("weight_read_bytes"):
            detail.append(f"W {human.si(node['weight_read_bytes'], 'B')}")
        if node.get("kv_read_bytes") or node.get("kv_write_bytes"):
            read, write = node.get("kv_read_bytes", 0), node.get("kv_write_bytes", 0)
            detail.append(f"KV r {human.si(read, 'B')} w {human.si(write, 'B')}")
        if node.get("collective"):
            detail.append(f"{node['collective']} {human.si(node.get('collective_bytes', 0), 'B')}")
        label = str(node["name"]) + "\\n" + ", ".join(detail)
        colour = _COLOURS.get(str(node["kind"]), "white")
        lines.append(f"  {_quote(str(node['name']))} [label={_quote(label)}, fillcolor={colour}];")
    for edge in records["edges"]:
        label = ", ".join(edge.get("tensors", []))
        lines.append(
            f"  {_quote(edge['source'])} -> {_quote(edge['target'])} [label={_quote(label)}];"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_dot(graph: DiGraph) -> str:
    """Graphviz DOT text of a graph of Operators (`dot -Tsvg` renders it)."""
    return dot_from_records(graph_records(graph))


def to_graphml_graph(graph: DiGraph) -> Any:
    """A ``networkx.DiGraph`` copy with scalar node/edge attributes only (what GraphML can
    hold)."""
    plain = to_networkx(
        graph,
        lambda node: node_attributes(node["op"]),
        lambda edge: {"tensors": ",".join(edge.get("tensors", []))},
    )
    plain.graph = {"name": str(graph.name or "graph")}
    return plain


def write_graphml(graph: DiGraph, path: str | Path) -> None:
    """Write the graph as GraphML (the caller chooses the file; nothing else is written)."""
    import networkx as nx

    nx.write_graphml(to_graphml_graph(graph), str(path))
