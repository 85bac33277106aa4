"""``--out DIR``: result.json, requests.csv (one row per request), timeseries.csv.

Files are written only when asked (no side effects elsewhere), with stable column order and
float formatting, so the same run writes byte-identical files.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

RESULT_FILE = "result.json"
REQUESTS_FILE = "requests.csv"
TIMESERIES_FILE = "timeseries.csv"


def _cell(value: Any) -> str:
    if isinstance(value, float | np.floating):
        return "" if not np.isfinite(value) else f"{float(value):.12g}"
    return str(value)


def write_columns(path: Path, columns: Mapping[str, NDArray[Any]]) -> None:
    """Write equal-length columns as CSV with a header row."""
    names = list(columns)
    data = [columns[name].tolist() for name in names]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(names)
        for row in zip(*data, strict=True):
            writer.writerow([_cell(v) for v in row])


def write_json(path: Path, result: Mapping[str, Any]) -> None:
    """The result dict as JSON (sorted keys, 2-space indent, trailing newline)."""
    path.write_text(json.dumps(result, sort_keys=True, indent=2) + "\n", encoding="utf-8")


def write_outputs(
    out_dir: Path | str,
    result: Mapping[str, Any],
    requests: Mapping[str, NDArray[Any]],
    timeseries: Mapping[str, NDArray[Any]],
) -> list[Path]:
    """Write the three files into ``out_dir`` (created if needed); return their paths."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / RESULT_FILE, folder / REQUESTS_FILE, folder / TIMESERIES_FILE]
    write_json(paths[0], result)
    write_columns(paths[1], requests)
    write_columns(paths[2], timeseries)
    return paths
