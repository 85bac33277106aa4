"""Every hardware parameter changes some result, or it would not exist.

The parameters are discovered from the config model (every leaf field of HardwareConfig, so
a new parameter is tested the day it is added) and checked against the shipped files. Each is
varied (doubled and halved, or set to each other allowed value) on a few small probe
scenarios; some result must change: the energy and cost of an hour of serving (power and
prices), the batch capacity, the memory plan, a decode or a prefill step time, or whether
the scenario is accepted at all (``system.sockets`` bounds the TP degree,
``system.topology`` the collective algorithm: refusing an input is their effect). The
probes are a hand list of situations (one socket; weights spilled to DDR; eight sockets on
one node, on two nodes, on two racks, with a tree all-reduce; a Composition of Experts switching
experts through the copy engine), not of parameters.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from rdu_sim import api
from rdu_sim.compiler import CapacityError
from rdu_sim.config import ConfigError, HardwareConfig
from rdu_sim.engine import EventBudgetError
from rdu_sim.report.energy import energy_of
from rdu_sim.serving.backend import EngineBackend, resolve_batch_slots
from rdu_sim.serving.step_shape import StepShapeError

ROOT = Path(__file__).resolve().parents[1]
LLAMA_1S = "workloads/llama3.1-8b-1socket.yaml"
LLAMA_8S = "workloads/llama3.1-8b-8socket.yaml"
COE = "workloads/samba-coe-150x8b-8socket.yaml"
SMALL = {"serving.max_context": 2048, "serving.batch_slots": 4}

PROBES: dict[str, tuple[str, dict[str, Any]]] = {
    "one socket": (LLAMA_1S, SMALL),
    # a fixed batch above the capacity of a 16 GiB HBM beside a hot set of all of it: some
    # weights are read from DDR (memory.weights hbm refuses the batch)
    "DDR spill": (
        LLAMA_1S,
        {
            **SMALL,
            "serving.batch_slots": 8,
            "hw.socket.hbm.capacity": 16 * 2**30,
            "memory.weights": "hot_set",
            "memory.hot_set_fraction": 1.0,
        },
    ),
    "8 sockets, one node": (LLAMA_8S, SMALL),
    # a stack that samples on the host: the logits cross the host link every step
    "sampling on the host": (LLAMA_1S, {**SMALL, "stack.sampling": "host"}),
    "8 sockets, two nodes": (LLAMA_8S, {**SMALL, "hw.system.sockets_per_node": 4}),
    # a Composition of Experts switching experts through the DDR-to-HBM copy engine
    "Composition of Experts": (COE, {"serving.requests": 12}),
    # two racks of two 2-socket nodes: the three link levels of a switched wiring
    "8 sockets, two racks": (
        LLAMA_8S,
        {
            **SMALL,
            "hw.system.sockets_per_node": 2,
            "hw.system.nodes_per_rack": 2,
            "hw.system.inter_rack_link.bandwidth": "25 GB/s",
            "hw.system.inter_rack_link.latency": "5 us",
        },
    ),
    "8 sockets, tree": (
        LLAMA_8S,
        {
            **SMALL,
            "hw.system.topology": "fully_connected",
            "hw.system.collective_algorithm": "tree",
        },
    ),
}

NOT_PARAMETERS = {"name", "description", "kind", "extends", "default_stack"}
"""Identity strings of a hardware file, its kind, the file it extends and the serving stack it
names (the stack's own parameters are tested in tests/test_stack_parameters.py), not
parameters of the hardware."""

KNOWN_UNUSED: dict[str, str] = {}
"""Parameters no model reads yet, each with the work that will read it; the test fails when
one starts changing results (then it leaves this list) and for any other."""


def _leaves(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, annotation) of every leaf field of a config model."""
    for name, info in model.model_fields.items():
        annotation = info.annotation
        optional = [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(optional) == 1:
            annotation = optional[0]  # an optional section (power): its fields
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaves(annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", annotation


PARAMETERS = {path: ann for path, ann in _leaves(HardwareConfig) if path not in NOT_PARAMETERS}


def _file_leaves(data: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _file_leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip(".")


def test_parameters_are_the_shipped_files_fields() -> None:
    """Discovery covers the files: every field a shipped file sets is a parameter (or an
    identity string), and every parameter is set by some shipped file."""
    shipped: set[str] = set()
    for path in sorted((ROOT / "hw_configs").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if data.get("kind", "rdu") == "rdu":  # GPU files: tests/test_gpu_engine.py
            shipped |= set(_file_leaves(data))
    assert shipped - NOT_PARAMETERS == set(PARAMETERS)
    assert set(KNOWN_UNUSED) <= set(PARAMETERS)


def _get(data: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        data = data[part]
    return data


def _section_set(data: dict[str, Any], path: str) -> bool:
    """Whether the optional sections on ``path`` are set in ``data`` (a probe without a rack
    level has no ``system.inter_rack_link`` to vary)."""
    for part in path.split(".")[:-1]:
        data = data[part]
        if data is None:
            return False
    return True


def _variants(value: Any, annotation: Any) -> list[Any]:
    """Other values of a parameter: each other choice of a Literal, not a bool, double and
    half a number (a zero gets a small positive value)."""
    if value is None:  # an unset optional number (a price, a runtime's page): set it
        return [256] if annotation is int else [1.0]
    if typing.get_origin(annotation) is typing.Literal:
        return [v for v in typing.get_args(annotation) if v != value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [v for v in (value * 2, value // 2) if v != value]
    if isinstance(value, float):
        return [value * 2, value / 2] if value else [1e-6]
    raise AssertionError(f"no variation rule for {value!r} ({annotation})")


def _valid(hardware: dict[str, Any], path: str, value: Any) -> bool:
    """Whether the hardware file with ``path = value`` passes its own field rules."""
    data = yaml.safe_load(yaml.safe_dump(hardware))
    parent, _, leaf = path.rpartition(".")
    _get_parent(data, parent)[leaf] = value
    try:
        HardwareConfig.model_validate(data)
    except ValueError:
        return False
    return True


def _get_parent(data: dict[str, Any], path: str) -> dict[str, Any]:
    return data if not path else _get(data, path)


STAGES = (
    "energy and cost of an hour",
    "capacity and memory plan",
    "decode step",
    "prefill step",
    "CoE serving run",
    "a served batch (4 requests of 128 tokens at once)",
)
"""What a scenario produces, cheapest first (a variation is compared stage by stage)."""


@cache
def _result(workload: str, overrides: tuple[tuple[str, Any], ...], stage: int) -> Any:
    """Stage ``stage`` of what a scenario produces (:data:`STAGES`), or why it is refused:
    refusing an input is a result too."""
    try:
        scenario = api.load(ROOT / workload, dict(overrides))
        hw = scenario.hardware
        if stage == 0:  # an hour's serving at a million output tokens
            system = hw.system
            return energy_of(
                hw.power, hw.cost, system.sockets, system.sockets_per_node, 3600, 10**6
            )
        if stage == 1:
            backend = EngineBackend()
            capacity, slots = resolve_batch_slots(scenario, backend)
            return (capacity, slots, sorted(backend.plan_memory(scenario, slots).tiers.items()))
        if stage == 2:
            return api.step(scenario, batch=_result(workload, overrides, 1)[1]).step_s
        if stage == 3:
            return api.step(scenario, phase="prefill", tokens=512).step_s
        if stage == 4:
            if scenario.workload.coe is None:
                return None
            return api.run(scenario).summary().coe
        batch = {"serving.requests": 4, "serving.arrival": {"process": "all_at_once"}}
        batch |= {"serving.prompt_tokens": 128, "serving.output_tokens": 8}
        served = api.run(api.load(ROOT / workload, {**dict(overrides), **batch}))
        return served.summary().makespan_s
    except (ConfigError, StepShapeError, CapacityError, EventBudgetError) as exc:
        return ("refused", type(exc).__name__, str(exc))


def _differs(workload: str, base: Any, varied: Any) -> bool:
    """Whether some stage of the varied scenario differs from the base one."""
    for stage in range(len(STAGES)):
        first = _result(workload, varied, stage)
        if first != _result(workload, base, stage):
            return True
        if isinstance(first, tuple) and first[:1] == ("refused",):
            return False  # refused alike: no later stage to compare
    return False


def _changes(path: str) -> list[str]:
    """The probes (and values) where varying ``path`` changes a result."""
    found = []
    for probe, (workload, overrides) in PROBES.items():
        base = tuple(sorted(overrides.items()))
        hardware = api.load(ROOT / workload, overrides).hardware.model_dump(mode="json")
        if not _section_set(hardware, path):
            continue
        value = _get(hardware, path)
        variants = [v for v in _variants(value, PARAMETERS[path]) if _valid(hardware, path, v)]
        if value is None and not variants:
            continue  # an unset optional field this probe cannot set alone (a rack level)
        assert variants, f"{path}: no valid variation of {value!r}"
        for variant in variants:
            varied = tuple(sorted({**overrides, f"hw.{path}": variant}.items()))
            if _differs(workload, base, varied):
                found.append(f"{probe}: {value!r} -> {variant!r}")
                return found  # one change is enough
    return found


@pytest.mark.parametrize("path", sorted(PARAMETERS))
def test_every_hardware_parameter_changes_a_result(path: str) -> None:
    changes = _changes(path)
    if path in KNOWN_UNUSED:
        assert not changes, (
            f"{path} now changes a result ({changes[0]}): remove it from KNOWN_UNUSED"
        )
    else:
        assert changes, (
            f"hw {path} changes no result on any probe ({', '.join(PROBES)}): give it a "
            "mechanism that reads it, or remove it from the config, the files and the docs"
        )
