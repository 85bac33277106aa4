"""Step results shared between sweep points (engine.shared_steps): keyed by every engine
input and nothing else, equal to a fresh simulation, and only inside ``share_steps``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rdu_sim import api
from rdu_sim.compiler import compile_program
from rdu_sim.config.workload import EngineConfig
from rdu_sim.engine import Engine, shared_steps
from rdu_sim.engine.for_hardware import engine_for
from rdu_sim.engine.gpu import GpuEngine
from rdu_sim.engine.gpu.work import GpuSettings
from rdu_sim.engine.shared_steps import step_key
from rdu_sim.sweep.worker import MAX_BATCH, Task, sibling_batches

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
SERVING = {
    "serving.requests": 4,
    "serving.batch_slots": 4,
    "serving.max_context": 4096,
    "serving.prompt_tokens": 512,
    "serving.output_tokens": 16,
    "serving.arrival": {"process": "closed_loop"},
}


@pytest.fixture(autouse=True)
def empty_memo() -> Iterator[None]:
    shared_steps.clear()
    yield
    shared_steps.clear()


def key_of(overrides: dict[str, object], engine: EngineConfig | None = None) -> str:
    scenario = api.load(SMALL, {**SERVING, **overrides})
    program = compile_program(scenario, api.default_step_shape(scenario, "decode"))
    config = engine if engine is not None else scenario.workload.engine
    return step_key(program, scenario.hardware, config, scenario.stack)


def test_the_key_changes_with_every_input_the_engine_reads_and_no_other() -> None:
    base = key_of({})
    read = {
        "hw.socket.hbm.bandwidth": 1.5e12,
        "hw.system.intra_node_link.bandwidth": 2e10,
        "hw.system.collective_chunks": 8,
        "stack.host.serial_per_step": 1e-3,  # the stack's host time is in the step
        "serving.max_context": 8192,  # a different step shape (its cache bucket)
    }
    for field, value in read.items():
        assert key_of({field: value}) != base, field
    assert key_of({}, EngineConfig(tiles_per_stage=16)) != base
    unread = {
        "hw.name": "renamed",
        "hw.description": "same machine",
        "serving.requests": 40,
        "serving.seed": 7,
    }
    for field, value in unread.items():
        assert key_of({field: value}) == base, field


def test_a_shared_step_is_the_fresh_simulation_and_only_inside_share_steps() -> None:
    scenario = api.load(SMALL, SERVING)
    program = compile_program(scenario, api.default_step_shape(scenario, "decode"))
    engine = Engine(scenario.hardware, scenario.workload.engine)
    fresh = engine.simulate_step(program)
    assert shared_steps.stats == {"hits": 0, "misses": 0}  # outside: nothing kept
    with api.share_steps():
        first = engine.simulate_step(program)
        again = Engine(scenario.hardware, scenario.workload.engine).simulate_step(program)
    assert first == fresh and again is first
    assert shared_steps.stats == {"hits": 1, "misses": 1}
    # a recorded step is never shared (its records are what it is for)
    with api.share_steps():
        recorded = Engine(scenario.hardware, scenario.workload.engine, record=True)
        assert recorded.simulate_step(program).records is not None


@pytest.mark.parametrize("hardware", [None, "dgx-h100"])
def test_steps_differing_only_in_host_time_share_their_device_run(hardware: str | None) -> None:
    # A calibration moves a stack's host time alone: the step is new (its time differs by
    # that host time), its device run is the one already simulated, and each step is what
    # it is simulated alone.
    extra = {} if hardware is None else {"hardware": hardware}
    times = ("0", "300us")
    alone = []
    for host in times:
        scenario = api.load(SMALL, {**SERVING, **extra, "stack.host.serial_per_step": host})
        program = compile_program(scenario, api.default_step_shape(scenario, "decode"))
        alone.append((scenario, program, engine_for(scenario).simulate_step(program)))
    assert alone[0][2].step_s != alone[1][2].step_s
    with api.share_steps():
        shared = [engine_for(s).simulate_step(p) for s, p, _ in alone]
    assert shared == [timing for _, _, timing in alone]
    assert shared_steps.stats == {"hits": 0, "misses": 2}
    assert shared_steps.device_stats == {"hits": 1, "misses": 1}
    first, second = alone[0][0], alone[1][0]
    program = alone[0][1]
    settings = [getattr(engine_for(s), "settings", None) for s in (first, second)]
    devices = {
        shared_steps.device_key(program, s.hardware, s.workload.engine, g)
        for s, g in zip((first, second), settings, strict=True)
    }
    assert len(devices) == 1


def test_runs_sharing_steps_report_what_they_report_alone() -> None:
    # Two sweep points differing only in serving knobs: the second simulates none of the
    # shapes the first did, and both JSON reports are byte-identical to unshared runs.
    points = [{}, {"serving.requests": 6, "serving.seed": 3}]
    alone = [json.dumps(api.run(SMALL, {**SERVING, **p}).to_dict()) for p in points]
    with api.share_steps():
        shared = [json.dumps(api.run(SMALL, {**SERVING, **p}).to_dict()) for p in points]
    assert shared == alone
    assert shared_steps.stats["hits"] >= 1
    misses = shared_steps.stats["misses"]
    with api.share_steps():
        api.run(SMALL, {**SERVING, **points[1]})
    assert shared_steps.stats["misses"] == misses  # everything already simulated


def test_the_key_reads_every_field_of_the_program_but_its_memory_plan() -> None:
    # One changed value per field; a field added to Program without one fails here, until
    # the key reads it or it is shown to be the memory plan's bookkeeping.
    scenario = api.load(SMALL, SERVING)
    program = compile_program(scenario, api.default_step_shape(scenario, "decode"))
    other = compile_program(scenario, api.default_step_shape(scenario, "prefill"))
    changed: dict[str, object] = {
        "shape": other.shape,
        "tp": program.tp + 1,
        "kernels": program.kernels[:-1],
        "host_bytes": program.host_bytes + 1.0,
        "stage_devices": program.tp * 2,
        "micro_batches": (program, program),
        "expert_balance": object(),
        "pipeline": (program,),
        "pipeline_micro_batches": 2,
        "pipeline_transfer_bytes": 1.0,
        "expert_schedule": "all",
    }
    names = {field.name for field in dataclasses.fields(program)}
    assert names - set(changed) == {"placement"}
    engine = scenario.workload.engine

    def key(of: object) -> str:
        return step_key(of, scenario.hardware, engine, scenario.stack)  # type: ignore[arg-type]

    base = key(program)
    for name, value in changed.items():
        assert key(dataclasses.replace(program, **{name: value})) != base, name
    assert key(dataclasses.replace(program, placement=other.placement)) == base


def test_a_gpu_step_is_shared_like_an_sn40l_one_keyed_by_its_gpu_and_settings() -> None:
    scenario = api.load(SMALL, {**SERVING, "hardware": "dgx-h100"})
    program = compile_program(scenario, api.default_step_shape(scenario, "decode"))
    engine = engine_for(scenario)
    assert isinstance(engine, GpuEngine)
    fresh = engine.simulate_step(program)
    with api.share_steps():
        first = engine.simulate_step(program)
        again = engine_for(scenario).simulate_step(program)
    assert first == fresh and again is first
    assert shared_steps.stats == {"hits": 1, "misses": 1}
    hardware, config, stack = scenario.hardware, scenario.workload.engine, scenario.stack
    base = step_key(program, hardware, config, stack, engine.settings)
    eager = dataclasses.replace(engine.settings, cuda_graphs=not engine.settings.cuda_graphs)
    assert step_key(program, hardware, config, stack, eager) != base
    faster = hardware.model_copy(
        update={"gpu": hardware.gpu.model_copy(update={"sms": hardware.gpu.sms + 1})}
    )
    assert step_key(program, faster, config, stack, engine.settings) != base
    assert engine.settings != GpuSettings()  # the stack's (TensorRT-LLM's FP8, say) ...
    assert step_key(program, hardware, config, stack, GpuSettings()) != base  # ... are read


@dataclass(frozen=True)
class _Point:
    key: str
    overrides: dict[str, object]
    config: dict[str, object]


def _task(key: str, **overrides: object) -> Task:
    return Task(_Point(key, dict(overrides), {}), dict, None)


def test_sweep_batches_put_points_differing_only_in_serving_knobs_together() -> None:
    # A pool hands consecutive points to different workers at once: siblings (the same
    # hardware, other serving knobs) would both miss the per-worker memo. Batches keep them on
    # one worker, never more than MAX_BATCH, and every task exactly once in order.
    tasks = [
        _task(f"{hbm}-{slots}", **{"hw.socket.hbm.bandwidth": hbm, "serving.batch_slots": slots})
        for hbm in (1, 2, 3)
        for slots in range(10)
    ]
    batches = sibling_batches(tasks, 2)
    assert [t.point.key for b in batches for t in b] == [t.point.key for t in tasks]
    assert all(len({t.point.overrides["hw.socket.hbm.bandwidth"] for t in b}) == 1 for b in batches)
    assert [len(b) for b in batches] == [MAX_BATCH, 2] * 3
    # few tasks for the batches wanted: one task a batch (every worker keeps work)
    assert [len(b) for b in sibling_batches(tasks[:4], 4)] == [1, 1, 1, 1]


def test_the_deployment_suite_shares_steps_between_rows_and_reports_them_as_alone() -> None:
    # Two of Argonne's H100 rows differing only in the batch meet each other's steps
    # (prefill at the same prompt); each row's value is what it simulates alone.
    from rdu_sim.validate.deployment import simulate
    from rdu_sim.validate.deployment_suite import run_deployment_suite
    from rdu_sim.validate.measurement_file import read_all, shipped_files

    rows = [
        p
        for p in read_all(shipped_files())
        if (p.hardware, p.model, p.tp, p.input_tokens, p.output_tokens)
        == ("dgx-h100", "llama-3.1-8b", 1, 128, 128)
        and p.stack == "tensorrt-llm-2024"
        and p.batch in (1, 16)
    ]
    assert len(rows) == 2
    alone = [simulate(p) for p in rows]
    assert shared_steps.stats == {"hits": 0, "misses": 0}  # outside the suite: nothing kept
    report = run_deployment_suite(rows)
    assert [r.simulated for r in report.results] == alone
    assert shared_steps.stats["hits"] >= 1
