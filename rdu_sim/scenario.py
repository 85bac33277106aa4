"""A Scenario: a workload with its hardware and model resolved and cross-checked.

This is what every later stage (compiler, engine, serving, sweeps) takes. Loading is the
only place that reads files; a Scenario is immutable and cheap to pass to worker processes.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rdu_sim.config.architecture import ConfigJsonKeys, ConfigJsonModel
from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.config.hardware_file import Hardware, hardware_model
from rdu_sim.config.loader import LineMap, ModelT, file_problem, read_yaml, validate
from rdu_sim.config.overrides import (
    HW_PREFIX,
    normalize_overrides,
    set_path,
    split_overrides,
)
from rdu_sim.config.wiring import allowed_algorithms, forced_algorithm
from rdu_sim.config.workload import DTYPE_BYTES, WorkloadConfig
from rdu_sim.kv.policies import PolicyError, make_policy
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.models.hf_config import architecture_from_config, read_config_json
from rdu_sim.models.layers import Architecture
from rdu_sim.models.presets import UnknownModelError, get_model
from rdu_sim.models.storage import storage_dtypes


@dataclass(frozen=True)
class Scenario:
    """Everything one simulation needs, validated; ``kv_policy`` is the workload's KV policy,
    built once from ``kv`` and ``serving.max_context`` (every room asks it, none rebuilds it)."""

    workload: WorkloadConfig
    hardware: Hardware
    model: Architecture
    workload_file: str
    hardware_file: str
    kv_policy: KVPolicy = field(compare=False, repr=False)

    @property
    def tp(self) -> int:
        return self.workload.parallelism.tp

    @property
    def weight_dtype(self) -> str:
        """dtypes.weights, else the model's released dtype, else bf16 (`storage_dtypes`)."""
        return self._storage[0]

    @property
    def expert_dtype(self) -> str:
        """Routed experts' dtype: dtypes.experts, else the model's, else `weight_dtype`."""
        return self._storage[1]

    @property
    def _storage(self) -> tuple[str, str]:
        dtypes = self.workload.dtypes
        return storage_dtypes(self.model, dtypes.weights, dtypes.experts)

    @property
    def weight_dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.weight_dtype]

    @property
    def expert_dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.expert_dtype]

    @property
    def kv_dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.workload.dtypes.kv]

    @property
    def activation_dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.workload.dtypes.activations]

    @property
    def base_dir(self) -> Path:
        """Folder that relative paths in the workload (trace files) are resolved against."""
        return Path(self.workload_file).parent


def _apply(data: dict[str, Any], overrides: Mapping[str, Any], source: str) -> dict[str, Any]:
    result = copy.deepcopy(data)
    for path, value in overrides.items():
        set_path(result, path, value, source)
    return result


def _expand_preset(data: dict[str, Any], overrides: Mapping[str, Any], workload_file: str) -> None:
    """`--set model.layers=4` on a preset name, or on a config.json, turns the model into an
    editable mapping of its architecture."""
    model = data.get("model")
    edits = [k for k in overrides if k.startswith("model.")]
    if isinstance(model, str) and edits:
        with contextlib.suppress(UnknownModelError):  # reported below with file and line
            data["model"] = get_model(model).model_dump()
    own = {"model.config_json", "model.name"}  # the reference's own fields edit the reference
    reference = isinstance(model, Mapping) and set(model) == {"config_json"} | (
        set(model) & {"name"}
    )
    if reference and set(edits) - own:
        with contextlib.suppress(ValidationError):  # a bad reference: reported below, by key
            ref = ConfigJsonModel.model_validate(model)
            data["model"] = _read_config_json(ref, workload_file, {}).model_dump()


def _override_for(field: str, overrides: Mapping[str, Any]) -> str | None:
    """The override path that set `field`, its parent or one of its children, if any."""
    for path in overrides:
        if (
            field == path
            or field.startswith(path + ".")
            or (field and path.startswith(field + "."))
        ):
            return path
    return None


def _validate(
    model: type[ModelT],
    data: Any,
    file: str,
    lines: LineMap,
    overrides: Mapping[str, Any],
    prefix: str,
) -> ModelT:
    """`validate`, with issues caused by a `--set` override saying so (the line would mislead)."""
    try:
        return validate(model, data, file, lines)
    except ConfigError as exc:
        issues = []
        for issue in exc.issues:
            source = _override_for(issue.field, overrides)
            if source is not None:
                issue = dataclasses.replace(
                    issue, line=None, message=f"{issue.message} (from --set {prefix}{source})"
                )
            issues.append(issue)
        raise ConfigError(issues) from None


def _cross_check(
    workload: WorkloadConfig,
    hardware: Hardware,
    model: Architecture,
    file: str,
    lines: LineMap,
) -> KVPolicy:
    """Rules that span files: TP vs heads, sockets and the collective's links, context vs
    the model; then the KV policy, whose own parameter rules (the only ones) it returns."""

    def fail(path: str, message: str) -> ConfigError:
        line = lines.get(tuple(path.split(".")))
        return ConfigError.single(file, path, message, line)

    tp = workload.parallelism.tp
    if model.heads % tp:
        raise fail(
            "parallelism.tp",
            f"tp={tp} does not divide the model's {model.heads} "
            f"attention heads; use a divisor of {model.heads}",
        )
    if tp > hardware.system.sockets:
        raise fail(
            "parallelism.tp",
            f"tp={tp} exceeds the {hardware.system.sockets} {hardware.devices} of hardware "
            f"{hardware.name!r}",
        )
    system = hardware.system
    forced = forced_algorithm(True, system.collective_algorithm)
    allowed = allowed_algorithms(True, system.topology, tp)
    if forced is not None and forced not in allowed:
        raise fail(
            "parallelism.tp",
            f"hardware {hardware.name!r} forces {forced} collectives "
            f"(system.collective_algorithm: {forced}), which a {system.topology!r} wiring "
            f"cannot run over a group of {tp} sockets (it allows {', '.join(allowed)}): use "
            "system.collective_algorithm auto or an allowed one, another system.topology "
            "(fully_connected runs every algorithm), or tp <= 2",
        )
    serving = workload.serving
    if serving.max_context > model.max_context:
        raise fail(
            "serving.max_context",
            f"{serving.max_context} exceeds the model's maximum "
            f"context of {model.max_context} tokens",
        )
    try:  # the policy's own parameter rules, so every entry point refuses the same inputs
        return make_policy(workload.kv, serving.max_context)
    except PolicyError as exc:
        raise fail(exc.field, str(exc)) from None


