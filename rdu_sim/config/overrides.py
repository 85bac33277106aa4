"""`--set a.b=value` overrides, applied to the raw YAML data before validation.

A value is parsed as YAML (so `64`, `true`, `"1.8 TB/s"`, `[1, 2]` all work), within the
same limits as a config file (depth, integer length, aliases: ``rdu_sim.config.yaml_io``);
text that is not YAML at all stays a string. Paths that start with `hw.` apply to the
hardware file's data, `stack.` to the serving stack's; all others to the workload's
(`stack=vllm-2024` itself names the workload's stack). An error at a field an override
set says which override, without a line (``overridden``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.config.show import cut_middle
from rdu_sim.config.yaml_io import MAX_DEPTH, YamlLimitError, load_yaml

HW_PREFIX = "hw."
STACK_PREFIX = "stack."
SET = "--set"
"""Where overrides come from unless a caller says: the command line's flag."""


class SetSource(str):
    """Where a mapping of overrides was given (``pools.serve.set``), with, for keys whose
    value a tool put there from a file of its own, that origin (a plan puts its search's
    axes into its pool's set: ``{"parallelism.tp": "the plan's search.tp"}``). An error at
    such a key names the origin, the field the user wrote (``overridden``)."""

    origins: dict[str, str]

    def __new__(cls, text: str, origins: Mapping[str, str]) -> SetSource:
        made = super().__new__(cls, text)
        made.origins = dict(origins)
        return made


def _is_text(text: str) -> bool:
    """Whether `text` is Unicode text (not undecodable bytes from the command line)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_override(text: str, source: str = "--set") -> tuple[str, Any]:
    """'serving.batch_slots=64' -> ('serving.batch_slots', 64)."""
    if "=" not in text:
        raise ConfigError.single(source, text, "an override must look like field.path=value")
    path, _, raw = text.partition("=")
    path = path.strip()
    for part, what in ((path, "field path"), (raw, "value")):
        if not _is_text(part):  # bytes a UTF-8 locale cannot decode (Python's surrogates)
            shown = path.encode("utf-8", "backslashreplace").decode("utf-8")
            raise ConfigError.single(source, shown, f"the {what} is not valid UTF-8 text")
    if not path or any(not part for part in path.split(".")):
        raise ConfigError.single(source, path, "empty field name in override")
    if not raw.strip():
        return path, ""
    try:
        value, _ = load_yaml(raw)
    except YamlLimitError as exc:
        raise ConfigError.single(source, path, f"the value is refused: {exc.message}") from None
    except yaml.YAMLError:
        value = raw
    return path, value


def normalize_overrides(overrides: Iterable[str] | Mapping[str, Any] | None) -> dict[str, Any]:
    """Accept `["a.b=1"]` or `{"a.b": 1}`; return an ordered dict of path -> value, the
    values deep copies: a scenario (and the provenance of what it runs) owns its overrides,
    so a caller editing its dict afterwards changes nothing already loaded."""
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return {str(k): copy.deepcopy(v) for k, v in overrides.items()}
    if isinstance(overrides, str | bytes) or not isinstance(overrides, Iterable):
        # a str is iterable, one character at a time: each would be an override
        raise TypeError(
            f"overrides must be a mapping ({{'serving.requests': 8}}), an iterable of "
            f"'field.path=value' strings (['serving.requests=8']) or None, not "
            f"{type(overrides).__name__} {cut_middle(repr(overrides))}"
        )
    items = list(overrides)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(
                f"overrides: each of an iterable of overrides must be a 'field.path=value' "
                f"string, not {type(item).__name__} {cut_middle(repr(item))}"
            )
    return dict(parse_override(item) for item in items)


def set_path(data: dict[str, Any], path: str, value: Any, source: str) -> None:
    """Set a dotted path inside nested dicts (creating mappings on the way)."""
    parts = path.split(".")
    if len(parts) > MAX_DEPTH:
        raise ConfigError.single(
            source,
            path,
            f"the field path has {len(parts)} parts; a config is at most {MAX_DEPTH} levels deep",
        )
    node: Any = data
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = {}
            node[part] = child
        if not isinstance(child, dict):
            where = ".".join(parts[: depth + 1])
            raise ConfigError.single(
                source,
                path,
                f"cannot set inside {where!r}, which is {type(child).__name__}, not a mapping",
            )
        node = child
    node[parts[-1]] = copy.deepcopy(value)


def split_overrides(
    overrides: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Separate workload overrides from `hw.` hardware and `stack.` stack overrides (each
    prefix removed)."""
    workload: dict[str, Any] = {}
    hardware: dict[str, Any] = {}
    stack: dict[str, Any] = {}
    for key, value in overrides.items():
        if key.startswith(HW_PREFIX):
            hardware[key[len(HW_PREFIX) :]] = value
        elif key.startswith(STACK_PREFIX):
            stack[key[len(STACK_PREFIX) :]] = value
        else:
            workload[key] = value
    return workload, hardware, stack


