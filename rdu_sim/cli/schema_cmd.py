"""`rdu-sim schema {workload,hardware,stack,cluster,plan,sweep}`: the JSON Schema of a config file.

Generated from the same pydantic models that validate the files, so it cannot drift. Point an
editor at it (for VS Code's YAML extension: `# yaml-language-server: $schema=workload.json`
at the top of the file) and typos are flagged as they are typed.
"""

from __future__ import annotations

import json
from typing import Any

import click
from pydantic import TypeAdapter

from rdu_sim.cluster.routers import router_names
from rdu_sim.config.cluster import ClusterConfig
from rdu_sim.config.extends import overlay_schema
from rdu_sim.config.hardware_file import OVERLAY_SCHEMA, hardware_schema
from rdu_sim.config.plan import PlanSpec
from rdu_sim.config.stack import StackConfig
from rdu_sim.config.workload import WorkloadConfig
from rdu_sim.kv import policy_names
from rdu_sim.serving.batching import batching_names
from rdu_sim.serving.preemption import preemption_names
from rdu_sim.sweep.spec import SweepSpec

# A hardware file is one of its kinds (SN40L sockets, or `kind: gpu`): a union's adapter.
SCHEMAS: dict[str, TypeAdapter[Any]] = {
    "workload": TypeAdapter(WorkloadConfig),
    "hardware": hardware_schema(),
    "stack": TypeAdapter(StackConfig),
    "cluster": TypeAdapter(ClusterConfig),
    "plan": TypeAdapter(PlanSpec),
    "sweep": TypeAdapter(SweepSpec),
}


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a `kind` file, as the YAML may be written.

    A workload's `kv.policy` and a plan's `search.kv_policy` list the names registered in
    `rdu_sim.kv`, `serving.prefill_priority` those of `rdu_sim.serving.batching`,
    `serving.preemption` those of `rdu_sim.serving.preemption`, a cluster's `router.policy`
    those of `rdu_sim.cluster.routers` (the config models cannot import the
    registries, which sit above them).
    """
    schema = SCHEMAS[kind].json_schema(mode="validation")
    defs = schema.get("$defs", {})
    if "KVConfig" in defs:
        defs["KVConfig"]["properties"]["policy"]["enum"] = policy_names()
    if "ServingConfig" in defs:
        serving = defs["ServingConfig"]["properties"]
        serving["prefill_priority"]["enum"] = batching_names()
        serving["preemption"]["enum"] = preemption_names()
    if "RouterConfig" in defs:
        defs["RouterConfig"]["properties"]["policy"]["enum"] = router_names()
    if "PlanSearch" in defs:
        for branch in defs["PlanSearch"]["properties"]["kv_policy"].get("anyOf", []):
            if branch.get("type") == "array":
                branch["items"]["enum"] = policy_names()
    _describe_references(schema)
    if kind == "hardware":  # or a file that extends another (the loader checks it merged)
        defs["HardwareOverlay"] = OVERLAY_SCHEMA
        schema["oneOf"] = [*schema["oneOf"], {"$ref": "#/$defs/HardwareOverlay"}]
    if kind == "stack":  # likewise
        whole = {k: v for k, v in schema.items() if k not in ("$defs", "title")}
        schema = {"$defs": {**defs, "StackConfig": whole}}
        defs = schema["$defs"]
        defs["StackOverlay"] = overlay_schema("StackOverlay", "serving stack")
        schema["oneOf"] = [{"$ref": "#/$defs/StackConfig"}, {"$ref": "#/$defs/StackOverlay"}]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"rdu-sim {kind} file",
        "type": "object",  # a hardware file is one of its kinds, each an object
        **{k: v for k, v in schema.items() if k != "title"},
    }


def _describe_references(schema: dict[str, Any]) -> None:
    """A field whose type is another section (``serving: ServingConfig``) gets that
    section's docstring as its description, so an editor's hover says what it is."""
    defs = schema.get("$defs", {})

    def target(node: dict[str, Any]) -> dict[str, Any] | None:
        ref = node.get("$ref") or next(
            (b.get("$ref") for b in node.get("anyOf", []) if "$ref" in b), None
        )
        return defs.get(str(ref).rsplit("/", 1)[-1]) if ref else None

    for owner in (schema, *defs.values()):
        for field in owner.get("properties", {}).values():
            section = target(field)
            if "description" not in field and section and "description" in section:
                field["description"] = section["description"]


@click.command("schema")
@click.argument("kind", type=click.Choice(sorted(SCHEMAS)))
@click.option(
    "--indent", type=click.IntRange(0, 8), default=2, show_default=True, help="JSON indentation."
)
def command(kind: str, indent: int) -> None:
    """Print the JSON Schema of a workload, hardware, cluster, plan or sweep file."""
    click.echo(json.dumps(json_schema(kind), indent=indent or None, sort_keys=False))
