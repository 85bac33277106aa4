"""Fusion levels: how many operators of a layer share a kernel.

``fusion`` in the workload (SN40L paper, Table I, compares the three on a decoder layer):

- ``full``: the whole layer is one kernel, today's SN40L kernels (kernel looping, when the
  workload asks for it, then loops them over the layers);
- ``partial``: the fusions GPU serving stacks make (vLLM, SGLang, TensorRT-LLM), each a rule
  on the sharded layer graph:
  1. attention: score, softmax and value are one flash-attention kernel, which reads the KV
     cache itself;
  2. merged projections: products that read the same tensors (q/k/v, gate/up, MLA's q_a and
     kv_a) are one GEMM;
  3. epilogues: an element-wise operator (RoPE, SiLU-and-multiply, a residual add, the KV
     cache write) joins the kernel of its last producer when that kernel holds a GEMM (and
     none of its other producers depends on that kernel);
  4. fused add-norm: a norm whose only producer is a residual add on its own joins it;
  5. collectives stay kernels of their own (NCCL's);
- ``none``: one operator per kernel (attention too: the score matrix goes to HBM).
- ``auto``: ``full`` on SN40L, ``partial`` on a GPU (what each one's software does).

Every operator of the layer lands in exactly one kernel, except the KV-cache read
(``kv_read``), which is not work but the cache being streamed: it goes with each kernel that
consumes it, reading only the tensors that kernel takes (an unfused score and value each
read their part of the cache; an MLA latent both read is read twice). A tensor that crosses
a kernel boundary is written to HBM by its producer and read back by each consumer kernel,
which is what lowers the operational intensity (FLOPs per off-chip byte) of less fused
code. Kernels of a split layer keep the layer's call count and are never looped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Literal

from rdu_sim.graph import Operator, TensorSpec, op, operators
from rdu_sim.graph.digraph import DiGraph, ancestors

FusionLevel = Literal["none", "partial", "full"]
FUSION_LEVELS: tuple[FusionLevel, ...] = ("none", "partial", "full")

KV_READ = "kv_read"
ATTENTION = frozenset({"attention_score", "softmax", "attention_value", "flash_attention"})
GEMMS = frozenset({"gemm", "batched_gemm", "expert_gemm"})
EPILOGUES = frozenset({"rope", "silu_mul", "residual", "kv_write"})
COLLECTIVES = frozenset({"allreduce", "allgather", "reduce_scatter", "alltoall"})


def resolve_level(level: str, gpu: bool) -> FusionLevel:
    """The workload's ``fusion`` with ``auto`` resolved for the hardware kind."""
    if level == "auto":
        return "partial" if gpu else "full"
    if level not in FUSION_LEVELS:
        raise ValueError(f"unknown fusion level {level!r}; valid: auto, {', '.join(FUSION_LEVELS)}")
    return level


