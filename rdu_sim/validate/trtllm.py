"""Convert TensorRT-LLM's published maximum-throughput table into a measurement file
(``rdu_sim.validate.measurement_file``'s format).

``python -m rdu_sim.validate.trtllm SOURCE.csv > measurements/NAME.csv`` converts the table
of NVIDIA/TensorRT-LLM's performance overview (docs/source/performance/perf-overview.md, the
v1.0 tables, as ../shared/reference/measurements/trtllm-h100-max-throughput.csv holds it):
each row, a ``trtllm-bench throughput`` run of ``requests`` requests of fixed lengths all
queued at once, becomes a full-load point (``batch`` auto: the engine at the largest batch
its KV memory holds) of output tokens/s over the run, on the hardware file and serving stack
that stand for the measured system. The KV cache dtype is not stated by the page; the
ModelOpt FP8 checkpoints it names carry an FP8 KV cache, so rows are written with FP8 KV (the
source's header says so; the converted file's header repeats it).
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from pathlib import Path

from rdu_sim.validate.measurement_file import print_converted

SYSTEMS = {("h100-sxm-80gb", "tensorrt-llm"): ("dgx-h100", "tensorrt-llm")}
"""(gpu, engine) -> (hardware file, serving stack)."""
KV_DTYPE = "fp8"
"""The KV cache dtype of every row (not stated by the source: see the module docstring)."""
METRICS = {"output_tokens_per_s": "output_tokens_per_s"}
"""The source's metric names -> the measurement format's."""
HEADER = (
    "hardware",
    "stack",
    "model",
    "tp",
    "batch",
    "requests",
    "input_tokens",
    "output_tokens",
    "weights",
    "kv",
    "metric",
    "measured",
    "label",
)


def convert(path: Path) -> Iterator[list[str]]:
    """The measurement rows of the table (header first); a row of another system or metric
    is a ValueError naming it (the table holds nothing else)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = csv.DictReader(line for line in lines if line.strip() and not line.startswith("#"))
    yield list(HEADER)
    for number, row in enumerate(rows, start=2):
        row = {key.strip(): value.strip() for key, value in row.items()}
        system = SYSTEMS.get((row["gpu"], row["engine"]))
        metric = METRICS.get(row["metric"])
        if system is None or metric is None:
            raise ValueError(
                f"{path}: row {number}: no hardware file stands for {row['gpu']} under "
                f"{row['engine']}, or no metric for {row['metric']}"
            )
        hardware, stack = system
        label = f"H100 SXM x{row['tp']} TensorRT-LLM {row['model']} {row['weights'].upper()}"
        yield [
            hardware,
            stack,
            row["model"],
            row["tp"],
            "auto",
            row["requests"],
            row["input_tokens"],
            row["output_tokens"],
            row["weights"],
            KV_DTYPE,
            metric,
            row["measured"],
            label,
        ]


def main(argv: list[str]) -> None:
    """Write the converted rows of ``argv[0]`` to standard output, below its comment lines."""
    source = Path(argv[0])
    print_converted(
        source,
        convert(source),
        f"python -m rdu_sim.validate.trtllm {source.name} (each row a full-load run: batch "
        f"auto, {KV_DTYPE.upper()} KV cache as assumed above)",
    )


if __name__ == "__main__":
    main(sys.argv[1:])
