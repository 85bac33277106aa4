"""Which kind of hardware a hardware file describes, and validating it as that kind.

A file's top-level ``kind`` names its model: ``rdu`` (SN40L sockets, the default when the key
is absent: every file written before GPUs existed) or ``gpu``. Both kinds share
``SystemConfig`` and expose ``name``, ``system``, ``peak_flops`` and ``hbm``, which is what
the rooms above the compiler read; only the compiler and the engines look inside a device.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Discriminator, Tag, TypeAdapter

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.gpu import GpuHardwareConfig
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.kinds import KINDS_HELP, file_kind
from rdu_sim.config.loader import LineMap, validate
from rdu_sim.config.yaml_io import file_problem, read_yaml

EXTENDS = "extends"
"""A hardware file's key naming the hardware file it is written on top of."""

OVERLAY_SCHEMA: dict[str, Any] = {
    "title": "HardwareOverlay",
    "type": "object",
    "description": "A hardware file written on top of another: its fields replace the "
    "base's, mappings merged key by key; the merged file is validated as its kind.",
    "required": [EXTENDS],
    "properties": {
        EXTENDS: {
            "type": "string",
            "description": "the base: a shipped hardware name, or a path relative to this file",
        }
    },
}
"""The JSON Schema branch of an overlay (its fields are checked once merged, by the loader)."""

Hardware = HardwareConfig | GpuHardwareConfig
"""Any validated hardware description."""

KINDS: dict[str, type[HardwareConfig] | type[GpuHardwareConfig]] = {
    "rdu": HardwareConfig,
    "gpu": GpuHardwareConfig,
}


def kind_of(data: Any) -> str:
    """The ``kind`` a hardware mapping names (``rdu`` when it names none)."""
    if isinstance(data, Mapping):
        return str(data.get("kind", "rdu"))
    return str(getattr(data, "kind", "rdu"))


def hardware_model(
    data: Any, file: str, lines: LineMap
) -> type[HardwareConfig] | type[GpuHardwareConfig]:
    """The model a parsed hardware file is validated with; a ConfigError naming ``kind``
    when the file names a kind that does not exist."""
    kind = kind_of(data)
    model = KINDS.get(kind)
    if model is None:
        raise ConfigError.single(
            file,
            "kind",
            f"unknown hardware kind {kind!r}; valid: {', '.join(sorted(KINDS))}",
            lines.get(("kind",)),
        )
    return model


def validate_hardware(data: Any, file: str, lines: LineMap) -> Hardware:
    """Validate a parsed hardware file as the kind it names; a ConfigError otherwise."""
    return validate(hardware_model(data, file, lines), data, file, lines)


def read_hardware(path: Path) -> tuple[Any, LineMap]:
    """A hardware file's data with its ``extends:`` chain resolved, and its own lines.

    ``extends: NAME_OR_PATH`` (a shipped hardware name, or a path relative to this file)
    makes the file an overlay: its fields replace the base's, mappings merged key by key, so
    a second serving runtime on the same machine restates only its ``runtime:``. The base is
    validated on its own first, so a fault in it is reported in its file; a chain that loops
    is refused.
    """
    return _read_hardware(path, ())


def _read_hardware(path: Path, seen: tuple[Path, ...]) -> tuple[Any, LineMap]:
    from rdu_sim.config import shipped  # the shipped files' index: only when a file extends

    data, lines = read_yaml(path)
    if not isinstance(data, Mapping) or EXTENDS not in data:
        return data, lines
    file, named = str(path), data[EXTENDS]
    line = lines.get((EXTENDS,))
    if not isinstance(named, str) or not named.strip():
        raise ConfigError.single(file, EXTENDS, "expected a hardware file's name or path", line)
    named = named.strip()
    near = shipped.written_in(path, named)
    base = near if near.exists() else shipped.find(named, ("hardware",)) or near
    problem = file_problem(base)
    if problem is not None:
        raise ConfigError.single(
            file,
            EXTENDS,
            f"hardware file {named!r}: {problem} (a path is relative to this file; a bare "
            f"name is a shipped hardware file: {', '.join(shipped.names('hardware'))})",
            line,
        )
    chain = (*seen, path.resolve())
    if base.resolve() in chain:
        loop = " -> ".join(p.name for p in (*chain, base.resolve()))
        raise ConfigError.single(file, EXTENDS, f"the extends chain loops: {loop}", line)
    base_data, base_lines = _read_hardware(base, chain)
    found = file_kind(base_data)
    if found != "hardware":
        what = f"a {found} file" if found else "not a config file of any kind"
        raise ConfigError.single(
            file, EXTENDS, f"{named!r} is {what}, not a hardware file ({KINDS_HELP})", line
        )
    if "kind" in data and kind_of(data) != kind_of(base_data):
        raise ConfigError.single(
            file,
            "kind",
            f"{kind_of(data)!r} differs from the kind of the file it extends "
            f"({kind_of(base_data)!r}, {named!r}); an overlay keeps its base's kind",
            lines.get(("kind",)),
        )
    validate_hardware(base_data, str(base), base_lines)
    overlay = {key: value for key, value in data.items() if key != EXTENDS}
    return _merged(base_data, overlay), lines


def _merged(base: Any, overlay: Any) -> Any:
    """``overlay`` over ``base``: mappings key by key, anything else replaced."""
    if not isinstance(base, Mapping) or not isinstance(overlay, Mapping):
        return overlay
    out = dict(base)
    for key, value in overlay.items():
        out[key] = _merged(base[key], value) if key in base else value
    return out


def hardware_schema() -> TypeAdapter[Any]:
    """One adapter for both kinds: ``rdu-sim schema hardware`` prints its JSON Schema (made
    when asked for: building it builds both kinds' validators, which a run of one never needs)."""
    return TypeAdapter(
        Annotated[
            Annotated[HardwareConfig, Tag("rdu")] | Annotated[GpuHardwareConfig, Tag("gpu")],
            Discriminator(kind_of),
        ]
    )
