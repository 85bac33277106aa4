"""Sensitivity of the calibration figures to the unknowns: one `--set` override at a time.

    python -m rdu_sim.validate.sensitivity [--quick] [--only NAME ...]

For each unknown (HBM efficiency, P2P bandwidth and hop latency, the wiring and the collective
algorithm, two nodes instead of one, kernel sync cost, MLA cache layout, SnapStream budget,
length mix, full attention's decode graphs, MoE expert loading, weight precision) it runs the
whole calibration suite (`run_suite`, the code path of `rdu-sim validate`) with that one
override and prints a markdown table: each figure's simulated value and its change from the
baseline. Each label names the shipped value in parentheses, read from the files (``variants``).
The override reaches every DeepSeek-R1 run of the suite; a hardware override
(``hw.``) reaches the Llama 3.1 steps of the Kernel Looping figures too (they set their own
model, sockets and one node). A variant that cannot run
(e.g. weights that do not fit) is reported as such. docs/calibration.md holds the table this
printed.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

from rdu_sim import api, human
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.workload import LengthDistribution, LognormalLength
from rdu_sim.scenario import Scenario
from rdu_sim.validate.figures import FIGURES
from rdu_sim.validate.suite import FULL_WORKLOAD, SNAPSTREAM_WORKLOAD, SuiteResult, run_suite

Variant = tuple[str, tuple[str, ...]]
"""(label with the shipped value in parentheses, overrides applied to both workloads)."""


def _k(tokens: float) -> str:
    return f"{tokens / 1024:g}k"


def _median(length: LengthDistribution) -> str:
    return _k(length.median) if isinstance(length, LognormalLength) else length.dist


def variants(full: Scenario, snapstream: Scenario) -> tuple[Variant, ...]:
    """Every unknown's probes, each label naming the shipped value as the two workloads and
    their hardware file read it (a refit moves the labels with it); the P2P bandwidth and the
    inter-node link are probed at half and double what is shipped."""
    hw = full.hardware
    if not isinstance(hw, HardwareConfig):
        raise TypeError(f"{full.hardware_file}: the sensitivity suite probes an SN40L rack")
    link = hw.system.intra_node_link
    gbps = link.bandwidth / 1e9
    inter = hw.system.inter_node_link.bandwidth / 1e9
    node = hw.system.sockets_per_node
    hbm = f"({hw.socket.hbm.efficiency:g})"
    hop = f"({link.latency * 1e6:g})"
    sync = f"({hw.socket.kernel.sync * 1e6:g})"
    wiring = f"({hw.system.topology}, {hw.system.collective_algorithm})"
    algorithm = f"({hw.system.collective_algorithm})"
    nodes = f"(one {node}-socket node)"
    half = f"two {node // 2}-socket nodes"
    parallelism = full.workload.parallelism
    budget = snapstream.workload.kv.budget or 0
    serving = full.workload.serving
    buckets = full.workload.kv.context_buckets
    graphs = (
        f"one {_k(buckets[0])} graph"
        if isinstance(buckets, list) and len(buckets) == 1
        else str(buckets)
    )
    return (
        ("baseline", ()),
        (f"HBM efficiency 0.90 {hbm}", ("hw.socket.hbm.efficiency=0.9",)),
        (f"HBM efficiency 0.80 {hbm}", ("hw.socket.hbm.efficiency=0.8",)),
        (f"HBM efficiency 0.45 {hbm}", ("hw.socket.hbm.efficiency=0.45",)),
        *(
            (
                f"P2P {gbps * f:g} GB/s ({gbps:g})",
                (f"hw.system.intra_node_link.bandwidth={gbps * f:g} GB/s",),
            )
            for f in (0.5, 2.0)
        ),
        (f"P2P hop latency 0.5 us {hop}", ("hw.system.intra_node_link.latency=0.5 us",)),
        (f"P2P hop latency 3 us {hop}", ("hw.system.intra_node_link.latency=3 us",)),
        (
            f"ring of neighbour links, one way round {wiring}",
            ("hw.system.topology=ring", "hw.system.collective_algorithm=ring"),
        ),
        (f"ring of neighbour links, auto: both ways {wiring}", ("hw.system.topology=ring",)),
        (f"a link per pair, auto {wiring}", ("hw.system.topology=fully_connected",)),
        (
            f"{hw.system.topology}, ring forced {algorithm}",
            ("hw.system.collective_algorithm=ring",),
        ),
        (
            f"{hw.system.topology}, two-shot forced {algorithm}",
            ("hw.system.collective_algorithm=two_shot",),
        ),
        *(
            (
                f"{half}, {inter * f:g} GB/s between {nodes}",
                (
                    f"hw.system.sockets_per_node={node // 2}",
                    f"hw.system.inter_node_link.bandwidth={inter * f:g} GB/s",
                ),
            )
            for f in (1.0, 0.5)
        ),
        (f"kernel sync 5 us {sync}", ("hw.socket.kernel.sync=5 us",)),
        (f"kernel sync 50 us {sync}", ("hw.socket.kernel.sync=50 us",)),
        (
            f"MLA cache head_split ({parallelism.mla_cache_layout})",
            ("parallelism.mla_cache_layout=head_split",),
        ),
        (f"SnapStream budget 16k ({_k(budget)})", ("kv.budget=16384",)),
        (f"SnapStream budget 64k ({_k(budget)})", ("kv.budget=65536",)),
        (
            f"prompt median 16k ({_median(serving.prompt_tokens)})",
            ("serving.prompt_tokens.median=16384",),
        ),
        (
            f"output median 16k ({_median(serving.output_tokens)})",
            ("serving.output_tokens.median=16384",),
        ),
        (
            f"full attention: pow2 decode buckets ({graphs})",
            ("kv.context_buckets=pow2",),
        ),
        (
            f"MoE experts routed ({full.workload.moe_expert_loading})",
            ("moe_expert_loading=routed",),
        ),
        (
            f"MoE experts whole per socket, expert parallel (sliced: {parallelism.moe_experts})",
            ("parallelism.moe_experts=expert",),
        ),
        (f"weights bf16 ({full.weight_dtype})", ("dtypes.weights=bf16",)),
    )


def shipped_variants() -> tuple[Variant, ...]:
    """The variants read from the shipped workloads (the suite's own)."""
    return variants(api.load(FULL_WORKLOAD), api.load(SNAPSTREAM_WORKLOAD))


def _cell(value: float, base: float, unit: str) -> str:
    if not math.isfinite(value):
        return "n/a"
    text = human.in_unit(value, unit if unit in ("fraction", "x") else "", 4)
    if math.isfinite(base) and base != 0 and value != base:
        text += f" ({100 * (value / base - 1):+.0f}%)"
    return text


def _failure(exc: Exception) -> str:
    """Why a variant cannot run, in a table cell: a ConfigError's innermost issue (its field
    and problem: the outer ones name the files that led there), else the first line."""
    if isinstance(exc, ConfigError):
        issue = exc.issues[-1]
        text = f"{issue.field}: {issue.message}" if issue.field else issue.message
    else:
        text = str(exc).splitlines()[0]
    return f"{type(exc).__name__}: {text[:160]}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run every variant and print the markdown table (stdout) as rows finish."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests per run")
    parser.add_argument("--only", nargs="*", default=None, help="labels to run (substring)")
    args = parser.parse_args(argv)
    names = [f.name for f in FIGURES]
    print("| unknown (shipped) | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    base: dict[str, float] = {}
    for label, overrides in shipped_variants():
        if args.only and label != "baseline" and not any(o in label for o in args.only):
            continue
        try:
            result: SuiteResult = run_suite(quick=args.quick, overrides=overrides)
        except Exception as exc:  # a variant that does not fit is a result, not a crash
            print(
                f"| {label} | cannot run: {_failure(exc)} |" + " |" * (len(names) - 1), flush=True
            )
            continue
        values = {row.figure.name: row.simulated for row in result.rows}
        if label == "baseline":
            base = values
        cells = [_cell(values[f.name], base.get(f.name, math.nan), f.unit) for f in FIGURES]
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
