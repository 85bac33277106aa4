"""What kind of config file a parsed YAML document is, read off its top-level keys.

One rule for every command that takes "a file": `rdu-sim check` validates each kind,
`rdu-sim run` runs a workload or a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

HARDWARE_KEYS = frozenset({"socket", "gpu", "system", "extends"})  # or an overlay of one
WORKLOAD_KEYS = frozenset({"hardware", "model"})
SWEEP_KEYS = frozenset({"base", "axes"})
CLUSTER_KEYS = frozenset({"pools"})
PLAN_KEYS = frozenset({"search"})
# a serving stack (or an overlay of one, with `extends`): keys no hardware file has
STACK_KEYS = frozenset(
    {
        "runs_on",
        "host",
        "sampling",
        "speculative_rounds",
        "kv_page_tokens",
        "prefill_batch_tokens",
        "mixed_batching",
        "max_batch_slots",
        "batch_programs",
        "decode_program",
        "decode_attention_split",
        "kv_memory_fraction",
        "memory_utilization",
        "kv_allocation",
        "kv_watermark",
    }
)
CALIBRATION_KEYS = frozenset({"fit"})  # a calibration spec (rdu_sim.validate.calibration_spec)

KINDS_HELP = (
    "a hardware file has top-level 'socket' (or 'gpu') and 'system' (or 'extends'), a "
    "workload 'hardware' and "
    "'model', a sweep spec 'base' and 'axes', a cluster 'pools', a plan spec 'search', a "
    "serving stack 'runs_on' (an overlay of one 'extends' and its own fields), a calibration "
    "spec 'fit'"
)


KIND_KEYS: tuple[tuple[frozenset[str], str], ...] = (
    (CALIBRATION_KEYS, "calibration"),
    (PLAN_KEYS, "plan"),
    (CLUSTER_KEYS, "cluster"),
    (WORKLOAD_KEYS, "workload"),
    (STACK_KEYS, "stack"),
    (HARDWARE_KEYS, "hardware"),
    (SWEEP_KEYS, "sweep"),
)
"""Each kind's keys, in the order they decide (a plan names a cluster file: ``search`` first)."""


def file_kind(data: Any) -> str | None:
    """'workload', 'hardware', 'stack', 'sweep', 'cluster', 'plan', 'calibration', or None when
    the keys say nothing."""
    if not isinstance(data, Mapping):
        return None
    keys = {str(k) for k in data}
    return next((kind for named, kind in KIND_KEYS if keys & named), None)


def misspelt_kind_key(data: Mapping[Any, Any]) -> tuple[str, str, str] | None:
    """A top-level key close to a key that names a kind (``serach`` for ``search``), for a
    file :func:`file_kind` cannot place: (the key, the key it is close to, that kind)."""
    import difflib

    kinds = {key: kind for named, kind in KIND_KEYS for key in sorted(named)}
    for key in map(str, data):
        close = difflib.get_close_matches(key, list(kinds), n=1, cutoff=0.8)
        if close:
            return key, close[0], kinds[close[0]]
    return None


KIND_WORDS = {
    "workload": "workload file",
    "hardware": "hardware file",
    "stack": "serving stack",
    "sweep": "sweep spec",
    "cluster": "cluster file",
    "plan": "plan spec",
    "calibration": "calibration spec",
}
"""Each kind as a message names it."""


def kind_problem(data: Any, named: str, expected: str) -> str | None:
    """Why the parsed config `data` (the file a field names as `named`) cannot be the
    `expected` kind: it is another kind of config file (a sweep's base that is a cluster, a
    plan's cluster that is a workload). None when it is `expected` or says no kind: its
    loader then names what is wrong, field by field."""
    found = file_kind(data)
    if found is None or found == expected:
        return None
    return f"{named!r} is a {KIND_WORDS[found]}, not a {KIND_WORDS[expected]} ({KINDS_HELP})"


USED_BY = {
    "workload": "`rdu-sim run FILE` runs it",
    "cluster": "`rdu-sim run FILE` runs it",
    "sweep": "`rdu-sim sweep FILE` runs it",
    "plan": "`rdu-sim plan FILE` runs it",
    "calibration": "`rdu-sim calibrate FILE` runs it",
    "hardware": "a workload names it (hardware: FILE)",
    "stack": "a workload names it (stack: FILE)",
}
"""How a file of each kind is used (``FILE``: the file), for a command given the wrong kind."""


def refuse_other_kind(data: Any, file: str, expected: str) -> None:
    """ConfigError naming ``file`` when the file a command was given (parsed: ``data``) is
    another kind of config file than the ``expected`` one it reads, with how that kind is
    used; nothing when it is ``expected`` or says no kind (its loader then names what is
    wrong, field by field)."""
    from rdu_sim.config.errors import ConfigError

    found = file_kind(data)
    if found is None or found == expected:
        return
    how = USED_BY[found].replace("FILE", file)
    message = f"this is a {KIND_WORDS[found]}, not a {KIND_WORDS[expected]}: {how}"
    raise ConfigError.single(file, "", message)


def file_kind_problem(path: Path, named: str, expected: str) -> str | None:
    """:func:`kind_problem` of the file at `path` (None when it cannot be read: its loader
    says why)."""
    from rdu_sim.config.errors import ConfigError
    from rdu_sim.config.loader import read_yaml

    try:
        data, _ = read_yaml(path)
    except ConfigError:
        return None
    return kind_problem(data, named, expected)