def _relative_to(workload_file: str, path: str) -> Path:
    """A path written in a workload: absolute, ~-expanded, or relative to the workload file."""
    resolved = Path(path)
    with contextlib.suppress(RuntimeError):  # "~" with no home directory stays as written
        resolved = resolved.expanduser()
    if not resolved.is_absolute():
        resolved = Path(os.path.normpath(Path(workload_file).parent / resolved))
    return resolved


def _read_config_json(ref: ConfigJsonModel, workload_file: str, lines: LineMap) -> Architecture:
    """The architecture of `model: {config_json: ...}`; its errors name the JSON file and
    key, after a line saying which workload pointed there."""
    try:
        return read_config_json(_relative_to(workload_file, ref.config_json), ref.name)
    except ConfigError as exc:
        context = ConfigIssue(
            workload_file,
            "model.config_json",
            f"{ref.config_json!r} cannot be modelled (paths are relative to the workload file):",
            lines.get(("model", "config_json")),
        )
        raise ConfigError([context, *exc.issues]) from None


def build_scenario(
    data: Mapping[str, Any],
    *,
    workload_file: str,
    lines: LineMap | None = None,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
) -> Scenario:
    """Validate workload data (already parsed) and load its hardware file."""
    lines = lines or {}
    normalized = normalize_overrides(overrides)
    workload_overrides, hardware_overrides = split_overrides(normalized)
    raw = dict(data) if isinstance(data, Mapping) else data
    if isinstance(raw, dict):
        _expand_preset(raw, workload_overrides, workload_file)
        raw = _apply(raw, workload_overrides, workload_file)
    workload = _validate(WorkloadConfig, raw, workload_file, lines, workload_overrides, "")

    if isinstance(workload.model, str):
        try:
            model: Architecture = get_model(workload.model)
        except UnknownModelError as exc:
            raise ConfigError.single(
                workload_file, "model", str(exc), lines.get(("model",))
            ) from None
    elif isinstance(workload.model, ConfigJsonModel):
        model = _read_config_json(workload.model, workload_file, lines)
    elif isinstance(workload.model, ConfigJsonKeys):  # a config.json's keys written inline
        keys = workload.model.model_dump(exclude={"name"})
        model = architecture_from_config(
            keys,
            file=workload_file,
            name=workload.model.name or workload.model.model_type,
            lines=lines,
            prefix="model.",
        )
    else:
        model = workload.model

    hardware_path = _relative_to(workload_file, workload.hardware)
    problem = file_problem(hardware_path)
    if problem is not None:
        raise ConfigError.single(
            workload_file,
            "hardware",
            f"hardware file {str(hardware_path)!r}: {problem} (paths are "
            "relative to the workload file)",
            lines.get(("hardware",)),
        )
    try:
        hw_data, hw_lines = read_yaml(hardware_path)
        if isinstance(hw_data, dict):
            hw_data = _apply(hw_data, hardware_overrides, str(hardware_path))
        model_type = hardware_model(hw_data, str(hardware_path), hw_lines)
        hardware = _validate(
            model_type, hw_data, str(hardware_path), hw_lines, hardware_overrides, HW_PREFIX
        )
    except ConfigError as exc:
        # Say which workload led here: the issues themselves name the hardware file.
        context = ConfigIssue(
            workload_file,
            "hardware",
            f"hardware file {str(hardware_path)!r} is not valid:",
            lines.get(("hardware",)),
        )
        raise ConfigError([context, *exc.issues]) from None
    policy = _cross_check(workload, hardware, model, workload_file, lines)
    return Scenario(workload, hardware, model, workload_file, str(hardware_path), policy)


def with_overrides(
    scenario: Scenario, overrides: Iterable[str] | Mapping[str, Any] | None
) -> Scenario:
    """``scenario`` with ``overrides`` applied on top of its own (already overridden)
    workload and hardware data; the hardware file on disk would lose earlier ``hw.``
    overrides. No overrides: the same scenario."""
    if not overrides:
        return scenario
    data = scenario.workload.model_dump(mode="json")
    hardware = scenario.hardware.model_dump(mode="json")
    merged = {f"{HW_PREFIX}{key}": value for key, value in hardware.items()}
    merged.update(normalize_overrides(overrides))
    return build_scenario(data, workload_file=scenario.workload_file, overrides=merged)


def load_scenario(
    path: str | Path, overrides: Iterable[str] | Mapping[str, Any] | None = None
) -> Scenario:
    """Read a workload file (and its hardware file) into a validated Scenario."""
    file = Path(path)
    data, lines = read_yaml(file)
    if not isinstance(data, Mapping):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError.single(str(file), "", f"expected a mapping of fields, got {kind}")
    return build_scenario(data, workload_file=str(file), lines=lines, overrides=overrides)
