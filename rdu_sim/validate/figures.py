"""The published figures, how each simulated figure is defined, and pass/fail.

A figure compares one published number with one simulated number. Every tolerance is
relative. A point figure passes when ``|simulated - published| <= tolerance * |published|``;
a bound ("over X": ``bound="at_least"``) passes when ``simulated >= published * (1 -
tolerance)``, whatever it is above. The prefill figure's published value is a range (2% to 5%);
it is written as its midpoint with the tolerance that spans the range (3.5% +- 1.5%), so
"inside 2%..5%" is exactly the same test as every other point figure's. A simulated value
that could not be measured (NaN) fails.

The simulated values come from ``Measurements`` (rdu_sim/validate/suite.py), which holds what
the calibration runs and steps measured through ``rdu_sim.api``: nothing here simulates
anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

SOURCE = "SnapStream, arXiv 2511.03092 (DeepSeek-R1, 16x SN40L, TP16, 128k)"
SINGLE_STREAM_SOURCE = (
    "SambaNova, 'SambaNova SN40L: Unleashing Agentic AI with Dataflow', "
    "DAC 2025 talk abstract: one rack of 16 SN40L RDUs serves "
    "DeepSeek-R1 671B at 198 tokens/s"
)
KL_SOURCE = "Kernel Looping, arXiv 2410.23668, abstract"
DAC_SOURCE = (
    "DAC 2025 talk abstract: 'over 75% of peak performance during token generation on 8 "
    "and 16 RDUs'"
)
BLOG_SOURCE = (
    "SambaNova blog 'Inference speed or throughput? With RDUs you don't have to choose': "
    "DeepSeek-R1 on one 16-RDU rack"
)
KL_READING = (
    "Llama 3.1 8B and 70B on 8 and 16 sockets, 405B on 16, BF16 weights and KV, batch 1, "
    "4,096 cached tokens, one node (rdu_sim/validate/decode_scaling.py)"
)


@dataclass(frozen=True)
class Measurements:
    """What the calibration runs measured (one SnapStream run, one full-attention run)."""

    batch_capacity_snapstream: int
    batch_capacity_full: int
    decode_tokens_per_s_snapstream: float  # steady state of the continuous-batching run
    decode_tokens_per_s_full: float
    prefill_prompt: int | None  # the typical compressed prompt (None: nothing compresses)
    prefill_s_snapstream: float  # that prompt's prefill, SnapKV selection included
    prefill_s_full: float  # the same prompt under full attention
    single_stream_tokens_per_s: float  # one request decoding alone (1 slot), after its first token
    single_stream_hbm_share: float  # that request's decode step: HBM bytes/s over the peak
    looping_speedup: float  # decode_scaling: largest looped-over-unlooped speedup
    multi_socket_scaling: float  # decode_scaling: 16 sockets looped over 8 unlooped
    peak_share_8: float  # decode_scaling: Llama 3.1 70B, 8 sockets, looped
    peak_share_16: float  # decode_scaling: Llama 3.1 405B, 16 sockets, looped
    # steady decode tokens/s of 256 closed-loop users on the rack, in each configuration
    throughput_256_users_tensor_parallel: float  # TP16 as the latency figures' runs
    throughput_256_users_data_parallel: float  # attention data-parallel, experts whole

    @property
    def throughput_256_users(self) -> float:
        """The rack configured for throughput: the higher of the two layouts that ran (a
        layout the hardware cannot run is NaN and left out; NaN only when neither ran)."""
        ran = [
            rate
            for rate in (
                self.throughput_256_users_tensor_parallel,
                self.throughput_256_users_data_parallel,
            )
            if math.isfinite(rate)
        ]
        return max(ran) if ran else math.nan


Bound = Literal["point", "at_least"]

PRODUCTION_STACK = "sambastack-2025"
"""SambaNova's production serving stack of 2025 (stacks/sambastack-2025.yaml), behind the
SnapStream deployment, the DAC 2025 talk and the blog: every figure measured on a served
DeepSeek-R1 names it."""

DEVICE = "none"
"""The figures of the hardware itself, measured with no serving stack (``stack=none``): Kernel
Looping's decode steps and the shares of peak."""


@dataclass(frozen=True)
class Figure:
    """One published figure and the precise definition of its simulated counterpart."""

    name: str
    published: float
    tolerance: float  # relative to |published|
    unit: str
    definition: str
    measure: Callable[[Measurements], float]
    bound: Bound = "point"  # "at_least": the publication says "over" the value
    stack: str = PRODUCTION_STACK  # the serving stack it was measured under (DEVICE: none)
    stated: str = ""  # the value as the publication words it ("up to 2.2x"); "": as published

    @property
    def low(self) -> float:
        """Smallest passing simulated value."""
        return self.published - self.tolerance * abs(self.published)

    @property
    def high(self) -> float:
        """Largest passing simulated value (infinite for a bound)."""
        if self.bound == "at_least":
            return math.inf
        return self.published + self.tolerance * abs(self.published)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 and math.isfinite(num) and math.isfinite(den) else math.nan


