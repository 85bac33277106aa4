"""Operators: the nodes of a dataflow graph, with the work and traffic of one call.

An Operator is plain frozen data. Its numbers are for the whole (unsharded) layer at one
static shape; the compiler's sharding pass divides them per socket, guided by `split`.

Traffic is split by what moves:
- weights: `weight_read_bytes` streamed per call (`weight_params` is what is resident, and
  `weight_bytes` its size at the storage dtypes, which may mix: gpt-oss's experts are MXFP4
  and their biases BF16; they differ for MoE experts, of which a call reads only the
  touched ones, and for an embedding gather, which reads only the looked-up rows);
- KV cache: `kv_read_bytes` / `kv_write_bytes`, to the tier the KV cache lives in;
- activations: the bytes of the input and output tensors (`inputs`, `outputs`), which stream
  between stages on-chip unless they cross a kernel boundary.

FLOPs: `flops` counts matrix products only (2 per multiply-add), as the model's figures do;
`vector_flops` counts elementwise work (norms, softmax, activations, RoPE, top-k).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from rdu_sim.shapes import AllToAllSpec, CollectiveKind, Gemm

__all__ = [
    "REPLICATED",
    "Axis",
    "CollectiveKind",
    "Combine",
    "Gemm",
    "GemmDim",
    "OpKind",
    "Operator",
    "Split",
    "TensorSpec",
]

OpKind = Literal[
    "gemm",
    "batched_gemm",
    "attention_score",
    "attention_value",
    "flash_attention",
    "softmax",
    "rmsnorm",
    "rope",
    "residual",
    "silu_mul",
    "router",
    "topk",
    "expert_gemm",
    "moe_combine",
    "kv_read",
    "kv_write",
    "gather",
    "pool",
    "reduce",
    "allreduce",
    "allgather",
    "reduce_scatter",
    "alltoall",
]

Axis = Literal["none", "heads", "kv_heads", "ffn", "experts", "vocab", "attention", "mla_cache"]
"""What an operator's work is parallel over, for tensor-parallel sharding.

- none: replicated, every socket does all of it (norms, MLA down-projections, router);
- heads / ffn / vocab / experts: split evenly over the TP sockets;
- kv_heads: GQA key/value heads, split over min(tp, kv_heads) (replicated beyond);
- attention: MLA decode attention over the cache, split over the sockets by heads or by
  sequence depending on `parallelism.mla_cache_layout`;
- mla_cache: MLA cache storage, replicated or split by the layout.
"""

Combine = Literal[
    "none",
    "sum",
    "sequence",
    "deferred",
    "gather",
    "seq_gather",
    "selection",
    "row_stats",
    "group_sum",
]
"""What follows a sharded operator so the next one sees a whole tensor.

- sum: the output is a partial sum over sockets (row-parallel GEMM, expert shares): all-reduce;
- sequence: partial attention over a sequence shard (MLA sequence_split): reduce-scatter of
  the outputs and their softmax statistics (log-sum-exp combine), heads scattered;
- deferred: a sequence-split attention's partial output carried on by the linear projection
  after it, whose own ``sequence`` combine finishes it (MLA's W_UV held whole on every
  socket: `compiler.mla_queries`); no collective here;
- gather: the output is split by columns (LM head vocab): all-gather;
- seq_gather: a sequence-split cache read that every socket needs whole (MLA sequence_split
  prefill of a cached prefix): all-gather;
- selection: SnapKV scores summed over the heads: partial sums of heads split across
  sockets (all-reduce) or the sequence shards of the MLA sequence_split layout (all-gather);
- row_stats: the softmax statistics (max and sum of exponentials per row) of rows whose
  keys are split by sequence (MLA sequence_split): all-reduce (a log-sum-exp combine);
- group_sum: SnapKV scores summed over a GQA group whose query heads are split over the
  sockets sharing its KV head (tp > kv_heads): all-reduce among those sockets.
"""

GemmDim = Literal["m", "n", "k", "batch"]


@dataclass(frozen=True)
class TensorSpec:
    """A tensor flowing along a graph edge: its name (unique producer), shape and element size."""

    name: str
    shape: tuple[int, ...]
    dtype_bytes: float

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def bytes(self) -> float:
        return self.elements * self.dtype_bytes


@dataclass(frozen=True)
class Split:
    """How an operator shards over TP sockets: which axis divides compute, weights, KV."""

    compute: Axis = "none"  # FLOPs, vector FLOPs and activation traffic
    weights: Axis = "none"  # resident and streamed weight bytes
    kv: Axis = "none"  # KV-cache bytes read and written
    gemm_dim: GemmDim | None = None  # the Gemm dimension the compute axis cuts
    combine: Combine = "none"

    @staticmethod
    def along(
        axis: Axis, gemm_dim: GemmDim | None = None, combine: Combine = "none", kv: Axis = "none"
    ) -> Split:
        """Compute and weights split along the same axis."""
        return Split(compute=axis, weights=axis, kv=kv, gemm_dim=gemm_dim, combine=combine)


REPLICATED = Split()


@dataclass(frozen=True)
class Operator:
    """One node of a dataflow graph: a kernel stage's operator and what one call costs."""

    name: str
    kind: OpKind
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    flops: float = 0  # matrix FLOPs
    vector_flops: float = 0  # elementwise FLOPs
    weight_params: int = 0  # parameters resident for this operator (full tables)
    weight_bytes: float = 0  # bytes of those parameters at their storage dtypes
    weight_read_bytes: float = 0  # weight bytes streamed per call
    kv_read_bytes: float = 0
    kv_write_bytes: float = 0
    gemm: Gemm | None = None
    collective: CollectiveKind | None = None
    collective_bytes: float = 0  # payload N of the collective (the full tensor)
    split: Split = field(default=REPLICATED)
    weights: str = ""  # name of the weight tensor read; "" means the operator's own name
    # Share of the tensors' bytes one socket reads / writes (set by sharding; the specs keep
    # the unsharded shapes).
    act_read_fraction: float = 1.0
    act_write_fraction: float = 1.0
    group: int = 1  # sockets taking part in the collective (set by sharding)
    # A tensor whose values select which weights are read (routed experts: the routing), so
    # the weight loads cannot start before it exists; "" when the weights are fixed.
    weights_selected_by: str = ""
    # An all-to-all's routing (set by sharding; `collective_bytes` is then one copy of each
    # of the socket's tokens).
    exchange: AllToAllSpec | None = None

    @property
    def weight_name(self) -> str:
        """The weight tensor this operator reads (shared by e.g. W_UK and W_UV of kv_b_proj)."""
        return self.weights or self.name

    @property
    def act_read_bytes(self) -> float:
        """Activation bytes read: the input tensors (this socket's share)."""
        return self.act_read_fraction * sum(t.bytes for t in self.inputs)

    @property
    def act_write_bytes(self) -> float:
        """Activation bytes written: the output tensors (this socket's share)."""
        return self.act_write_fraction * sum(t.bytes for t in self.outputs)

    @property
    def bytes_read(self) -> float:
        return self.weight_read_bytes + self.kv_read_bytes + self.act_read_bytes

    @property
    def bytes_written(self) -> float:
        return self.kv_write_bytes + self.act_write_bytes
