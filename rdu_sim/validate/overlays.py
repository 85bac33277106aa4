"""The calibrated overlays: fitted values as files a user can read, diff and pass back.

A fit writes one overlay per machine it fitted (a hardware file that ``extends:`` the machine
and restates only the fitted fields) and one per serving stack (a stack file that extends the
stack), each below comment lines saying the command that made it and its errors. Values are
written in their unit (``24.31 GB/s``, ``285.2 us``) exactly as they were evaluated. An
overlay is a config file like any other (``hardware: out/sn40l-calibrated.yaml`` in a
workload), and ``--overlay FILE`` (``calibrate``, ``validate --suite deployment``) passes its
fields back to every row on the machine or stack it extends.

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
    return [
        Fixed(scope, target, f"{field}={json.dumps(value, default=str)}") for field, value in leaves
    ]
