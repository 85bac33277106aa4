"""`--set a.b=value` overrides, applied to the raw YAML data before validation.

A value is parsed as YAML (so `64`, `true`, `"1.8 TB/s"`, `[1, 2]` all work), within the
same limits as a config file (depth, integer length, aliases: ``rdu_sim.config.yaml_io``);
text that is not YAML at all stays a string. Paths that start with `hw.` apply to the
hardware file's data, `stack.` to the serving stack's; all others to the workload's
(`stack=vllm-2024` itself names the workload's stack). An error at a field an override
set says which override, without a line (``overridden``), and where it was given: each
override carries its origin (:class:`GivenText`, :class:`GivenOverrides`); one that carries
none was given where the function that received it says (``origin_of``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.config.merge import merged
from rdu_sim.config.show import cut_middle
from rdu_sim.config.yaml_io import MAX_DEPTH, YamlLimitError, load_yaml
from rdu_sim.sim_warnings import RduSimWarning

HW_PREFIX = "hw."
STACK_PREFIX = "stack."
SET = "--set"
"""Where the command line's overrides come from: its flag (``rdu_sim.cli.options`` marks
each with it)."""
API = "overrides"
"""Where the Python API's overrides come from: the argument ``api.run(path, overrides)``
(and ``api.load``, ``api.step``, ``api_cluster.run_cluster`` ...) names them by; what a
caller hands it unmarked was given there."""

SUITE = "the validate suite"
"""Where the overrides the validation suite adds to a caller's come from: the single-stream,
the 256-user and the Kernel Looping runs' own (``rdu_sim.validate.suite``), so an error at
one names the suite, not the caller's ``--set``."""

SWEEP = "the sweep spec"
"""Where a sweep point's overrides come from: its spec's ``set`` and ``axes``
(``rdu_sim.sweep.expand``), in every process that runs the point alike."""


class GivenOverrides(dict[str, Any]):
    """Overrides applied (path -> value) that remember where they were given (``source``:
    ``--set``, ``overrides``, ``pools.serve.set``), so a rule checked after loading, far
    from the door (a run's refusal, its trace file), names the same origin the loader did."""

    source: str

    def __init__(self, items: Mapping[str, Any], source: str) -> None:
        super().__init__(items)
        self.source = source


class GivenText(str):
    """One override's text (``serving.batch_slots=64``) that remembers where it was given
    (``source``: ``--set``, ``the study's batch``). A list of overrides built from others
    (``[*overrides, "serving.requests=8"]``, a filter) keeps each one's origin, so an error at
    a field a tool set names the tool, not the user's ``--set`` (:func:`origin_of`)."""

    source: str

    def __new__(cls, text: str, source: str) -> GivenText:
        made = super().__new__(cls, text)
        made.source = source
        return made

    def __reduce__(self) -> tuple[type[GivenText], tuple[str, str]]:
        """Pickled with its origin (a calibration's or a suite's run crosses to a worker)."""
        return (GivenText, (str(self), self.source))


def given(overrides: Iterable[str], source: str) -> list[str]:
    """``overrides`` (``PATH=VALUE`` texts) marked as given at ``source``; one already
    marked keeps its own origin."""
    return [o if isinstance(o, GivenText) else GivenText(o, source) for o in overrides]


def origin_of(overrides: Iterable[str] | Mapping[str, Any] | None, default: str) -> str:
    """Where ``overrides`` were given, as the loaders name it for their errors: a marked
    mapping's ``source``; for texts, each one's own (:class:`GivenText`), ``default`` for one
    not marked (the door that received it: ``overrides`` for the API, ``--set`` for the
    loaders' own callers). Texts of more than one origin give a :class:`SetSource` that
    names each key's."""
    if isinstance(overrides, GivenOverrides):
        return overrides.source
    if overrides is None or isinstance(overrides, Mapping | str | bytes):
        return default
    if not isinstance(overrides, list | tuple):
        return default  # (an iterator is read once: by normalize_overrides)
    last = {  # each key's origin: the last text that sets it
        _key(text): text.source if isinstance(text, GivenText) else default
        for text in overrides
        if isinstance(text, str)
    }
    origins = set(last.values())
    if len(origins) == 1:
        return origins.pop()
    named = {key: override_origin(key, source) for key, source in last.items() if source != default}
    return SetSource(default, named) if named else default


def _key(text: str) -> str:
    """The field path of an override's text (``serving.batch_slots=64``)."""
    return text.partition("=")[0].strip()


def source_of(overrides: Mapping[str, Any]) -> str:
    """Where ``overrides`` were given: their own record (:class:`GivenOverrides`), else the
    command line's ``--set``."""
    return overrides.source if isinstance(overrides, GivenOverrides) else SET


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

    def __reduce__(self) -> tuple[type[SetSource], tuple[str, dict[str, str]]]:
        """Pickled with its origins (a pool's scenario crosses to a worker process)."""
        return (SetSource, (str(self), self.origins))


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


