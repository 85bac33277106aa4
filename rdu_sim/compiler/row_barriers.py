"""Which stages of a kernel finish a row of their output only at the end of that row.

A pipeline stage streams its work as tiles. Along the rows (tokens) of a step, tiles are
independent: row r of a norm or a GEMM needs only row r of its input, so with many rows a
consumer works on one group of rows while its producer works on the next. With fewer rows
than tiles (batch-1 decode: one row), the tiles cut *through* a row, and then whether a
consumer can start before its producer has finished the row depends on the operator:

- a reduction along the row finishes nothing before it has seen the whole row: an RMS norm
  (the sum of squares), a softmax or top-k, attention (streaming the cached keys, it
  finishes every head only after the last block), the MoE combine (a sum over the token's
  experts);
- a GEMM may tile either side of its reduction. Fed all at once (its input row arrives
  whole, from one of the reductions above), it tiles its output columns: it needs the whole
  input first, then emits finished columns tile by tile. Fed tile by tile (from a stage that
  streams), it consumes its input along its reduction dimension as it arrives and finishes
  its output row only with the last input tile. A compiler chains GEMVs this way (columns,
  then the reduction dimension, then columns), and this module picks the same;
- everything else is elementwise along the row or independent per head (RoPE, SiLU-mul,
  residual adds, the per-head latent products of MLA, KV reads and writes, collectives): a
  tile of output needs only the matching tile of input, and it streams.

`whole_row_stages` returns the stages of the first two kinds whose output rows are finished
only at the end (`StageProgram.whole_row_outputs`); the engine holds their consumers until
then when a step has fewer rows than tiles (`engine.stage_runner`). The engine's tiles are a
simulation granularity: what this charges is the data dependency of one row, whatever the
tiling (a consumer of a finished row computes all of that row after it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

ROW_REDUCTIONS = frozenset(
    {"rmsnorm", "softmax", "topk", "flash_attention", "attention_value", "moe_combine", "pool"}
)
"""Operators whose output row is a reduction over their whole input row."""

GEMMS = frozenset({"gemm", "router", "expert_gemm"})
"""Matrix products over the row's hidden dimension: they tile either side of the reduction."""


def whole_row_stages(stages: Sequence[tuple[str, str, Sequence[str]]]) -> set[str]:
    """Names of the stages that finish an output row only at its end.

    ``stages``: (name, operator kind, producer names), topologically ordered (producers
    first). A stage's output *arrives whole* when it finishes rows only at their end, or when
    it is elementwise and all its inputs arrive whole (a stage with no producer in the kernel
    streams). A GEMM fed only by inputs that arrive whole tiles its output columns and
    streams; fed by any streaming input it reduces along it and finishes rows at the end.
    """
    whole: dict[str, bool] = {}  # stage -> its output arrives whole
    reducing: set[str] = set()
    for name, kind, inputs in stages:
        fed_whole = bool(inputs) and all(_arrives_whole(whole, p) for p in inputs)
        if kind in ROW_REDUCTIONS or (kind in GEMMS and not fed_whole):
            reducing.add(name)
            whole[name] = True
        elif kind in GEMMS:
            whole[name] = False  # fed whole: finished columns stream out
        else:
            whole[name] = fed_whole
    return reducing


def _arrives_whole(whole: Mapping[str, bool], producer: str) -> bool:
    if producer not in whole:
        raise ValueError(f"stage input {producer!r} is not an earlier stage")
    return whole[producer]
