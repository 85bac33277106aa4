"""What the compiler may read of a scenario: a copy with everything else taken out.

The compiler's results are shared between sweep points (`shared_programs`) under a digest
of its inputs. So that digest can never miss an input, the compiler never sees the
scenario itself: `compile_view` copies it with the fields in `UNREAD_WORKLOAD`,
`UNREAD_HARDWARE` and `UNREAD_STACK` deleted (the hardware's name, the links, the arrival
process, the engine's event settings, the stack's host time ...), and `digest` hashes what
is left. A field the compiler starts reading later is either still in the copy, and so in
the digest, or absent, and reading it raises AttributeError in every test that compiles.
The lists may grow or shrink by hand: a field left in costs sharing, never correctness.

``serving.batch_slots`` is out too: the compiler is handed the slot count it plans for as an
argument (`Compiler.placement`), and the memo keys carry it. So are the links: a sequence-split
MLA's compiler weighs gathering the queries over them (`compiler.query_choice`), and is handed
them as an argument; its memo keys carry the links where a choice is made, and the choices
(whole query weights, replicated queries) where its results depend only on those.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from rdu_sim.config.overrides import HW_PREFIX, STACK_PREFIX
from rdu_sim.kv.paged import role_sizes_pool
from rdu_sim.scenario import Scenario

Unread = Mapping[str, "Unread | None"]
"""Field name -> None (the whole field is out) or the unread fields inside it."""

UNREAD_SYSTEM: Unread = {
    "intra_node_link": None,
    "inter_node_link": None,
    "nodes_per_rack": None,
    "inter_rack_link": None,
    "topology": None,
    "collective_algorithm": None,
    "sockets_per_node": None,
}
"""The links and collectives are the engine's; ``system.sockets`` stays (a GPU's capacity
hint names it), and so does ``collective_chunks`` (the edges bypassing a collective hold
its chunks: ``compiler.buffers``)."""

UNREAD_WORKLOAD: Unread = {
    "name": None,
    "description": None,
    "hardware": None,
    "stack": None,
    "cuda_graphs": None,
    "coe": None,
    "serving": {
        "batch_slots": None,
        # (output_tokens is read: a paged stack's least reservation, `smallest_request_pages`)
        "arrival": None,
        "requests": None,
        "seed": None,
        "prefill_priority": None,
        "max_work": None,
    },
    "engine": {
        "all_sockets": None,
        "max_events": None,
        "operand_buffer_fraction": None,
        "fast_forward": None,
    },
}
"""The workload's fields no compiler rule reads (checked: reading one raises)."""

UNREAD_STATIC_WORKLOAD: Unread = {
    **UNREAD_WORKLOAD,
    "serving": {**(UNREAD_WORKLOAD["serving"] or {}), "output_tokens": None},
}
""":data:`UNREAD_WORKLOAD` for a stack without a paged KV cache: its compiler reads no
output length either (only a paged pool's least reservation does), so sweeps of output
lengths share their programs again."""

UNREAD_HARDWARE: Unread = {
    "name": None,
    "description": None,
    "power": None,
    "cost": None,
    "default_stack": None,
    "system": UNREAD_SYSTEM,
}
"""The hardware's fields no compiler rule reads (the engine's links, the economics, the
stack a workload runs by default: the scenario's own stack is what is read)."""

UNREAD_STACK: Unread = {"name": None, "description": None, "host": None}
"""The stack's fields no compiler rule reads (its host time is the engine's)."""

ModelT = TypeVar("ModelT", bound=BaseModel)


