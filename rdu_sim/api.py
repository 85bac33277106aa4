"""The public, in-process API: what the CLI, sweeps and notebooks call.

    >>> from rdu_sim.api import run
    >>> result = run("workloads/deepseek-r1-128k-snapstream.yaml",
    ...              overrides={"serving.requests": 200})
    >>> result.to_dict()["decode_tokens_per_s"]             # the JSON contract
    >>> result.requests()["ttft_s"]                         # per-request columns
    >>> result.timeseries()["occupied"]                     # slot occupancy over time

``run`` loads and validates the workload, resolves the KV policy and the batch slots
(``auto`` = the compiler's batch capacity), plans memory, generates the requests from the
workload's seed, and simulates continuous batching; every distinct step shape is compiled
and simulated once by the engine (the step cache). Nothing is written to disk; no global
state is touched, so runs in one process are independent and repeatable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from numpy.typing import NDArray

from rdu_sim import __version__
from rdu_sim.compiler.program import Placement
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.overrides import HW_PREFIX, normalize_overrides
from rdu_sim.config.workload import ServingConfig
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.limits import check_run
from rdu_sim.report.summary import request_columns, series_columns, summarize
from rdu_sim.scenario import Scenario, build_scenario, load_scenario
from rdu_sim.serving.buckets import prefill_steps
from rdu_sim.serving.clock import SimulatedTimeError
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import (
    RequestSet,
    make_requests,
    typical_compressed_length,
    typical_length,
    typical_prompt,
)
from rdu_sim.serving.server import ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.step_cache import StepCache, StepCost
from rdu_sim.shapes import StepShape

__all__ = ["Backend", "EngineBackend", "RunResult", "load", "run", "step"]

Overrides = Iterable[str] | Mapping[str, Any] | None
Progress = Callable[[int, int], None]


class Backend(Protocol):
    """Where capacity, memory plans and step times come from (the compiler and engine)."""

    def batch_capacity(self, scenario: Scenario) -> int:
        """Largest batch whose memory plan fits (0 or CapacityError when none does)."""
        ...

    def plan_memory(self, scenario: Scenario, batch_slots: int) -> Placement:
        """One socket's memory plan for ``batch_slots`` (CapacityError if it does not fit)."""
        ...

    def step_cost(self, scenario: Scenario, shape: StepShape) -> StepCost:
        """Simulate one step of ``shape``."""
        ...


class EngineBackend:
    """The real thing: ``rdu_sim.compiler`` plans and compiles, ``rdu_sim.engine`` times."""

    NEEDS = (("rdu_sim.compiler", ("Compiler", "CapacityError")), ("rdu_sim.engine", ("Engine",)))

    @classmethod
    def missing(cls) -> list[str]:
        """Names this backend needs that are not importable (empty when ready)."""
        import importlib

        absent: list[str] = []
        for module_name, names in cls.NEEDS:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                absent.extend(f"{module_name}.{n}" for n in names)
                continue
            absent.extend(f"{module_name}.{n}" for n in names if not hasattr(module, n))
        return absent

    def __init__(self, *, record: bool = False) -> None:
        self.record = record  # the engine collects trace records (StepTiming.records)
        self._compiler: Any = None  # the last scenario's Compiler (it caches per instance)

    def compiler(self, scenario: Scenario) -> Any:
        """One Compiler per scenario, so a run plans memory and capacity once, not per shape."""
        from rdu_sim.compiler import Compiler

        if self._compiler is None or self._compiler.scenario is not scenario:
            self._compiler = Compiler(scenario)
        return self._compiler

    def batch_capacity(self, scenario: Scenario) -> int:
        """The compiler's batch capacity."""
        return int(self.compiler(scenario).batch_capacity())

    def plan_memory(self, scenario: Scenario, batch_slots: int) -> Placement:
        """The compiler's memory plan."""
        placement: Placement = self.compiler(scenario).placement(batch_slots)
        return placement

    def step_cost(self, scenario: Scenario, shape: StepShape) -> StepCost:
        """Compile the shape and simulate one step on the hardware model (recording its
        trace when the backend was built with ``record=True``)."""
        from rdu_sim.engine import Engine

        program = self.compiler(scenario).program(shape)
        engine = Engine(scenario.hardware, scenario.workload.engine, record=self.record)
        timing = engine.simulate_step(program)
        return StepCost(
            step_s=float(timing.step_s),
            hbm_util=float(timing.hbm_bandwidth_fraction),
            pcu_util=float(timing.utilization.get("pcu", 0.0)),
            detail=timing,
        )