class _Groups:
    """Union-find over the graph's nodes (the smaller rank keeps its name: stable)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.rank = {name: i for i, name in enumerate(names)}
        self.parent = {name: name for name in self.rank}

    def find(self, name: str) -> str:
        while self.parent[name] != name:
            self.parent[name] = self.parent[self.parent[name]]
            name = self.parent[name]
        return name

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            keep, drop = (ra, rb) if self.rank[ra] < self.rank[rb] else (rb, ra)
            self.parent[drop] = keep


def operator_groups(graph: DiGraph, level: FusionLevel) -> list[list[str]]:
    """The kernels a layer graph splits into, each a list of operator names in topological
    order, the kernels in topological order; ``kv_read`` operators in none of them."""
    order = [node.name for node in operators(graph)]
    work = [name for name in order if op(graph, name).kind != KV_READ]
    if level == "full":
        return [work]
    groups = _Groups(work)
    if level == "partial":
        _partial(graph, work, groups)
    members: dict[str, list[str]] = {}
    for name in work:
        members.setdefault(groups.find(name), []).append(name)
    result = sorted(members.values(), key=lambda names: order.index(names[0]))
    _check_acyclic(graph, result)
    return result


def _kind(graph: DiGraph, name: str) -> str:
    return str(op(graph, name).kind)


def _partial(graph: DiGraph, work: list[str], groups: _Groups) -> None:
    """Apply the ``partial`` rules (module docstring) in topological order."""
    producers = {n: [p for p in graph.predecessors(n) if _kind(graph, p) != KV_READ] for n in work}
    for name in work:  # 1. attention chains
        if _kind(graph, name) in ATTENTION:
            for p in producers[name]:
                if _kind(graph, p) in ATTENTION:
                    groups.union(p, name)
    by_inputs: dict[tuple[str, ...], str] = {}
    for name in work:  # 2. merged projections: same producers (or the same layer inputs)
        if _kind(graph, name) not in GEMMS:
            continue
        key = tuple(sorted(producers[name])) or tuple(
            sorted(t.name for t in op(graph, name).inputs)
        )
        if key in by_inputs:
            groups.union(by_inputs[key], name)
        else:
            by_inputs[key] = name

    def members(root: str) -> set[str]:
        return {n for n in work if groups.find(n) == root}

    def has_gemm(root: str) -> bool:
        return any(_kind(graph, n) in GEMMS for n in members(root))

    def closes_loop(name: str, root: str) -> bool:
        """Joining ``root``'s kernel would make one of ``name``'s other producers both
        follow and feed that kernel (MLA's kv_norm between kv_a_proj and the KV write)."""
        group = members(root)
        return any(ancestors(graph, p) & group for p in producers[name] if groups.find(p) != root)

    order = {name: i for i, name in enumerate(work)}
    for name in work:
        kind = _kind(graph, name)
        if kind in EPILOGUES and producers[name]:  # 3. epilogues
            last = max(producers[name], key=order.__getitem__)
            root = groups.find(last)
            if has_gemm(root) and not closes_loop(name, root):
                groups.union(last, name)
        elif kind == "rmsnorm" and len(producers[name]) == 1:  # 4. fused add-norm
            (source,) = producers[name]
            if _kind(graph, source) == "residual" and not has_gemm(groups.find(source)):
                groups.union(source, name)


def _check_acyclic(graph: DiGraph, kernels: list[list[str]]) -> None:
    """The kernels must run one after another: no edge may lead back to an earlier one."""
    index = {name: i for i, names in enumerate(kernels) for name in names}
    for u, v in graph.edges:
        if u in index and v in index and index[u] > index[v]:
            raise RuntimeError(f"fusion made a cycle: {u!r} (a later kernel) feeds {v!r}")


def subgraph(graph: DiGraph, names: list[str]) -> DiGraph:
    """One kernel's graph: its operators, a scaled copy of each KV read they consume, and as
    ``inputs``/``outputs``/``output_nodes`` the tensors crossing its boundary (via HBM)."""
    members = set(names)
    kernel = DiGraph(name=graph.name)
    inputs: dict[str, TensorSpec] = {}
    for name in names:
        node = op(graph, name)
        kernel.add_node(name, op=node)
        for source in graph.predecessors(name):
            tensors = list(graph.edges[source, name]["tensors"])
            source_op = op(graph, source)
            if source in members:
                kernel.add_edge(source, name, tensors=tensors)
            elif source_op.kind == KV_READ:
                _attach_kv_read(kernel, source_op, name, tensors)
            else:
                inputs.update({t.name: t for t in node.inputs if t.name in tensors})
        external = graph.graph.get("inputs", {})
        inputs.update({t.name: external[t.name] for t in node.inputs if t.name in external})
    outputs: dict[str, TensorSpec] = {}
    finals: dict[str, str] = {}
    layer_finals = graph.graph.get("output_nodes", {})
    for name in names:
        node = op(graph, name)
        leaving = {
            t
            for target in graph.successors(name)
            if target not in members
            for t in graph.edges[name, target]["tensors"]
        }
        for tensor in node.outputs:
            if tensor.name in leaving or layer_finals.get(tensor.name) == name:
                outputs[tensor.name] = tensor
                finals[tensor.name] = name
    kernel.graph.update(inputs=inputs, outputs=outputs, output_nodes=finals)
    return kernel


def _attach_kv_read(kernel: DiGraph, kv_read: Operator, consumer: str, taken: list[str]) -> None:
    """Give ``kernel`` the part of a KV read its ``consumer`` takes (``taken`` tensors)."""
    if kv_read.name in kernel:
        existing = op(kernel, kv_read.name)
        names = {t.name for t in existing.outputs} | set(taken)
    else:
        names = set(taken)
    outputs = tuple(t for t in kv_read.outputs if t.name in names)
    total = sum(t.bytes for t in kv_read.outputs)
    share = sum(t.bytes for t in outputs) / total if total else 1.0
    copy = replace(kv_read, outputs=outputs, kv_read_bytes=kv_read.kv_read_bytes * share)
    kernel.add_node(kv_read.name, op=copy)
    if kernel.has_edge(kv_read.name, consumer):
        kernel.edges[kv_read.name, consumer]["tensors"].extend(taken)
    else:
        kernel.add_edge(kv_read.name, consumer, tensors=list(taken))
