"""Where an output came from: the simulator (version and git commit, when known), the files,
the overrides and the resolved configuration of a scenario.

Every output records this (a run's JSON and ``--out`` files, sweep rows, Perfetto traces,
figures' metadata), so a result can be reproduced from itself and two results that differ
only by an override (``--set hw.socket.hbm.bandwidth=...``) can be told apart. Nothing here
reads a clock: the same inputs in the same tree give the same bytes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rdu_sim import PACKAGE_DIR, __version__, checkout, native, plugins
from rdu_sim.config import shipped
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.stack import NONE
from rdu_sim.config.yaml_io import file_problem
from rdu_sim.scenario import Scenario, coe_router

if TYPE_CHECKING:
    from rdu_sim.cluster.scenario import ClusterScenario

COMMIT_FILE = "_commit.json"
"""Written into a wheel's ``rdu_sim/`` by setup.py when it is built from a git checkout."""

_COSMETIC = ("description",)
"""Fields that describe a config without changing what it simulates."""


@dataclass(frozen=True)
class Simulator:
    """The code that produced an output: its version, and the git commit when known
    (``dirty``: tracked files differed from that commit); ``compiled``: whether the engine
    ran compiled (rdu_sim.native; the same results either way, a different speed)."""

    version: str
    commit: str | None
    dirty: bool | None
    compiled: bool = False
    changes: str | None = None  # a checkout's changed files' digest (checkout.changes_digest)

    @property
    def label(self) -> str:
        """``0.1.0``, or with the commit as a PEP 440 local label: ``0.1.0+g1a2b3c4d5e6f``
        (``.dirty`` appended when tracked files had changed, and the changes' digest when
        known: ``0.1.0+g1a2b3c4d5e6f.dirty.9c0e13a2``, one label per edit)."""
        if self.commit is None:
            return self.version
        dirty = ".dirty" if self.dirty else ""
        if self.dirty and self.changes is not None:
            dirty += f".{self.changes}"
        return f"{self.version}+g{self.commit[:12]}{dirty}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "commit": self.commit,
            "dirty": self.dirty,
            "changes": self.changes,
            "compiled": self.compiled,
        }


@functools.cache
def simulator() -> Simulator:
    """This process's simulator: the checkout's commit when rdu_sim runs from a git checkout
    (``rdu_sim.checkout``), else the commit a wheel was built from, else none. Computed once
    per process (the code a process runs does not change under it)."""
    found = checkout.commit()
    if found is not None:
        return Simulator(__version__, found.head, found.dirty, native.compiled(), found.changes)
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        return baked_simulator((PACKAGE_DIR / COMMIT_FILE).read_text(encoding="utf-8"))
    return Simulator(__version__, None, None, native.compiled())


def baked_simulator(text: str) -> Simulator:
    """The simulator a wheel's :data:`COMMIT_FILE` (``text``) records: its commit, whether
    tracked files differed and the changes' digest (setup.py's ``BuildWithCommit``)."""
    baked = json.loads(text)
    changes = baked.get("changes")
    return Simulator(
        __version__,
        str(baked["commit"]),
        bool(baked["dirty"]),
        native.compiled(),
        None if changes is None else str(changes),
    )