def plain(value: Any) -> Any:
    """A deep copy of ``value`` with NumPy's values as the Python values they hold: a
    scalar (``np.int64(4)``, ``np.bool_(True)``, ``np.float64``) its ``int``, ``bool`` or
    ``float``, an array its nested list; a ``Path`` its text. So
    ``{"serving.batch_slots": np.int64(4)}`` and a study over ``2 ** np.arange(12, 15)``
    validate as 4 and 4096 do, ``{"hardware": Path(...)}`` as the path written out, and a
    result's provenance records plain values. The one place an override's value is made plain
    (numpy is not imported: a value of its module is told by its type)."""
    if isinstance(value, Mapping):
        return {plain(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(plain(item) for item in value)
    if type(value).__module__ == "numpy" and callable(getattr(value, "tolist", None)):
        return plain(value.tolist())
    if isinstance(value, os.PathLike):  # a file's field (hardware, a trace) as a file holds it
        return os.fspath(value)
    return copy.deepcopy(value)


def written_value(value: Any) -> str:
    """``value`` as a ``--set`` value the override parser (YAML) reads back equal: a string
    as itself when it reads back so, else JSON (a YAML subset), else YAML's flow form (a
    plan's ``reproduce:`` arguments, a mapping of overrides handed where texts are read)."""
    candidates = [value] if isinstance(value, str) else []
    candidates.append(json.dumps(value, ensure_ascii=False))
    flow = yaml.safe_dump(value, default_flow_style=True, width=1 << 20, allow_unicode=True)
    candidates.append(flow.removesuffix("\n").removesuffix("\n...").strip())
    for text in candidates:
        try:
            if parse_override(f"value={text}")[1] == value:
                return str(text)
        except ConfigError:
            continue
    return str(candidates[-1])


def normalize_overrides(
    overrides: Iterable[str] | Mapping[str, Any] | None, source: str = SET
) -> dict[str, Any]:
    """Accept `["a.b=1"]` or `{"a.b": 1}`; return an ordered dict of path -> value, the
    values deep copies: a scenario (and the provenance of what it runs) owns its overrides,
    so a caller editing its dict afterwards changes nothing already loaded. NumPy values
    become the Python values they hold (:func:`plain`). A string that is no override is an
    error at ``source``, where it was given."""
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return {str(k): plain(v) for k, v in overrides.items()}
    return dict(
        parse_override(item, item.source if isinstance(item, GivenText) else source)
        for item in override_texts(overrides, "overrides", " or None")
    )


def override_texts(overrides: object, name: str, also: str = "") -> list[str]:
    """The ``PATH=VALUE`` texts of an iterable of them, unparsed; a mapping is refused as
    anything else (a caller that takes one reads it first). A bare string (iterable, a
    character at a time: each would be an override), anything not iterable, or an item
    that is no string is a TypeError naming ``name``, the argument (``also``: what else
    it may be, `` or None``)."""
    if isinstance(overrides, str | bytes | Mapping) or not isinstance(overrides, Iterable):
        raise TypeError(
            f"{name} must be a mapping ({{'serving.requests': 8}}), an iterable of "
            f"'field.path=value' strings (['serving.requests=8']){also}, not "
            f"{type(overrides).__name__} {cut_middle(repr(overrides))}"
        )
    items = list(overrides)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(
                f"{name}: each of an iterable of overrides must be a 'field.path=value' "
                f"string, not {type(item).__name__} {cut_middle(repr(item))}"
            )
    return items


def set_path(data: dict[str, Any], path: str, value: Any, source: str) -> None:
    """Set a dotted path inside nested dicts (creating mappings on the way). A mapping set
    where a mapping is merges into it (``config.merge``: ``serving.arrival={rate: 2.0}``
    keeps the arrival's process, as ``serving.arrival.rate=2.0`` does), unless it names
    another variant (``dist``, ``family`` ...); anything else replaces what was there."""
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
    node[parts[-1]] = merged(node.get(parts[-1]), copy.deepcopy(value))


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


class UnreadFieldWarning(RduSimWarning):
    """An override set a field the choice its section makes does not read (``kv.policy``,
    ``memory.weights``, ``serving.arrival.process``), or one the workload's kind of hardware
    does not (``cuda_graphs`` on SN40L: ``config.device_reads``): it changes nothing
    (:func:`unread_overrides`)."""


def set_fields(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The fields ``overrides`` set, by dotted path, each with its value: a mapping value
    sets each of its leaves (``serving.arrival={rate: 2.0}`` sets ``serving.arrival.rate``,
    as ``config.merge`` applies it); an empty mapping sets none. For the rules that ask
    which fields an override set (a field a choice does not read, a switched KV policy)."""
    fields: dict[str, Any] = {}

    def walk(path: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(f"{path}.{key}", item)
        else:
            fields[path] = value

    for path, value in overrides.items():
        walk(path, value)
    return fields


def unread_overrides(
    chooser: str, reads: Iterable[str] | None, overrides: Mapping[str, Any]
) -> list[str]:
    """The fields ``overrides`` set (dotted paths, as ``--set`` gives them: ``set_fields``)
    in the section of ``chooser`` (``kv.policy``: ``kv.*``; ``serving.arrival.process``:
    ``serving.arrival.*``) that its choice does not read (``reads``: the section's fields it
    does, ``chooser`` aside), each given a value (``null`` unsets a field: a sweep zipping
    ``kv.budget: [null, 32768]`` with ``kv.policy: [full, snapstream]`` sets none for full);
    none for an unknown choice (``reads`` None: its own error comes first). One rule for
    every section whose fields hang on a choice."""
    if reads is None:
        return []
    read = set(reads)
    section = chooser.rpartition(".")[0] + "."
    return unread_paths(
        (
            key
            for key in set_fields(overrides)
            if key.startswith(section)
            and key != chooser
            and key.removeprefix(section).split(".")[0] not in read
        ),
        overrides,
    )


def unread_paths(unread: Iterable[str], overrides: Mapping[str, Any]) -> list[str]:
    """The fields ``overrides`` set (``set_fields``) at or inside one of the ``unread`` paths,
    each given a value (``null`` unsets a field), in the order they were set: what
    :func:`unread_overrides` finds in a choice's section, and the fields a workload's kind of
    hardware does not read (``config.device_reads``). The one rule of which overrides change
    nothing."""
    paths = tuple(unread)
    return [
        key
        for key, value in set_fields(overrides).items()
        if value is not None and any(key == p or key.startswith(p + ".") for p in paths)
    ]


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


def blamed_overrides(fields: Sequence[str], overrides: Mapping[str, Any]) -> tuple[str, ...]:
    """The overrides that set any of ``fields`` (``override_for`` each), each once, in the
    order they were given: what an issue whose value several fields make names as its cause
    (``ConfigIssue.blame``), so a product names every override that enters it, not the
    first override under their parent."""
    found = {override_for(field, overrides) for field in fields} - {None}
    return tuple(path for path in overrides if path in found)


def setting_origin(field: str, file: str, overrides: Mapping[str, Any]) -> str:
    """Where a field's value came from, for a message about it that is not at the field
    itself: ``traffic.format of cluster.yaml``, or ``traffic.format, from --set
    traffic.format`` when an override set it (``override_for``; ``from overrides:
    traffic.format`` when the API's argument did: ``source_of``)."""
    path = override_for(field, overrides)
    if path is None:
        return f"{field} of {cut_middle(file)}"
    return f"{field}, from {override_origin(path, source_of(overrides))}"


def override_origin(path: str, source: str = SET) -> str:
    """The override at ``path`` as given at ``source``: ``--set PATH``, or, for a mapping of
    them, ``pools.serve.set: PATH`` or ``overrides: PATH`` (the API's argument); a key a
    :class:`SetSource` gives an origin, that origin (``the plan's search.tp``)."""
    origin = source.origins.get(path) if isinstance(source, SetSource) else None
    if origin:
        return origin
    between = " " if source == SET else ": "
    return f"{source}{between}{path}"


def override_note(path: str | Sequence[str], source: str = SET) -> str:
    """What an error at a field an override set ends with: ``(from --set PATH)``, or, for a
    mapping of them, ``(from pools.serve.set: PATH)``, ``(from overrides: PATH)``
    (:func:`override_origin`); several paths, each: ``(from --set A, --set B)``."""
    paths = (path,) if isinstance(path, str) else path
    return f"(from {', '.join(override_origin(p, source) for p in paths)})"


def overridden(
    exc: ConfigError,
    file: str,
    overrides: Mapping[str, Any],
    prefix: str = "",
    source: str | None = None,
) -> ConfigError:
    """``exc`` with each of its issues in ``file`` at a field an override set saying which
    override, without a line (the file's line holds the value the override replaced). The
    one rule for a pydantic issue and for a rule checked after validation alike, of a
    workload (its hardware and stack too) and of a cluster file.

    ``source`` names where the overrides were given: ``--set`` reads ``(from --set
    serving.batch_slots)``; a file's mapping of them, ``pools.serve.set``, reads ``(from
    pools.serve.set: serving.batch_slots)``, the key as written there; a key a
    :class:`SetSource` gives an origin reads ``(from the plan's search.tp)``; no ``source``,
    where ``overrides`` say they were given (``source_of``)."""
    given = source_of(overrides) if source is None else source
    issues = []
    for issue in exc.issues:
        paths = blamed_overrides(issue.blame or (issue.field,), overrides)
        if paths and issue.file == file:
            note = override_note([prefix + path for path in paths], given)
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
