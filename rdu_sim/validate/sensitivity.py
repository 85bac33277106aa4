"""Sensitivity of the calibration figures to the unknowns: one `--set` override at a time.

    python -m rdu_sim.validate.sensitivity [--quick] [--only NAME ...]

For each unknown (HBM efficiency, P2P bandwidth and hop latency, the wiring and the collective
algorithm, two nodes instead of one, kernel sync cost, MLA cache layout, SnapStream budget,
length mix, full attention's decode graphs, MoE expert loading, weight precision) it runs the
whole calibration suite (`run_suite`, the code path of `rdu-sim validate`) with that one
override and prints a markdown table: each figure's simulated value and its change from the
baseline. The override reaches every DeepSeek-R1 run of the suite; a hardware override
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

from rdu_sim import human
from rdu_sim.validate.figures import FIGURES
from rdu_sim.validate.suite import SuiteResult, run_suite

VARIANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("baseline", ()),
    ("HBM efficiency 0.90 (0.95)", ("hw.socket.hbm.efficiency=0.9",)),
    ("HBM efficiency 0.80 (0.95)", ("hw.socket.hbm.efficiency=0.8",)),
    ("HBM efficiency 0.45 (0.95)", ("hw.socket.hbm.efficiency=0.45",)),
    ("P2P 32 GB/s (64)", ("hw.system.intra_node_link.bandwidth=32 GB/s",)),
    ("P2P 128 GB/s (64)", ("hw.system.intra_node_link.bandwidth=128 GB/s",)),
    ("P2P hop latency 0.5 us (1)", ("hw.system.intra_node_link.latency=0.5 us",)),
    ("P2P hop latency 3 us (1)", ("hw.system.intra_node_link.latency=3 us",)),
    (
        "ring of neighbour links, one way round (switched, auto)",
        ("hw.system.topology=ring", "hw.system.collective_algorithm=ring"),
    ),
    ("ring of neighbour links, auto: both ways (switched, auto)", ("hw.system.topology=ring",)),
    ("a link per pair, auto (switched, auto)", ("hw.system.topology=fully_connected",)),
    ("switched, ring forced (auto)", ("hw.system.collective_algorithm=ring",)),
    ("switched, two-shot forced (auto)", ("hw.system.collective_algorithm=two_shot",)),
    ("two 8-socket nodes, 50 GB/s between (one 16-socket node)", ("hw.system.sockets_per_node=8",)),
    (
        "two 8-socket nodes, 25 GB/s between (one 16-socket node)",
        ("hw.system.sockets_per_node=8", "hw.system.inter_node_link.bandwidth=25 GB/s"),
    ),
    ("kernel sync 5 us (10)", ("hw.socket.kernel.sync=5 us",)),
    ("kernel sync 50 us (10)", ("hw.socket.kernel.sync=50 us",)),
    ("MLA cache head_split (sequence_split)", ("parallelism.mla_cache_layout=head_split",)),
    ("SnapStream budget 16k (32k)", ("kv.budget=16384",)),
    ("SnapStream budget 64k (32k)", ("kv.budget=65536",)),
    ("prompt median 16k (4k)", ("serving.prompt_tokens.median=16384",)),
    ("output median 16k (8k)", ("serving.output_tokens.median=16384",)),
    ("full attention: pow2 decode buckets (one 128k graph)", ("kv.context_buckets=pow2",)),
    ("MoE experts routed (static)", ("moe_expert_loading=routed",)),
    (
        "MoE experts whole per socket, expert parallel (sliced: tensor)",
        ("parallelism.moe_experts=expert",),
    ),
    ("weights bf16 (fp8)", ("dtypes.weights=bf16",)),
)
"""(label with the shipped value in parentheses, overrides applied to both workloads)."""


def _cell(value: float, base: float, unit: str) -> str:
    if not math.isfinite(value):
        return "n/a"
    text = human.in_unit(value, unit if unit in ("fraction", "x") else "", 4)
    if math.isfinite(base) and base != 0 and value != base:
        text += f" ({100 * (value / base - 1):+.0f}%)"
    return text


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
    for label, overrides in VARIANTS:
        if args.only and label != "baseline" and not any(o in label for o in args.only):
            continue
        try:
            result: SuiteResult = run_suite(quick=args.quick, overrides=overrides)
        except Exception as exc:  # a variant that does not fit is a result, not a crash
            print(
                f"| {label} | " + f"cannot run: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:120]} |" + " |" * (len(names) - 1),
                flush=True,
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
