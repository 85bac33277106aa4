"""Convert Argonne's LLM-Inference-Bench result files (arXiv 2411.00136) into measurement
files (``rdu_sim.validate.measurement_file``'s format).

``python -m rdu_sim.validate.argonne SOURCE.csv > measurements/NAME.csv`` converts one of
the benchmark's published CSVs (its latency grid, or its time-to-first-token table): each row
becomes a point on the hardware file and serving stack that stand for the measured system,
SambaNova SN40L on ``sn40l-8`` under ``sambastudio-2024``, NVIDIA H100 on ``dgx-h100`` under
``tensorrt-llm`` or ``vllm`` (one machine, two stacks), Meta-Llama-3 and Mistral on their
presets.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from pathlib import Path

from rdu_sim.validate.measurement_file import REQUIRED, print_converted

HEADER = ("hardware", "stack", *REQUIRED[1:], "measured", "label")

MODELS = {
    "meta-llama/Meta-Llama-3-8B": "llama-3.1-8b",  # Llama 3.1 8B is Llama 3 8B's architecture
    "meta-llama/Meta-Llama-3-70B": "llama-3.1-70b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b",
}
SYSTEMS = {
    ("SambaNova SN40L", "sambaflow"): ("sn40l-8", "sambastudio-2024"),
    ("Nvidia H100 GPU", "TensorRT-LLM"): ("dgx-h100", "tensorrt-llm-2024"),
    ("Nvidia H100 GPU", "vLLM"): ("dgx-h100", "vllm-2024"),
}
"""The hardware file and the serving stack that stand for each measured (system, serving
engine): one hardware file per machine, whatever serves it."""


def convert(path: Path) -> Iterator[list[str]]:
    """The measurement rows of one Argonne CSV (header first), skipping rows of other
    systems, models or engines."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = csv.DictReader(line for line in lines if not line.startswith("#"))
    yield list(HEADER)
    for row in rows:
        row = {key.strip(): value.strip() for key, value in row.items()}
        model = MODELS.get(row["Model"])
        system = SYSTEMS.get((row["Hardware"], row["Framework"]))
        if model is None or system is None:
            continue
        if "TTFT Latency" in row:
            tokens, output, metric, value = (
                row["Input Length"],
                row["Output Length"],
                "ttft_s",
                row["TTFT Latency"],
            )
        else:
            tokens = output = row["Input Output Length"]
            metric, value = "e2e_s", row["Latency"]
        label = f"{row['Hardware']} x{row['Num of Hardware']} {row['Framework']} {row['Model']}"
        yield [
            *system,
            model,
            row["Num of Hardware"],
            row["Batch Size"],
            tokens,
            output,
            metric,
            value,
            label,
        ]


def main(argv: list[str]) -> None:
    """Write the converted rows of ``argv[0]`` to standard output, below its comment lines."""
    source = Path(argv[0])
    print_converted(
        source,
        convert(source),
        f"python -m rdu_sim.validate.argonne {source.name} (rows of SambaFlow, TensorRT-LLM "
        "and vLLM serving Llama 3 and Mistral)",
    )


if __name__ == "__main__":
    main(sys.argv[1:])