def unread_override(path: str) -> bool:
    """Whether an override path (``hw.system.intra_node_link.bandwidth``,
    ``stack.host.serial_per_step``, ``serving.seed``) sets a field the compiler never reads,
    or one inside it: points that differ only in such fields compile alike (how a sweep
    batches them: ``sweep.worker``)."""
    tree: Unread | None = UNREAD_WORKLOAD
    for prefix, unread in ((HW_PREFIX, UNREAD_HARDWARE), (STACK_PREFIX, UNREAD_STACK)):
        if path.startswith(prefix):
            tree, path = unread, path.removeprefix(prefix)
    for part in path.split("."):
        if tree is None:
            return True
        if part not in tree:
            return False
        tree = tree[part]
    return tree is None


def _without(model: ModelT, unread: Unread) -> ModelT:
    """A shallow copy of ``model`` with the ``unread`` fields deleted (nested ones inside
    copies of their parents): reading one raises AttributeError."""
    kept = model.model_copy()
    for name, inner in unread.items():
        if inner is None:
            kept.__dict__.pop(name, None)
        else:
            value = getattr(model, name)
            if isinstance(value, BaseModel):
                kept.__dict__[name] = _without(value, inner)
    return kept


def _dump_without(data: dict[str, Any], unread: Unread) -> dict[str, Any]:
    """``data`` (a model's JSON dump) without the ``unread`` fields."""
    kept = dict(data)
    for name, inner in unread.items():
        if inner is None:
            kept.pop(name, None)
        elif isinstance(kept.get(name), dict):
            kept[name] = _dump_without(kept[name], inner)
    return kept


@dataclasses.dataclass(frozen=True)
class CompileView:
    """The scenario the compiler compiles (`compile_view`) and the digest of what it holds."""

    scenario: Scenario
    digest: str


def compile_view(scenario: Scenario) -> CompileView:
    """``scenario`` without its unread fields, and the sha256 of everything it keeps.

    The KV policy is the scenario's (built from ``kv`` and ``serving.max_context`` alone, both
    kept), the draft is viewed the same way, and the file names, the overrides and the
    workload's and hardware file's lines stay (the compiler's errors name the file, field
    and line, or the override that set it), outside the digest: a result does not depend on
    them, and an error is never shared.
    """
    paged = scenario.stack.kv_page_tokens is not None
    unread = UNREAD_WORKLOAD if paged else UNREAD_STATIC_WORKLOAD
    workload = _without(scenario.workload, unread)
    hardware = _without(scenario.hardware, UNREAD_HARDWARE)
    stack = _without(scenario.stack, UNREAD_STACK)
    draft = None if scenario.draft is None else compile_view(scenario.draft)
    kept = {
        "workload": _dump_without(scenario.workload.model_dump(mode="json"), unread),
        "hardware": _dump_without(scenario.hardware.model_dump(mode="json"), UNREAD_HARDWARE),
        "stack": _dump_without(scenario.stack.model_dump(mode="json"), UNREAD_STACK),
        "model": scenario.model.model_dump(mode="json"),
        "files": [scenario.workload_file, scenario.hardware_file],
        "draft": None if draft is None else draft.digest,
        "role": compile_role(scenario),
    }
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"))
    viewed = Scenario(
        workload=workload,
        hardware=hardware,
        model=scenario.model,
        workload_file=scenario.workload_file,
        hardware_file=scenario.hardware_file,
        kv_policy=scenario.kv_policy,
        stack=stack,
        stack_file=scenario.stack_file,
        draft=None if draft is None else draft.scenario,
        overrides=scenario.overrides,  # neither in the digest: what an error blames
        lines=scenario.lines,
        hardware_lines=scenario.hardware_lines,
        role=scenario.role,
    )
    return CompileView(viewed, hashlib.sha256(text.encode()).hexdigest())


def compile_role(scenario: Scenario) -> str | None:
    """The server's role as its compile sees it: the role where it sizes a paged pool's
    requests (`kv.paged.role_sizes_pool`; static slots never), else None, so a cluster's
    pools of one workload share programs and step times whatever their roles."""
    stack = scenario.stack
    if stack.dynamic_batch and role_sizes_pool(scenario.role, stack.pages_on_demand):
        return scenario.role
    return None
