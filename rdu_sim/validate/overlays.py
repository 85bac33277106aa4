"""The calibrated overlays: fitted values as files a user can read, diff and pass back.

A fit writes one overlay per machine it fitted (a hardware file that ``extends:`` the machine
and restates only the fitted fields) and one per serving stack (a stack file that extends the
stack), each below comment lines saying the command that made it and its errors. Values are
written in their unit (``24.31 GB/s``, ``285.2 us``) exactly as they were evaluated. An
overlay is a config file like any other (``hardware: out/sn40l-calibrated.yaml`` in a
workload), and ``--overlay FILE`` (``calibrate``, ``validate --suite deployment``) passes its
fields back to every row on the machine or stack it extends.

Its header also lists the targets its values were fitted on (``Fitted targets:``, each a row's
file, relative to the overlay's folder, and line, or a figure; ``Fitted rows by content:``,
each row's ``deployment_suite.content_key``, which holds when the files move or lines are
added), so a later fit that holds one of them out refuses the overlay (``held_out_in``),
and it restates the values that were in force on its machine or stack while it was fitted
(an ``--overlay`` passed back on it, a ``--set`` of its kind: ``carried_fields``), so the
file alone gives the errors its header states. A value in force that it cannot carry (a
workload field, another machine's) is named in its header.

Every file is checked before it is written: it must read back as YAML to exactly the mapping
meant (a comment holding a line break or a YAML special character would not), or it is
refused.
"""

from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.overrides import GivenText
from rdu_sim.sim_warnings import RduSimWarning, warn
from rdu_sim.validate.scope import HW, STACK, Fixed, Scoped

LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
KEPT_KEYS = ("extends", "name", "description", "kind")
"""An overlay's keys that are not fitted fields."""


def comment(text: str) -> str:
    """``text`` as one comment line: every control character or line break escaped."""
    shown = "".join(
        char.encode("unicode_escape").decode("ascii")
        if char in LINE_BREAKS or unicodedata.category(char).startswith("C")
        else char
        for char in text
    )
    return f"# {shown}\n"


def reference(target: Path, folder: Path, kind: str) -> str:
    """How an overlay in ``folder`` names its base: the shipped name when ``target`` is the
    shipped file of that name, else a path relative to the folder (absolute when none is)."""
    from rdu_sim.config import shipped

    if shipped.find(target.stem, (kind,)) is not None:
        found = shipped.find(target.stem, (kind,))
        if found is not None and found.resolve() == target.resolve():
            return target.stem
    try:
        return os.path.relpath(target.resolve(), folder.resolve())
    except ValueError:
        return str(target.resolve())


def overlay_mapping(base: str, name: str, fields: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """The overlay's data: ``extends: base``, its ``name``, each (dotted path without its
    ``hw.``/``stack.`` prefix, value) nested."""
    data: dict[str, Any] = {"extends": base, "name": name}
    for path, value in fields:
        node = data
        parts = path.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError.single("--fit", path, f"{part} is both a field and a section")
            node = child
        node[parts[-1]] = value
    return data


def overlay_text(data: Mapping[str, Any], header: Sequence[str]) -> str:
    """A YAML file of ``data`` below ``header`` as comment lines; a ConfigError when it
    would not read back as exactly ``data``."""
    import yaml

    body = yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, width=1000)
    text = "".join(comment(line) for line in header) + body
    if yaml.safe_load(text) != data:
        raise ConfigError.single(
            str(data.get("name", "overlay")), "", "the overlay would not read back as written"
        )
    return text


def fitted_fields(
    scoped: Sequence[Scoped], values: Sequence[float], texts: Sequence[str]
) -> dict[tuple[str, str], list[tuple[str, Any]]]:
    """(kind, target) -> the fields of its overlay: each fitted value, in its unit where it
    has one (a plain number otherwise)."""
    out: dict[tuple[str, str], list[tuple[str, Any]]] = {}
    for one, value, text in zip(scoped, values, texts, strict=True):
        prefix = STACK if one.parameter.kind == "stack" else HW
        written: Any = text if one.parameter.unit else value
        field = one.parameter.path[len(prefix) :]
        out.setdefault((one.parameter.kind, one.target), []).append((field, written))
    return out