def override_for(field: str, overrides: Mapping[str, Any]) -> str | None:
    """The override path that set `field`, if any: the field itself, else the nearest of its
    parents (what set its value), else the first of its children. So `--set
    serving.batch_slots=4 --set serving=1` blames `serving`, not the first path under it."""
    if field in overrides:
        return field
    parents = [path for path in overrides if field.startswith(path + ".")]
    if parents:
        return max(parents, key=len)
    return next((path for path in overrides if field and path.startswith(field + ".")), None)


def setting_origin(field: str, file: str, overrides: Mapping[str, Any]) -> str:
    """Where a field's value came from, for a message about it that is not at the field
    itself: ``traffic.format of cluster.yaml``, or ``traffic.format, from --set
    traffic.format`` when an override set it (``override_for``)."""
    path = override_for(field, overrides)
    return f"{field}, from --set {path}" if path else f"{field} of {cut_middle(file)}"


def override_note(path: str, source: str = SET) -> str:
    """What an error at a field an override set ends with: ``(from --set PATH)``, or, for a
    file's mapping of them, ``(from pools.serve.set: PATH)``."""
    between = " " if source == SET else ": "
    return f"(from {source}{between}{path})"


def overridden(
    exc: ConfigError,
    file: str,
    overrides: Mapping[str, Any],
    prefix: str = "",
    source: str = SET,
) -> ConfigError:
    """``exc`` with each of its issues in ``file`` at a field an override set saying which
    override, without a line (the file's line holds the value the override replaced). The
    one rule for a pydantic issue and for a rule checked after validation alike, of a
    workload (its hardware and stack too) and of a cluster file.

    ``source`` names where the overrides were given: ``--set`` reads ``(from --set
    serving.batch_slots)``; a file's mapping of them, ``pools.serve.set``, reads ``(from
    pools.serve.set: serving.batch_slots)``, the key as written there; a key a
    :class:`SetSource` gives an origin reads ``(from the plan's search.tp)``."""
    origins = source.origins if isinstance(source, SetSource) else {}
    issues = []
    for issue in exc.issues:
        path = override_for(issue.field, overrides) if issue.file == file else None
        if path is not None:
            origin = origins.get(prefix + path)
            note = f"(from {origin})" if origin else override_note(prefix + path, source)
            issue = dataclasses.replace(issue, line=None, message=f"{issue.message} {note}")
        issues.append(issue)
    return type(exc)(issues)


def in_context(
    exc: ConfigError,
    named: ConfigIssue,
    file: str,
    overrides: Mapping[str, Any],
    set_by: str = "",
) -> ConfigError:
    """``exc``, the issues of a file another includes (a hardware or stack ``file``), each
    ending with where the including file names it (``named``: its file, field and line):
    ``(the hardware of w.yaml:3)``, or, when an override set that field (``set_by``, its
    :func:`override_note`), ``(the hardware of w.yaml, from --set hardware)``; so each issue
    is one whole line naming the file, the field and the problem. Unchanged when every issue
    is at a field an override of the included file set (``override_for``): the file is then
    not at fault, and each issue's note names the override (:func:`overridden`)."""
    if exc.issues and all(
        issue.file == file and override_for(issue.field, overrides) is not None
        for issue in exc.issues
    ):
        return exc
    where = named.file if set_by or named.line is None else f"{named.file}:{named.line}"
    how = f", {set_by.removeprefix('(').removesuffix(')')}" if set_by else ""
    said = f" (the {named.field} of {where}{how})"
    return ConfigError([dataclasses.replace(i, message=i.message + said) for i in exc.issues])