def _capacity_error(message: str) -> Exception:
    from rdu_sim.compiler import CapacityError

    error: Exception = CapacityError(message)
    return error


def load(scenario_or_path: Scenario | str | Path, overrides: Overrides = None) -> Scenario:
    """A validated Scenario from a workload path or an existing Scenario (plus overrides)."""
    if isinstance(scenario_or_path, Scenario):
        if not overrides:
            return scenario_or_path
        # Rebuild from the scenario's own (already overridden) workload and hardware: the
        # hardware file on disk would lose earlier `hw.` overrides.
        scenario = scenario_or_path
        data = scenario.workload.model_dump(mode="json")
        hardware = scenario.hardware.model_dump(mode="json")
        merged = {f"{HW_PREFIX}{key}": value for key, value in hardware.items()}
        merged.update(normalize_overrides(overrides))
        return build_scenario(data, workload_file=scenario.workload_file, overrides=merged)
    return load_scenario(scenario_or_path, overrides)


@dataclass
class RunResult:
    """Everything a run produced: the metrics dict, per-request records, time series."""

    scenario: Scenario
    batch_capacity: int
    batch_slots: int
    placement: Placement
    requests_in: RequestSet
    records: ServingRecords
    cache: StepCache
    prefill_s: float
    _summary: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def policy(self) -> KVPolicy:
        """The KV policy the run served with (the scenario's)."""
        return self.scenario.kv_policy

    def meta(self) -> dict[str, Any]:
        """Identity of the run (names, parallelism, seed, version; no paths, no clocks)."""
        s = self.scenario
        return {
            "model": s.model.name,
            "workload": s.workload.name,
            "hardware": s.hardware.name,
            "tp": s.tp,
            "sockets": s.hardware.system.sockets,
            "seed": s.workload.serving.seed,
            "max_context": s.workload.serving.max_context,
            "version": __version__,
        }

    def prefill_time(self, prompt: int) -> float:
        """Prefill time of ``prompt`` as this run serves it (its own step cache)."""
        return prefill_seconds(self.cache, self.scenario.workload.serving, self.policy, prompt)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (see docs/serving.md): metrics, memory, identity."""
        if self._summary is None:
            self._summary = summarize(
                meta=self.meta(),
                kv_policy=self.policy.name,
                batch_capacity=self.batch_capacity,
                batch_slots=self.batch_slots,
                placement=self.placement,
                records=self.records,
                cache=self.cache,
                prefill_s=self.prefill_s,
                closed_loop=self.requests_in.closed_loop,
            )
        return dict(self._summary)

    def to_json(self, indent: int | None = 2) -> str:
        """``to_dict`` as JSON: sorted keys, byte-identical for identical inputs."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=indent)

    def requests(self) -> dict[str, NDArray[Any]]:
        """Per-request columns: ids, lengths, slot, arrival/admit/first-token/finish times,
        queue delay, TTFT, TPOT, end-to-end latency (seconds)."""
        return request_columns(self.records)

    def timeseries(self) -> dict[str, NDArray[Any]]:
        """State after each change: waiting, prefilling, decoding, occupied, occupancy,
        decode bucket, by ``time_s``."""
        return series_columns(self.records, self.batch_slots)

    def step_shapes(self) -> list[dict[str, Any]]:
        """Every simulated shape with its step time and how many steps ran it."""
        rows = []
        for shape, count in sorted(
            self.cache.steps.items(),
            key=lambda item: (item[0].phase, item[0].tokens, item[0].cache_len),
        ):
            rows.append(
                {
                    "phase": shape.phase,
                    "batch": shape.batch,
                    "tokens": shape.tokens,
                    "cache_len": shape.cache_len,
                    "step_s": self.cache.step_s(shape),
                    "steps": count,
                }
            )
        return rows


def resolve_batch_slots(scenario: Scenario, backend: Backend) -> tuple[int, int]:
    """(batch capacity, batch slots to run); CapacityError when not one sequence fits."""
    capacity = backend.batch_capacity(scenario)
    if capacity < 1:
        raise _capacity_error(
            f"{scenario.workload_file}: not even one sequence of max_context="
            f"{scenario.workload.serving.max_context} tokens fits beside the weights "
            f"({scenario.model.name}, tp={scenario.tp}, kv.policy="
            f"{scenario.workload.kv.policy}); lower serving.max_context, use a compressing "
            "kv.policy, or add sockets"
        )
    slots = scenario.workload.serving.batch_slots
    return capacity, capacity if slots == "auto" else int(slots)