def file_digest(path: Path) -> str | None:
    """sha256 of a regular file, read in chunks (a FIFO would block, a huge file fill
    memory); None when it cannot be read (the run then reports the file's problem itself)."""
    if file_problem(path) is not None:
        return None
    digest = hashlib.sha256()
    try:
        with path.open("rb") as stream:
            for chunk in iter(lambda: stream.read(2**20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def resolved_config(scenario: Scenario) -> dict[str, Any]:
    """Everything a simulation depends on, as plain data: the workload after overrides, with
    its ``hardware`` and ``stack`` paths and its models (``model``, a draft, a CoE's router:
    a preset name, a config.json or a mapping) replaced by the hardware, serving stack and
    architectures themselves; a trace file by the sha256 of its content; a batching, KV
    or preemption policy from a plugin by its code (``plugins``: :func:`outside_code`). Sweep keys
    hash it (``rdu_sim.sweep.key``), outputs record it."""
    workload = scenario.workload.model_dump(mode="json")
    workload["hardware"] = None
    workload["stack"] = None
    workload["model"] = None
    # the other models a workload names (a draft, a CoE's router), as the architectures
    # they resolve to: a config.json's path says nothing of what the file holds
    if scenario.draft is not None and workload.get("speculation") is not None:
        workload["speculation"]["draft"] = scenario.draft.model.model_dump(mode="json")
    if scenario.workload.coe is not None:
        router = coe_router(scenario.workload, scenario.workload_file, {})
        workload["coe"]["router"] = router.model_dump(mode="json")
    hardware = scenario.hardware.model_dump(mode="json")
    hardware.pop("default_stack", None)  # the stack run is below, whichever file named it
    stack = scenario.stack.model_dump(mode="json")
    for field in _COSMETIC:
        workload.pop(field, None)
        hardware.pop(field, None)
        stack.pop(field, None)
    config: dict[str, Any] = {
        "workload": workload,
        "hardware": hardware,
        "stack": stack,
        "model": scenario.model.model_dump(mode="json"),
    }
    trace = scenario.workload.serving.trace
    if trace is not None:
        config["trace_sha256"] = file_digest(shipped.trace_path(scenario.base_dir, trace))
    serving = scenario.workload.serving
    code = outside_code(
        serving.prefill_priority,
        None,
        kv_policy=scenario.workload.kv.policy,
        preemption=serving.preemption,
    )
    if code:  # (none for rdu-sim's own policies: their rows keep their keys)
        config["plugins"] = code
    return config


def outside_code(
    batching: str | None,
    router: str | None,
    *,
    kv_policy: str | None = None,
    preemption: str | None = None,
) -> dict[str, Any]:
    """The code from outside rdu-sim (``rdu_sim.plugins.code_of``: its qualified name,
    package and source sha256) behind a batching policy, a router, a KV policy and a
    preemption policy named in a config, by the field that names it; empty when rdu-sim's
    own run (or a name no registry holds, which the run refuses itself). A sweep's point
    key hashes it with the config, so a plugin whose source changed is simulated again,
    never answered from a stored row."""
    found: dict[str, Any] = {}
    if batching is not None:
        from rdu_sim.serving.batching.base import batching_class  # (no numpy)

        policy = batching_class(batching)
        code = None if policy is None else plugins.code_of(policy)
        if code is not None:
            found["serving.prefill_priority"] = code
    if router is not None:
        from rdu_sim.cluster.routers.base import router_factory

        factory = router_factory(router)
        code = None if factory is None else plugins.code_of(factory)
        if code is not None:
            found["router.policy"] = code
    if kv_policy is not None:
        from rdu_sim.kv.policies import policy_class

        kv_class = policy_class(kv_policy)
        code = None if kv_class is None else plugins.code_of(kv_class)
        if code is not None:
            found["kv.policy"] = code
    if preemption is not None:
        from rdu_sim.serving.preemption.base import preemption_class  # (no numpy)

        victims = preemption_class(preemption)
        code = None if victims is None else plugins.code_of(victims)
        if code is not None:
            found["serving.preemption"] = code
    return found


def shown_file(path: str | Path) -> str:
    """A config file as an output names it: ``shipped:workloads/x.yaml`` for a shipped one
    (the same on every machine, installed or not), else the path as it was given."""
    with contextlib.suppress(ValueError, OSError, ConfigError):
        relative = Path(path).resolve().relative_to(shipped.root().resolve())
        return f"shipped:{relative.as_posix()}"
    return str(path)


def input_files(scenario: Scenario | ClusterScenario) -> list[Path]:
    """The files a scenario was read from: its workload, hardware and stack files and the
    request trace it replays; a cluster's: its file, its traffic trace and each pool's
    (what an output must never replace)."""
    if isinstance(scenario, Scenario):
        files = [Path(scenario.workload_file), Path(scenario.hardware_file)]
        if scenario.stack_file != NONE:
            files.append(Path(scenario.stack_file))
        trace = scenario.workload.serving.trace
    else:
        files = [Path(scenario.file)]
        for pool in scenario.pools:
            files.extend(input_files(pool.scenario))
        trace = scenario.config.traffic.trace
    if trace is not None:
        with contextlib.suppress(ConfigError):  # it was read: found again alike
            files.append(shipped.trace_path(scenario.base_dir, trace))
    return files


def of_scenario(scenario: Scenario) -> dict[str, Any]:
    """The provenance block of an output made from one scenario: ``simulator``, ``files``
    (workload, hardware and serving stack), ``overrides`` (as given with ``--set``, after
    parsing) and ``config`` (:func:`resolved_config`)."""
    return {
        "simulator": simulator().to_dict(),
        "files": {
            "workload": shown_file(scenario.workload_file),
            "hardware": shown_file(scenario.hardware_file),
            "stack": shown_file(scenario.stack_file),
        },
        "overrides": dict(scenario.overrides),
        "config": resolved_config(scenario),
    }