def _prefill_increase(m: Measurements) -> float:
    if m.prefill_prompt is None:
        return math.nan
    return _ratio(m.prefill_s_snapstream, m.prefill_s_full) - 1.0


FIGURES: tuple[Figure, ...] = (
    Figure(
        "max_batch_ratio",
        4.0,
        0.10,
        "x",
        "batch capacity (the largest batch the stack runs whose memory plan fits on a "
        "socket: SambaStack compiles its programs for powers of two) with SnapStream over "
        "full attention, both at max_context 128k",
        lambda m: _ratio(m.batch_capacity_snapstream, m.batch_capacity_full),
    ),
    Figure(
        "decode_throughput_ratio",
        4.3,
        0.10,
        "x",
        "steady-state decode tokens/s with SnapStream over full attention (each in its "
        "own continuous-batching run at its own batch capacity)",
        lambda m: _ratio(m.decode_tokens_per_s_snapstream, m.decode_tokens_per_s_full),
    ),
    Figure(
        "decode_throughput_snapstream",
        1832.0,
        0.15,
        "tokens/s",
        "steady-state decode tokens/s of the SnapStream continuous-batching run: output "
        "tokens emitted between the slots' first full turnover (completion number "
        "batch_slots) and the last admission, over that window; every slot is occupied "
        "throughout and prefill stalls are included",
        lambda m: m.decode_tokens_per_s_snapstream,
        stated="up to 1,832 tokens/s",
    ),
    Figure(
        "prefill_increase",
        0.035,
        0.015 / 0.035,
        "fraction",
        "prefill time of the workload's typical compressed prompt (the median of its "
        "prompt distribution above the SnapStream budget) with SnapStream (SnapKV "
        "selection included) over full attention for the same prompt, minus 1; "
        "published 2%..5%, written as 3.5% +- 1.5%",
        _prefill_increase,
        stated="2% to 5%",
    ),
    Figure(
        "decode_speed_batch1",
        198.0,
        0.15,
        "tokens/s",
        "output tokens/s of one request decoding alone, after its first token: the "
        "full-attention workload with 1 batch slot, 1000-token prompts and 1000 output "
        "tokens (Artificial Analysis's workload shape), (output - 1) / (finish - first "
        "token), median over the run's requests. "
        "Not a SnapStream figure: " + SINGLE_STREAM_SOURCE + " (a per-user speed, so "
        "an upper bound is what one slot gives); it checks the per-step hardware model "
        "(links, HBM, launch costs) at the opposite end from the max-batch figures",
        lambda m: m.single_stream_tokens_per_s,
    ),
    Figure(
        "looping_speedup",
        2.2,
        0.15,
        "x",
        "decode step time without kernel looping over with it, the largest over "
        + KL_READING
        + ". Published: looping speeds up decode 'by up to 2.2x on SN40L' ("
        + KL_SOURCE
        + ")",
        lambda m: m.looping_speedup,
        stack=DEVICE,
        stated="up to 2.2x",
    ),
    Figure(
        "multi_socket_scaling",
        2.5,
        0.15,
        "x",
        "decode tokens/s on 16 sockets with kernel looping over 8 sockets without it, the "
        "largest over the models of "
        + KL_READING
        + " that fit both. Published: looping 'allows scaling of decode performance over "
        "multiple SN40L sockets, achieving speedups of up to 2.5x' (" + KL_SOURCE + ")",
        lambda m: m.multi_socket_scaling,
        stack=DEVICE,
        stated="up to 2.5x",
    ),
    Figure(
        "peak_share_8_sockets",
        0.90,
        0.0,
        "fraction",
        "HBM bytes per second of the decode step over the HBM peak (1.8 TB/s: the memory "
        "roofline of the step's own bytes), Llama 3.1 70B (the largest Llama 3.1 that 8 "
        "sockets hold in BF16) on 8 sockets with kernel looping, batch 1, 4,096 cached "
        "tokens. Published: 'over 90% of peak performance on 8 and 16 sockets' (" + KL_SOURCE + ")",
        lambda m: m.peak_share_8,
        "at_least",
        stack=DEVICE,
        stated="over 90%",
    ),
    Figure(
        "peak_share_16_sockets",
        0.90,
        0.0,
        "fraction",
        "as peak_share_8_sockets, Llama 3.1 405B (the largest that 16 sockets hold in BF16) "
        "on 16 sockets. Published: 'over 90% of peak performance on 8 and 16 sockets' ("
        + KL_SOURCE
        + ")",
        lambda m: m.peak_share_16,
        "at_least",
        stack=DEVICE,
        stated="over 90%",
    ),
    Figure(
        "peak_share_token_generation",
        0.75,
        0.0,
        "fraction",
        "the smaller of two decode steps' HBM bytes per second over the HBM peak: Llama 3.1 "
        "70B on 8 sockets (peak_share_8_sockets) and DeepSeek-R1 on 16 (the "
        "decode_speed_batch1 request's step: FP8 weights, its 128k static slot); the talk "
        "is about DeepSeek-R1, which needs 16 sockets. Published: " + DAC_SOURCE,
        lambda m: min(m.peak_share_8, m.single_stream_hbm_share),
        "at_least",
        stack=DEVICE,
        stated="over 75%",
    ),
    Figure(
        "decode_speed_per_user",
        250.0,
        0.10,
        "tokens/s",
        "the same single-request measurement as decode_speed_batch1 (a per-user speed, so "
        "one slot is its upper end). Published: 'over 250 tokens/s per user' (" + BLOG_SOURCE + ")",
        lambda m: m.single_stream_tokens_per_s,
        "at_least",
        stated="over 250 tokens/s",
    ),
    Figure(
        "decode_throughput_256_users",
        4500.0,
        0.10,
        "tokens/s",
        "steady-state decode tokens/s (as decode_throughput_snapstream: prefill stalls "
        "included) of the full-attention DeepSeek-R1 workload serving 256 users, one request "
        "each in a closed loop, 1000-token prompts and 1000 output tokens, power-of-two "
        "decode buckets up to 4,096 tokens, 768 requests: the shape of Artificial Analysis's "
        "System Load Test (fixed concurrency, the next query sent when one finishes, 1,000 "
        "tokens in and out, aggregate output tokens/s over the phase), the benchmark the "
        "blog cites. 'Configured for throughput' is read as the better of the two layouts the "
        "simulator tries, SambaNova's being not public: the latency figures' TP16 "
        "(sequence-split attention, experts sliced 16 ways) with 256 slots, and attention "
        "data-parallel over the 16 sockets (16 users and their caches a socket) with the 256 "
        "routed experts whole, 16 a socket (DeepSeek's and SGLang's decode layout, "
        "docs/parallelism.md); nothing public says SN40L runs the latter. Under TP16 alone "
        "the figure fails (its steps bound by the links). Weak evidence: other lengths move "
        "the result too. Published: "
        "'over 4,500 tokens/s' with 256 concurrent users, the same rack configured for "
        "throughput (" + BLOG_SOURCE + ")",
        lambda m: m.throughput_256_users,
        "at_least",
        stated="over 4,500 tokens/s",
    ),
)
"""The four published figures of the SnapStream deployment, the single-stream speed of the
same rack, then SambaNova's Kernel Looping, DAC 2025 and blog figures, in report order."""


