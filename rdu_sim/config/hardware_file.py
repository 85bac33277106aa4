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
from rdu_sim.config.extends import overlay_schema, read_extending
from rdu_sim.config.gpu import GpuHardwareConfig
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.loader import LineMap, validate

OVERLAY_SCHEMA = overlay_schema("HardwareOverlay", "hardware file")
"""The JSON Schema branch of an overlay (its fields are checked once merged, by the loader)."""

Hardware = HardwareConfig | GpuHardwareConfig
"""Any validated hardware description."""

KINDS: dict[str, type[HardwareConfig] | type[GpuHardwareConfig]] = {
    "rdu": HardwareConfig,
    "gpu": GpuHardwareConfig,
}


def device_noun(hardware: Hardware) -> str:
    """What one device of ``hardware`` is called in sentences: ``socket`` or ``GPU``."""
    return "socket" if isinstance(hardware, HardwareConfig) else "GPU"


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
    """A hardware file's data with its ``extends:`` chain resolved, and its own lines
    (``config.extends``): a machine written on top of another restates only what differs,
    and an overlay keeps its base's ``kind``."""
    return read_extending(path, "hardware", validate_hardware, _same_kind)


def _same_kind(
    data: Mapping[str, Any], lines: LineMap, base_data: Any, named: str, file: str
) -> None:
    if "kind" in data and kind_of(data) != kind_of(base_data):
        raise ConfigError.single(
            file,
            "kind",
            f"{kind_of(data)!r} differs from the kind of the file it extends "
            f"({kind_of(base_data)!r}, {named!r}); an overlay keeps its base's kind",
            lines.get(("kind",)),
        )


def hardware_schema() -> TypeAdapter[Any]:
    """One adapter for both kinds: ``rdu-sim schema hardware`` prints its JSON Schema (made
    when asked for: building it builds both kinds' validators, which a run of one never needs)."""
    return TypeAdapter(
        Annotated[
            Annotated[HardwareConfig, Tag("rdu")] | Annotated[GpuHardwareConfig, Tag("gpu")],
            Discriminator(kind_of),
        ]
    )
