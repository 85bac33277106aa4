"""Config files written on top of another (``extends: NAME_OR_PATH``): a hardware file over
a machine, a serving stack over a stack (a calibrated overlay restates only what it fits).

The one rule both kinds read through: the overlay's fields replace the base's, mappings
merged key by key (``config.merge``, the rule a mapping override follows too); the base is
a path relative to the overlay, else a shipped file of that kind by name; the base is
validated on its own first, so a fault in it is reported in its file; a chain that loops is
refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.kinds import KINDS_HELP, file_kind
from rdu_sim.config.loader import LineMap
from rdu_sim.config.merge import merged
from rdu_sim.config.yaml_io import file_problem, read_yaml

EXTENDS = "extends"
"""The key naming the file an overlay is written on top of."""

Check = Callable[[Any, str, LineMap], object]
"""Validates a base file's data (its file and lines name the fault)."""

Pair = Callable[[Mapping[str, Any], LineMap, Any, str, str], None]
"""Checks an overlay against its base: (overlay, its lines, base data, base name, file)."""


def read_extending(
    path: Path, kind: str, check: Check, pair: Pair | None = None
) -> tuple[Any, LineMap]:
    """A ``kind`` file's data with its ``extends:`` chain resolved, and its own lines."""
    return _read(path, kind, check, pair, ())


def _read(
    path: Path, kind: str, check: Check, pair: Pair | None, seen: tuple[Path, ...]
) -> tuple[Any, LineMap]:
    from rdu_sim.config import shipped  # the shipped files' index: only when a file extends

    data, lines = read_yaml(path)
    if not isinstance(data, Mapping) or EXTENDS not in data:
        return data, lines
    file, named = str(path), data[EXTENDS]
    line = lines.get((EXTENDS,))
    words = shipped.label(kind).removesuffix("s")
    if not isinstance(named, str) or not named.strip():
        raise ConfigError.single(file, EXTENDS, f"expected a {words}'s name or path", line)
    named = named.strip()
    base = base_of(path, named, kind)
    problem = file_problem(base)
    if problem is not None:
        raise ConfigError.single(
            file,
            EXTENDS,
            f"{words} {named!r}: {problem} (a path is relative to this file; a bare name is "
            f"a shipped {words}: {', '.join(shipped.names(kind))})",
            line,
        )
    chain = (*seen, path.resolve())
    if base.resolve() in chain:
        loop = " -> ".join(p.name for p in (*chain, base.resolve()))
        raise ConfigError.single(file, EXTENDS, f"the extends chain loops: {loop}", line)
    base_data, base_lines = _read(base, kind, check, pair, chain)
    found = file_kind(base_data)
    if found != kind:
        what = f"a {found} file" if found else "not a config file of any kind"
        raise ConfigError.single(
            file, EXTENDS, f"{named!r} is {what}, not a {words} ({KINDS_HELP})", line
        )
    if pair is not None:
        pair(data, lines, base_data, named, file)
    check(base_data, str(base), base_lines)
    overlay = {key: value for key, value in data.items() if key != EXTENDS}
    return merged(base_data, overlay), lines


def base_of(path: Path, named: str, kind: str) -> Path:
    """The file ``extends: named`` in ``path`` means: a path relative to ``path`` when one
    exists there, else the shipped ``kind`` file of that name (else the relative path, for
    the caller to report as missing)."""
    from rdu_sim.config import shipped

    near = shipped.written_in(path, named)
    return near if near.exists() else shipped.find(named, (kind,)) or near


def extends_chain(path: Path, kind: str) -> tuple[Path, ...]:
    """``path`` and each ``kind`` file it extends, resolved, nearest first (a file read
    through :func:`read_extending` already: a loop or a missing base ends the chain)."""
    chain = [path.resolve()]
    while True:
        data, _ = read_yaml(chain[-1])
        named = data.get(EXTENDS) if isinstance(data, Mapping) else None
        if not isinstance(named, str) or not named.strip():
            return tuple(chain)
        base = base_of(chain[-1], named.strip(), kind).resolve()
        if base in chain or not base.is_file():
            return tuple(chain)
        chain.append(base)


def overlay_schema(title: str, what: str) -> dict[str, Any]:
    """The JSON Schema branch of an overlay of a ``what`` file (its fields are checked once
    merged, by the loader)."""
    return {
        "title": title,
        "type": "object",
        "description": f"A {what} written on top of another: its fields replace the "
        "base's, mappings merged key by key; the merged file is validated whole.",
        "required": [EXTENDS],
        "properties": {
            EXTENDS: {
                "type": "string",
                "description": f"the base: a shipped {what}'s name, or a path relative to "
                "this file",
            }
        },
    }