def _leaves(data: Mapping[str, Any], prefix: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            out.extend(_leaves(value, f"{prefix}{key}."))
        else:
            out.append((f"{prefix}{key}", value))
    return out


def read_overlay(path: Path) -> list[Fixed]:
    """An overlay's fields as values given on the machine or stack it extends (a
    ConfigError naming the file when it extends nothing readable)."""
    from rdu_sim.config.extends import base_of
    from rdu_sim.config.kinds import file_kind
    from rdu_sim.config.yaml_io import file_problem, read_yaml

    data, _ = read_yaml(path)
    named = data.get("extends") if isinstance(data, Mapping) else None
    if not isinstance(named, str) or not named.strip():
        raise ConfigError.single(
            str(path), "extends", "an overlay names the machine or stack it extends"
        )
    named = named.strip()
    base = next(
        (
            found
            for kind in ("hardware", "stack")
            if (found := base_of(path, named, kind)).is_file()
        ),
        base_of(path, named, "hardware"),
    )
    problem = file_problem(base)
    if problem is not None:
        raise ConfigError.single(str(path), "extends", f"{named!r}: {problem}")
    kind = file_kind(read_yaml(base)[0])
    if kind not in ("hardware", "stack"):
        raise ConfigError.single(str(path), "extends", f"{named!r} is not a hardware or stack file")
    prefix, scope = (HW, "machine") if kind == "hardware" else (STACK, "stack")
    fields = {key: value for key, value in data.items() if key not in KEPT_KEYS}
    leaves = _leaves(fields, prefix)
    if not leaves:
        raise ConfigError.single(str(path), "", "the overlay sets no field")
    target = str(base.resolve())
    origin = f"the overlay {path}"  # an error at a field it sets names the file
    return [
        Fixed(scope, target, GivenText(f"{field}={json.dumps(value, default=str)}", origin))
        for field, value in leaves
    ]


FITTED_TARGETS = "Fitted targets: "
"""The header line listing the targets an overlay was fitted on (a JSON list)."""
FITTED_ROWS = "Fitted rows by content: "
"""The header line listing the measured rows an overlay was fitted on by content (a JSON
list of ``deployment_suite.content_key``)."""
_NAMED = ("shipped:", "figures:")


def recorded_id(target_id: str, folder: Path) -> str:
    """A target as an overlay in ``folder`` records it: a row's file relative to the folder
    (so the record holds wherever the overlay is read from), a shipped row or a figure as
    it is named."""
    if target_id.startswith(_NAMED):
        return target_id
    file, _, line = target_id.rpartition(":")
    try:
        return f"{os.path.relpath(Path(file).resolve(), folder.resolve())}:{line}"
    except ValueError:
        return f"{Path(file).resolve()}:{line}"


def absolute_id(recorded: str, folder: Path) -> str:
    """A recorded (or a target's own, with ``folder`` the working folder) id with its file
    resolved: the same target gives the same, however it was named."""
    if recorded.startswith(_NAMED):
        return recorded
    file, _, line = recorded.rpartition(":")
    return f"{(folder / file).resolve()}:{line}"


def _header_list(path: Path, name: str) -> list[str] | None:
    """The JSON list of strings on the overlay's header line ``# NAME[...]``, or None when
    its header has no such line."""
    from rdu_sim.config.yaml_io import read_text_file

    text = read_text_file(path, 10 << 20, "an overlay")
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        if line.startswith(f"# {name}"):
            try:
                ids = json.loads(line[len(name) + 2 :])
            except json.JSONDecodeError:
                ids = None
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise ConfigError.single(
                    str(path), "", f"the {name.strip()} line is not a list of targets"
                )
            return ids
    return None


def fitted_targets(path: Path) -> list[str] | None:
    """The targets an overlay records it was fitted on (``absolute_id``), or None when its
    header records none (an overlay written before it did)."""
    ids = _header_list(path, FITTED_TARGETS)
    return None if ids is None else [absolute_id(i, path.parent) for i in ids]


def fitted_rows(path: Path) -> list[str] | None:
    """The measured rows an overlay records it was fitted on, by content
    (``deployment_suite.content_key``: the same wherever the row's file lies and whatever
    its line), or None when its header records none (an overlay written before it did)."""
    return _header_list(path, FITTED_ROWS)


def held_out_in(path: Path, held_out: Sequence[tuple[str, str]]) -> None:
    """A ConfigError when the overlay at ``path`` was fitted on targets among ``held_out``
    (each a target's id as given and its content key, '' for a figure): its values carry
    what it learnt from them, so holding them out would test a fit on its own data. A row
    is known by its content (so moving the overlay or the measurement file, or adding a
    line to it, does not hide it), and by its file and line; an overlay that records rows
    by file and line only warns when a file it names is gone (its check cannot see it)."""
    fitted = fitted_targets(path)
    if not fitted:
        return
    rows = fitted_rows(path)
    if rows is None:
        _warn_missing(path, fitted)
    known, contents = set(fitted), set(rows or ())
    both = [
        target
        for target, key in held_out
        if absolute_id(target, Path.cwd()) in known or (key and key in contents)
    ]
    if both:
        shown = ", ".join(both[:10]) + (f" and {len(both) - 10} more" if len(both) > 10 else "")
        raise ConfigError.single(
            "--overlay",
            str(path),
            f"was fitted on {len(both)} target(s) held out here ({shown}): its values carry "
            "them, so they would test the fit on its own data; hold out other rows, or fit "
            "without this overlay",
        )


class MissingFittedFileWarning(RduSimWarning):
    """An overlay records rows of measurement files not found (``_warn_missing``)."""


def _warn_missing(path: Path, fitted: Sequence[str]) -> None:
    """A warning naming the measurement files an overlay records rows of that are not found
    (moved, or the overlay was): a held-out row of them cannot be told from the record."""

    files = sorted(
        {
            file
            for one in fitted
            if not one.startswith(_NAMED) and not Path(file := one.rpartition(":")[0]).is_file()
        }
    )
    if files:
        warn(
            MissingFittedFileWarning(
                f"{path}: the {FITTED_TARGETS.strip()} line names {', '.join(files)}, not found "
                "(the overlay or the file moved): a row of it held out here cannot be told from "
                "the fitted ones; write the overlay again with `rdu-sim calibrate` (it records "
                "its rows by content too)"
            )
        )


def carried_fields(
    kind: str, target: str, overrides: Sequence[str], fixed: Sequence[Fixed]
) -> tuple[list[tuple[str, Any]], list[str]]:
    """What an overlay of ``kind`` (machine or stack) on ``target`` restates besides its
    fitted values, so it alone gives what its fit evaluated: each ``--set`` of its kind, then
    each value passed back on ``target`` (``--overlay``), in the order a run applies them
    (fields without their ``hw.``/``stack.`` prefix); and the overrides it cannot carry."""
    from rdu_sim.config.overrides import parse_override

    prefix = STACK if kind == "stack" else HW
    carried: list[tuple[str, Any]] = []
    left: list[str] = []
    for text in overrides:
        path, value = parse_override(text)
        if path.startswith(prefix):
            carried.append((path[len(prefix) :], value))
        else:
            left.append(f"--set {text}")
    for one in fixed:
        path, _, value = one.override.partition("=")
        if one.kind == kind and one.target == target:
            carried.append((path[len(prefix) :], json.loads(value)))
    return carried, left
