"""Compiled programs shared between sweep points (compiler.shared_programs): the compiler sees
only its view of a scenario (compiler.view), its shared results are keyed by that view's
digest, equal fresh compilations, and a sweep batches points that compile alike together."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from rdu_sim import api
from rdu_sim.compiler import Compiler, compile_program, shared_programs
from rdu_sim.compiler import compile as compile_module
from rdu_sim.compiler.view import (
    UNREAD_HARDWARE,
    UNREAD_WORKLOAD,
    Unread,
    compile_view,
    unread_override,
)
from rdu_sim.engine import shared_steps
from rdu_sim.scenario import Scenario
from rdu_sim.shapes import StepShape
from rdu_sim.sweep.worker import Task, sibling_batches
from tests.test_shared_steps import SERVING, SMALL, _Point


@pytest.fixture(autouse=True)
def empty_memo() -> Iterator[None]:
    shared_steps.clear()  # both memos
    yield
    shared_steps.clear()


def digest(overrides: dict[str, object]) -> str:
    return compile_view(api.load(SMALL, {**SERVING, **overrides})).digest


def test_the_digest_changes_with_fields_the_compiler_reads_and_no_other() -> None:
    base = digest({})
    read = {
        "hw.socket.pmu.sram": "256 KiB",
        "hw.socket.hbm.bandwidth": 1.5e12,  # the allocation balances compute against it
        "hw.socket.hbm.capacity": "48 GiB",
        "hw.socket.pcu.count": 640,
        "serving.max_context": 8192,
        "serving.prompt_tokens": 1024,
        "serving.prefill_chunk_tokens": 256,
        "engine.tiles_per_stage": 16,
        "engine.buffer_tiles": 3,
        "hw.system.collective_chunks": 8,  # a branch bypassing a collective holds its chunks
        "dtypes.weights": "fp8",
        "memory.weights": "hot_set",
        "kernel_looping": False,
    }
    for field, value in read.items():
        assert digest({field: value}) != base, field
    unread = {
        "serving.batch_slots": 8,  # an argument of every memo key instead
        "serving.requests": 40,
        "serving.seed": 7,
        "hw.name": "renamed",
        "hw.system.intra_node_link.bandwidth": 2e10,
        "engine.fast_forward": False,
    }
    for field, value in unread.items():
        assert digest({field: value}) == base, field
        assert unread_override(field), field
    # the output length: read only for a paged stack's least reservation (kv.paged), so a
    # static stack's programs are shared across output lengths and a paged stack's are not
    assert digest({"serving.output_tokens": 64}) == base
    gpu = {"hardware": "dgx-h100", "stack": "tensorrt-llm"}
    assert digest({**gpu, "serving.output_tokens": 64}) != digest(gpu)


def _paths(unread: Unread, prefix: str = "") -> Iterator[tuple[str, bool]]:
    """(dotted path, whether the whole field is out) for every entry of an unread tree."""
    for name, inner in unread.items():
        yield prefix + name, inner is None
        if inner is not None:
            yield from _paths(inner, f"{prefix}{name}.")


def _get(root: Any, path: str) -> Any:
    for part in path.split("."):
        root = getattr(root, part)
    return root


def test_the_view_holds_no_unread_field_and_every_other() -> None:
    scenario = api.load(SMALL, SERVING)
    view = compile_view(scenario).scenario
    for tree, full, seen in (
        (UNREAD_WORKLOAD, scenario.workload, view.workload),
        (UNREAD_HARDWARE, scenario.hardware, view.hardware),
    ):
        for path, out in _paths(tree):
            _get(full, path)  # a real field of the scenario (no typo in the lists)
            if out:
                with pytest.raises(AttributeError):
                    _get(seen, path)
        kept = [name for name in type(full).model_fields if name not in tree]
        assert kept and all(_get(seen, name) == _get(full, name) for name in kept)
    assert view.model == scenario.model and view.tp == scenario.tp
    assert view.kv_policy.slot_tokens() == scenario.kv_policy.slot_tokens()


def test_a_compiler_rule_reading_outside_the_view_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # What makes the key exact: a rule that starts reading a field outside the view fails in
    # every test that compiles, rather than sharing a program compiled for other inputs.
    real = compile_module.kernel_graphs

    def reads_the_seed(
        scenario: Scenario, shape: StepShape, stage: Any = None, **queries: bool
    ) -> Any:
        _ = scenario.workload.serving.seed
        return real(scenario, shape, stage, **queries)

    scenario = api.load(SMALL, SERVING)
    shape = api.default_step_shape(scenario, "decode")
    compile_program(scenario, shape)  # compiles without the seed
    monkeypatch.setattr(compile_module, "kernel_graphs", reads_the_seed)
    with pytest.raises(AttributeError, match="seed"):
        compile_program(scenario, shape)


def shapes(scenario: Scenario) -> list[StepShape]:
    return [api.default_step_shape(scenario, kind) for kind in ("prefill", "decode")]


def test_a_shared_program_is_the_fresh_compilation_and_only_inside_sharing() -> None:
    scenario = api.load(SMALL, SERVING)
    fresh = [Compiler(scenario).program(s) for s in shapes(scenario)]
    assert shared_programs.stats == {"hits": 0, "misses": 0}  # outside: nothing kept
    sibling = api.load(SMALL, {**SERVING, "hw.system.intra_node_link.bandwidth": 2e10})
    with api.share_steps():
        first = [Compiler(scenario).program(s) for s in shapes(scenario)]
        misses = shared_programs.stats["misses"]
        again = [Compiler(sibling).program(s) for s in shapes(sibling)]
    assert first == fresh and again == fresh
    assert all(a.kernels is f.kernels for a, f in zip(again, first, strict=True))
    assert shared_programs.stats["misses"] == misses and shared_programs.stats["hits"] > 0
    # other slots: the plans differ, and so do the Programs, as when compiled fresh
    other = api.load(SMALL, {**SERVING, "serving.batch_slots": 8})
    with api.share_steps():
        shared = [Compiler(other).program(s) for s in shapes(other)]
    assert shared == [Compiler(other).program(s) for s in shapes(other)]


def test_runs_sharing_programs_report_what_they_report_alone() -> None:
    # Sweep points that differ in the links (steps differ, programs are equal), the slots
    # and serving knobs: byte-identical reports with the memos on and off.
    points: list[dict[str, object]] = [
        {},
        {"hw.system.intra_node_link.bandwidth": 2e10},
        {"serving.batch_slots": 8, "serving.seed": 3},
        {"hw.socket.pmu.sram": "256 KiB"},
    ]
    alone = [json.dumps(api.run(SMALL, {**SERVING, **p}).to_dict()) for p in points]
    with api.share_steps():
        shared = [json.dumps(api.run(SMALL, {**SERVING, **p}).to_dict()) for p in points]
    assert shared == alone
    assert shared_programs.stats["hits"] >= 1


def _task(**overrides: object) -> Task:
    return Task(_Point(json.dumps(overrides, sort_keys=True), dict(overrides), {}), dict, None)


def test_sweep_batches_pack_points_that_compile_alike() -> None:
    # 2 HBM x 5 links x 2 slots: the 10 points of one HBM compile alike (links are the
    # engine's), the 2 of one HBM and link share steps. Batches of at most 4 hold one HBM
    # each, never split a pair of slot siblings, and every task appears once.
    tasks = [
        _task(
            **{
                "hw.socket.hbm.bandwidth": hbm,
                "hw.system.intra_node_link.bandwidth": link,
                "serving.batch_slots": slots,
            }
        )
        for hbm in (1, 2)
        for link in range(5)
        for slots in (64, 128)
    ]
    batches = sibling_batches(tasks, 5)  # at most 20 // 5 = 4 a batch
    assert sorted(t.point.key for b in batches for t in b) == sorted(t.point.key for t in tasks)
    assert [len(b) for b in batches] == [4, 4, 2] * 2
    for batch in batches:
        assert len({t.point.overrides["hw.socket.hbm.bandwidth"] for t in batch}) == 1
        links = [t.point.overrides["hw.system.intra_node_link.bandwidth"] for t in batch]
        assert all(links.count(link) == 2 for link in links)  # slot siblings together
    assert sibling_batches(tasks, 5) == batches  # deterministic


def test_the_memo_keeps_the_most_recent_results_only_inside_sharing_and_never_an_error() -> None:
    memo: shared_programs.Memo[int] = shared_programs.Memo(2)
    calls: list[str] = []

    def compute(key: str) -> int:
        calls.append(key)
        return len(calls)

    assert memo.get("a", lambda: compute("a")) == 1
    assert memo.get("a", lambda: compute("a")) == 2  # outside sharing: computed each time
    with shared_programs.sharing():
        assert [memo.get(k, lambda k=k: compute(k)) for k in "abab"] == [3, 4, 3, 4]
        memo.get("c", lambda: compute("c"))  # drops "a", the least recently used
        assert memo.get("b", lambda: compute("b")) == 4
        assert memo.get("a", lambda: compute("a")) == 6

        def fail() -> int:
            raise ValueError("no")

        with pytest.raises(ValueError):
            memo.get("d", fail)
        assert memo.get("d", lambda: compute("d")) == 7
    assert memo.stats == {"hits": 3, "misses": 5}
