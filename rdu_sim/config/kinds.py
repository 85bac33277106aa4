"""What kind of config file a parsed YAML document is, read off its top-level keys.

One rule for every command that takes "a file": `rdu-sim check` validates each kind,
`rdu-sim run` runs a workload or a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HARDWARE_KEYS = frozenset({"socket", "gpu", "system", "extends"})  # or an overlay of one
WORKLOAD_KEYS = frozenset({"hardware", "model"})
SWEEP_KEYS = frozenset({"base", "axes"})
CLUSTER_KEYS = frozenset({"pools"})
PLAN_KEYS = frozenset({"search"})
# a serving stack (or an overlay of one, with `extends`): keys no hardware file has
STACK_KEYS = frozenset(
    {"runs_on", "host", "sampling", "kv_page_tokens", "prefill_batch_tokens", "mixed_batching"}
)
CALIBRATION_KEYS = frozenset({"fit"})  # a calibration spec (rdu_sim.validate.calibration_spec)

KINDS_HELP = (
    "a hardware file has top-level 'socket' (or 'gpu') and 'system' (or 'extends'), a "
    "workload 'hardware' and "
    "'model', a sweep spec 'base' and 'axes', a cluster 'pools', a plan spec 'search', a "
    "serving stack 'runs_on' (an overlay of one 'extends' and its own fields), a calibration "
    "spec 'fit'"
)


def file_kind(data: Any) -> str | None:
    """'workload', 'hardware', 'stack', 'sweep', 'cluster', 'plan', 'calibration', or None when
    the keys say nothing."""
    if not isinstance(data, Mapping):
        return None
    keys = {str(k) for k in data}
    if keys & CALIBRATION_KEYS:
        return "calibration"
    if keys & PLAN_KEYS:
        return "plan"
    if keys & CLUSTER_KEYS:
        return "cluster"
    if keys & WORKLOAD_KEYS:
        return "workload"
    if keys & STACK_KEYS:
        return "stack"
    if keys & HARDWARE_KEYS:
        return "hardware"
    if keys & SWEEP_KEYS:
        return "sweep"
    return None