@dataclass(frozen=True)
class Row:
    """One line of the comparison (the JSON contract of ``rdu-sim validate --json``)."""

    figure: Figure
    simulated: float

    @property
    def relative_error(self) -> float:
        """(simulated - published) / |published| (NaN when nothing was measured)."""
        return (self.simulated - self.figure.published) / abs(self.figure.published)

    @property
    def passed(self) -> bool:
        """True when the simulated value lies inside the tolerance, or for a bound at or above
        its low end (NaN never passes)."""
        err = self.relative_error
        if not math.isfinite(err):
            return False
        limit = self.figure.tolerance * (1 + 1e-12)
        return err >= -limit if self.figure.bound == "at_least" else abs(err) <= limit

    def to_dict(self) -> dict[str, Any]:
        """name, published, simulated, relative_error, tolerance, pass (plus unit, the
        passing range, the bound, the value as stated and the definition); NaN and a bound's
        infinite high end become null so the JSON stays valid."""

        def num(x: float) -> float | None:
            # significant digits, not decimals: a 0.08% fraction keeps its precision
            return float(f"{x:.9g}") if math.isfinite(x) else None

        f = self.figure
        return {
            "name": f.name,
            "published": f.published,
            "simulated": num(self.simulated),
            "relative_error": num(self.relative_error),
            "tolerance": round(f.tolerance, 6),
            "pass": self.passed,
            "unit": f.unit,
            "low": num(f.low),
            "high": num(f.high),
            "bound": f.bound,
            "stated": f.stated or None,
            "definition": f.definition,
        }


def evaluate(measurements: Measurements, figures: Sequence[Figure] = FIGURES) -> list[Row]:
    """Compare every figure with what the runs measured."""
    return [Row(f, float(f.measure(measurements))) for f in figures]


def with_tolerances(
    overrides: Mapping[str, float], figures: Sequence[Figure] = FIGURES
) -> tuple[Figure, ...]:
    """The figures with some tolerances replaced; an unknown name or a negative tolerance is
    a ValueError naming the valid figures."""
    names = {f.name for f in figures}
    for name, tol in overrides.items():
        if name not in names:
            raise ValueError(f"unknown figure {name!r}; figures: {', '.join(sorted(names))}")
        if not (tol >= 0 and math.isfinite(tol)):
            raise ValueError(f"tolerance of {name} must be a finite number >= 0, got {tol}")
    return tuple(
        replace(f, tolerance=overrides[f.name]) if f.name in overrides else f for f in figures
    )