def run(
    scenario_or_path: Scenario | str | Path,
    overrides: Overrides = None,
    progress: Progress | None = None,
    *,
    backend: Backend | None = None,
) -> RunResult:
    """Simulate serving a workload; ``progress(done, total)`` is called as requests finish."""
    scenario = load(scenario_or_path, overrides)
    backend = backend or EngineBackend()
    serving = scenario.workload.serving
    policy = scenario.kv_policy
    capacity, slots = resolve_batch_slots(scenario, backend)
    placement = backend.plan_memory(scenario, slots)
    requests = make_requests(serving, slots, scenario.base_dir, scenario.workload_file)
    check_run(scenario, slots, requests)  # refuse absurd runs before simulating
    cache = StepCache(lambda shape: backend.step_cost(scenario, shape))
    config = ServerConfig(
        slots, serving.max_context, serving.prefill_priority, serving.prefill_chunk_tokens
    )
    prompt = typical_prompt(scenario.workload.serving, requests.prompt_tokens)
    try:
        records = serve(requests, policy, cache, config, progress)
        prefill_s = prefill_seconds(cache, serving, policy, prompt)
    except SimulatedTimeError as exc:  # the input's fault: name the workload
        raise ConfigError.single(scenario.workload_file, "serving", str(exc)) from None
    return RunResult(scenario, capacity, slots, placement, requests, records, cache, prefill_s)


def prefill_seconds(
    cache: StepCache, serving: ServingConfig, policy: KVPolicy, prompt: int
) -> float:
    """Prefill time of ``prompt`` as the server runs it (bucketed or chunked, with the SnapKV
    selection when the policy compresses it), from the step cache."""
    return float(
        sum(
            cache.step_s(shape)
            for shape in prefill_steps(
                prompt, serving.max_context, serving.prefill_chunk_tokens, policy.compresses(prompt)
            )
        )
    )


def default_step_shape(
    scenario: Scenario,
    phase: str = "decode",
    *,
    batch: int | None = None,
    tokens: int | None = None,
    context: int | None = None,
    backend: Backend | None = None,
) -> StepShape:
    """The static shape `rdu-sim step` and :func:`step` simulate when not told otherwise.

    Decode: every batch slot at the decode bucket of the longest cache the KV policy keeps.
    Prefill: one prompt of the workload's typical length; with a compressing policy, the
    typical prompt it compresses (the median of the prompts longer than its budget), so the
    SnapKV selection's cost shows as its own kernel. ``tokens``/``context``/``batch``
    override each part.
    """
    serving = scenario.workload.serving
    policy = scenario.kv_policy
    if phase == "decode":
        if batch is None:
            batch = resolve_batch_slots(scenario, backend or EngineBackend())[1]
        longest = context if context is not None else policy.slot_tokens()
        return StepShape("decode", batch, tokens or 1, policy.decode_bucket(longest))
    if phase == "prefill":
        prompt = tokens
        if prompt is None and policy.compresses(serving.max_context - 1):
            prompt = typical_compressed_length(
                serving,
                policy.slot_tokens(),
                scenario.base_dir,
                scenario.workload_file,
            )
        return StepShape(
            "prefill", batch or 1, prompt or typical_length(serving.prompt_tokens), context or 0
        )
    raise ValueError(f"phase must be 'decode' or 'prefill', got {phase!r}")


def step(
    scenario_or_path: Scenario | str | Path,
    overrides: Overrides = None,
    *,
    phase: str = "decode",
    batch: int | None = None,
    tokens: int | None = None,
    context: int | None = None,
    backend: Backend | None = None,
    record: bool = False,
) -> StepCost:
    """Simulate one static step (see :func:`default_step_shape` for the defaults).
    ``detail`` of the result holds the engine's StepTiming; with ``record`` the engine also
    collects its trace records (``detail.records``, for ``rdu_sim.report.trace``). The
    timing is the same either way. ``record`` with a ``backend`` needs a recording one
    (``EngineBackend(record=True)``)."""
    scenario = load(scenario_or_path, overrides)
    if backend is None:
        backend = EngineBackend(record=record)
    elif record and not getattr(backend, "record", False):
        raise ValueError(
            "record=True needs a backend that records, e.g. "
            "EngineBackend(record=True), or no backend"
        )
    shape = default_step_shape(
        scenario, phase, batch=batch, tokens=tokens, context=context, backend=backend
    )
    return backend.step_cost(scenario, shape)
