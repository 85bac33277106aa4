"""A point's identity: sha256 of its fully-resolved config as canonical JSON.

Two points are the same point exactly when their validated workload, hardware and model are
equal, however the spec spelled them (axis order, "1.6 TB/s" vs 1.6e12, a preset name vs the
same architecture inline). That is what makes resume safe: a finished row is reused only for
an identical simulation input.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from rdu_sim.config.yaml_io import file_problem
from rdu_sim.scenario import Scenario

# Fields that describe a config without changing what it simulates.
_COSMETIC = ("description",)


def _jsonable(value: Any) -> Any:
    """Plain JSON types only: numpy scalars via .item(), non-finite floats as None."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    item = getattr(value, "item", None)
    if callable(item):
        return _jsonable(item())
    return str(value)


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no whitespace, plain types."""
    return json.dumps(
        _jsonable(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def jsonable(value: Any) -> Any:
    """`value` with only plain JSON types (what the store writes)."""
    return _jsonable(value)


def _file_digest(path: Path) -> str | None:
    """sha256 of a regular file, read in chunks (a FIFO would block, a huge file fill memory);
    None when it cannot be read (the run then reports the trace's problem itself)."""
    if file_problem(path) is not None:
        return None
    digest = hashlib.sha256()
    try:
        with path.open("rb") as stream:
            for chunk in iter(lambda: stream.read(2**20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def resolved_config(scenario: Scenario) -> dict[str, Any]:
    """Everything a simulation depends on, as plain data.

    The workload's `hardware` path and its `model` (a preset name or a mapping) are replaced
    by the hardware and architecture themselves; a trace file is represented by the sha256 of
    its content, so editing the trace changes the key.
    """
    workload = scenario.workload.model_dump(mode="json")
    workload["hardware"] = None
    workload["model"] = None
    hardware = scenario.hardware.model_dump(mode="json")
    for field in _COSMETIC:
        workload.pop(field, None)
        hardware.pop(field, None)
    config: dict[str, Any] = {
        "workload": workload,
        "hardware": hardware,
        "model": scenario.model.model_dump(mode="json"),
    }
    trace = scenario.workload.serving.trace
    if trace is not None:
        path = Path(trace)
        config["trace_sha256"] = _file_digest(
            path if path.is_absolute() else scenario.base_dir / path
        )
    return config


def config_key(config: dict[str, Any]) -> str:
    """The sha256 (hex) of a resolved config's canonical JSON."""
    return hashlib.sha256(canonical_json(config).encode("ascii")).hexdigest()
