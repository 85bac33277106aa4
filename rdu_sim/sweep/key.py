"""A point's identity: sha256 of its fully-resolved config (``rdu_sim.provenance``) and the
simulator's version, as canonical JSON.

Two points are the same point exactly when their validated workload, hardware and model are
equal, however the spec spelled them (axis order, "1.6 TB/s" vs 1.6e12, a preset name vs the
same architecture inline). That is what makes resume safe: a finished row is reused only for
an identical simulation input run by the same version of the simulator.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from rdu_sim import __version__
from rdu_sim.provenance import resolved_config

__all__ = ["canonical_json", "config_key", "jsonable", "resolved_config"]


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


def config_key(config: dict[str, Any]) -> str:
    """The sha256 (hex) of a resolved config's canonical JSON with the simulator's version:
    a row that another version computed is never reused (``rdu-sim sweep --rerun`` reruns
    rows of the same version, after a change between releases)."""
    keyed = {"config": config, "simulator_version": __version__}
    return hashlib.sha256(canonical_json(keyed).encode("ascii")).hexdigest()
