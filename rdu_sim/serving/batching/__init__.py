"""Batching policies: when prefill work takes a step from decoding, and which.

A policy registers by name (``serving.prefill_priority``); a name taken by another class is
refused and an unknown one lists the valid names. Each shipped policy is one small module
beside this file, imported here (docs/architecture.md, "The serving level", adds one step by
step); a plugin's registers when its module is imported (``rdu_sim.plugins``).
"""

from rdu_sim.serving.batching import aging_spf, decode_first, prefill_first, static  # noqa: F401
from rdu_sim.serving.batching.base import (
    ADMIT,
    NO_PREFILL,
    BatchingPolicy,
    QueueView,
    batching_class,
    batching_names,
    check_batching,
    make_batching,
    register,
)

__all__ = [
    "ADMIT",
    "NO_PREFILL",
    "BatchingPolicy",
    "QueueView",
    "batching_class",
    "batching_names",
    "check_batching",
    "make_batching",
    "register",
]
