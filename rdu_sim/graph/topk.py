"""A top-k of k of n scores on a device, pass by pass: the radix select SnapKV's top-k runs.

Why radix select: SnapKV's reference code calls ``torch.topk``, which on a GPU is a radix
select (PyTorch's ``SortingRadixSelect.cuh``; RAFT's AIR top-k, Zhang et al., SC'23), and a
static graph needs an algorithm whose passes do not depend on the data. A sort does not fit
a k this close to n (SnapStream keeps ~80% of the candidates): a bitonic sort of n = 2^16
keys makes 16 x 17 / 2 = 136 passes over them. A radix select finds the k-th largest score
digit by digit, then gathers the keys above it (and enough ties) in one more pass:

- the scores (FP32) are read as order-preserving 32-bit keys (``KEY_BITS``);
- ``digit_passes()`` = ceil(KEY_BITS / RADIX_BITS) passes, each reading every key, testing
  it against the digits fixed so far and counting its next digit in a histogram of
  2^RADIX_BITS counters, which it writes; a scan of the histogram fixes the digit of the
  k-th key for the next pass. A static graph runs every digit pass (no data-dependent
  early exit), and each needs the previous one's whole histogram: the passes are
  sequential;
- one gather pass reads every key again and writes the index of each kept one: those above
  the k-th key first, then ties until k (AIR top-k's last filter).

So ``passes(n, k)`` = ceil(32 / 8) + 1 = 5 whenever 0 < k < n, and 0 when nothing is dropped
(k >= n) or nothing kept (k = 0): it does not grow with n or k in between, since every pass
reads all n keys; the work does, linearly in n. The indices come out unsorted, which the
compaction does not mind (slot order does not change attention: docs/kv.md).

Operations per key (the vector unit's; integer operations counted as FLOPs, like the other
vector work): a digit pass makes the key (1: the scores are non-negative, so setting the
sign bit orders them), tests the fixed prefix (2: mask, compare), extracts the digit (2:
shift, mask) and increments its counter (1) = ``DIGIT_OPS``; the scan is ``SCAN_OPS`` = 2
per counter (add, compare); the gather makes the key (1), compares it with the k-th (1) and
advances the output position (1: a running count) = ``GATHER_OPS``. The histogram is
privatized per SIMD lane (32 lanes x 256 counters x 4 B = 32 KiB, as CUB's block
histograms are), so its increments do not conflict; it lives beside the unit (a PMU, an
SM's shared memory), so increments are operations, not memory traffic; what a pass moves
is its keys in and its histogram (or the indices) out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rdu_sim.graph.shape import FP32, INDEX

KEY_BITS = 32
"""Bits of a key: an FP32 score as an order-preserving unsigned integer."""

RADIX_BITS = 8
"""Bits fixed per digit pass: a histogram of 256 counters, small enough to privatize per lane
(PyTorch's multi-block top-k and llama.cpp's CUDA top-k use 8; AIR top-k 11, 3 passes)."""

DIGIT_OPS = 6
SCAN_OPS = 2
GATHER_OPS = 3


@dataclass(frozen=True)
class RadixPass:
    """One pass of a radix select over ``rows`` independent rows of ``n`` keys."""

    name: str  # "digit1" ... "digitD", "gather"
    read_bytes: float  # the keys read
    write_bytes: float  # the histogram (a digit pass) or the k indices (the gather)
    vector_flops: float


def digit_passes() -> int:
    """Digit passes of the radix select: ceil(KEY_BITS / RADIX_BITS)."""
    return math.ceil(KEY_BITS / RADIX_BITS)


def passes(n: int, k: int) -> int:
    """Passes over the n keys a top-k of k runs: the digit passes and the gather, or none
    when k keeps every key or none."""
    if n < 0 or k < 0:
        raise ValueError(f"top-k needs n >= 0 and k >= 0, got n={n}, k={k}")
    return digit_passes() + 1 if 0 < k < n else 0


def radix_select(n: int, k: int, rows: int = 1) -> tuple[RadixPass, ...]:
    """The passes of a top-k of ``k`` of ``n`` keys in each of ``rows`` rows, in order."""
    if passes(n, k) == 0:
        return ()
    bins = 2**RADIX_BITS
    digits = tuple(
        RadixPass(
            f"digit{i + 1}",
            read_bytes=rows * n * FP32,
            write_bytes=rows * bins * INDEX,
            vector_flops=rows * (DIGIT_OPS * n + SCAN_OPS * bins),
        )
        for i in range(digit_passes())
    )
    gather = RadixPass(
        "gather",
        read_bytes=rows * n * FP32,
        write_bytes=rows * k * INDEX,
        vector_flops=rows * GATHER_OPS * n,
    )
    return (*digits, gather)
