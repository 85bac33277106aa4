"""rdu-sim embedded as a library in a long-lived service (a newcomer's trial): a result owns
its inputs and hands out copies, crosses a process boundary, and the API refuses arguments
of the wrong kind at the door, naming them."""

from __future__ import annotations

import pickle
import re
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

import rdu_sim
from rdu_sim import api, native
from rdu_sim.api_cluster import run_cluster
from rdu_sim.serving.step_cache import StepCost

W = "llama3.1-8b-1socket"
HBM = {"capacity": "64 GiB", "bandwidth": "1.6 TB/s", "latency": "500 ns", "efficiency": 0.9}


@pytest.fixture(scope="module")
def small_run() -> api.RunResult:
    return api.run(W, {"serving.requests": 8})


def test_editing_the_callers_overrides_after_a_run_changes_nothing_of_it() -> None:
    """The scenario kept the caller's nested dict (a shallow copy): editing it afterwards
    rewrote the run's provenance."""
    given = {"serving.requests": 8, "hw.socket.hbm": dict(HBM)}
    result = api.run(W, given)
    before = result.to_json()
    given["hw.socket.hbm"]["bandwidth"] = "1 TB/s"
    given["serving.requests"] = 9
    assert result.to_json() == before
    recorded = result.to_dict()["provenance"]["overrides"]
    assert recorded == {"serving.requests": 8, "hw.socket.hbm": HBM}
    assert result.scenario.overrides["hw.socket.hbm"] is not given["hw.socket.hbm"]


def test_overrides_on_a_scenario_are_its_own_too() -> None:
    base = api.load(W, {"serving.requests": 8})
    given = {"hw.socket.hbm": dict(HBM)}
    scenario = api.load(base, given)
    given["hw.socket.hbm"]["bandwidth"] = "1 TB/s"
    assert scenario.overrides["hw.socket.hbm"]["bandwidth"] == "1.6 TB/s"


def test_to_dict_hands_out_a_copy_of_the_provenance(small_run: api.RunResult) -> None:
    before = small_run.to_json()
    data = small_run.to_dict()
    data["provenance"]["overrides"]["serving.requests"] = 1_000
    data["provenance"]["files"].clear()
    assert small_run.to_json() == before


def test_summary_hands_out_a_copy_of_its_own(small_run: api.RunResult) -> None:
    """summary() returned the cached summary itself: editing its dicts and lists changed
    every later to_dict(), to_json() and summary()."""
    before = small_run.to_json()
    summary = small_run.summary()
    summary.warnings.append("edited")
    summary.memory.clear()
    summary.provenance["overrides"]["serving.requests"] = 1_000
    assert small_run.to_json() == before
    again = small_run.summary()
    assert again is not summary and again.warnings == [] and again.memory
    assert again.to_dict() == small_run.to_dict()


def test_a_cluster_to_dict_hands_out_a_copy_of_the_provenance() -> None:
    result = run_cluster("llama3.1-8b-chat", {"traffic.requests": 10})
    before = result.to_json()
    result.to_dict()["provenance"]["pools"].clear()
    assert result.to_json() == before


def test_a_run_result_round_trips_through_pickle(small_run: api.RunResult) -> None:
    """Closures (``serve_scenario.<locals>.<lambda>``, the backend's compiler timer) made a
    result unpicklable, so ``ProcessPoolExecutor().submit(api.run, ...)`` failed."""
    back = pickle.loads(pickle.dumps(small_run))
    assert back.to_json() == small_run.to_json()
    # its step caches still answer, and simulate a new shape (the backend came along)
    assert back.prefill_time(100) == small_run.prefill_time(100)
    assert back.prefill_time(3_000) == small_run.prefill_time(3_000)


@pytest.mark.parametrize(
    "workload",
    [
        "samba-coe-150x8b-8socket",
        "workloads/speculative/deepseek-r1-128k-snapstream-specprefill.yaml",
    ],
)
def test_a_coe_and_a_speculative_run_round_trip(workload: str) -> None:
    """A CoE run's caches (two closures) and a speculative run's draft cache and prefill
    saving (compiled frozen dataclasses) pickle too."""
    result = api.run(workload, {"serving.requests": 4})
    assert pickle.loads(pickle.dumps(result)).to_json() == result.to_json()


def test_a_step_round_trips_in_this_build() -> None:
    """Compiled (mypyc), a frozen dataclass unpickled field by field and its frozen
    ``__setattr__`` refused (FrozenInstanceError): ``rdu_sim.pickled``. The suite runs
    compiled in CI, so this checks the build that ships."""
    cost = api.step(W)
    back = pickle.loads(pickle.dumps(cost))
    assert isinstance(back, StepCost) and back == cost
    assert back.detail.to_dict() == cost.detail.to_dict()
    print("compiled:", native.compiled())


def test_a_cluster_result_round_trips_detached() -> None:
    result = run_cluster("llama3.1-8b-chat", {"traffic.requests": 10})
    columns = result.requests()
    back = pickle.loads(pickle.dumps(result))
    assert back.to_json() == result.to_json()
    assert back.run is None and back.pools == []  # the live simulation stays behind
    assert back.requests().keys() == columns.keys()
    for name, column in columns.items():
        np.testing.assert_array_equal(back.requests()[name], column, err_msg=name)


def test_results_come_back_from_a_process_pool() -> None:
    """The trial's failure: a worker's result could not be pickled back (and a step's
    broke the pool in the compiled build)."""
    with ProcessPoolExecutor(1) as pool:
        step = pool.submit(api.step, W).result()
        run = pool.submit(api.run, W, {"serving.requests": 8}).result()
    assert step == api.step(W)
    assert run.to_json() == api.run(W, {"serving.requests": 8}).to_json()


def test_every_compiled_frozen_dataclass_pickles_by_its_fields() -> None:
    """The rule of ``rdu_sim.pickled``, for every frozen dataclass of a compiled module (a new
    one would unpickle in the pure build and break in the compiled one); each field is a
    positional argument of its constructor, as ``by_fields`` passes them."""
    import ast
    import dataclasses
    import importlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    listed = [
        line.strip()
        for line in (root / "native-modules.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    checked = []
    for path in listed:
        tree = ast.parse((root / path).read_text())
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            frozen = any(
                isinstance(d, ast.Call)
                and any(k.arg == "frozen" and getattr(k.value, "value", False) for k in d.keywords)
                for d in node.decorator_list
            )
            if not frozen:
                continue
            methods = {
                item.name: ast.unparse(item.body[-1])
                for item in node.body
                if isinstance(item, ast.FunctionDef)
            }
            assert methods.get("__reduce__") == "return by_fields(self)", f"{path}: {node.name}"
            fields = dataclasses.fields(getattr(module, node.name))
            assert all(f.init and not f.kw_only for f in fields), f"{path}: {node.name}"
            checked.append(node.name)
    assert {"StepCost", "TimedCost", "CollectiveTiming", "PrefillSaving"} <= set(checked)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"batch": 0}, "batch must be >= 1, got 0"),
        ({"batch": -3}, "batch must be >= 1, got -3"),
        ({"tokens": 0}, "tokens must be >= 1, got 0"),
        ({"context": -1}, "context must be >= 0, got -1"),
        ({"phase": "bogus"}, "phase must be 'decode' or 'prefill', got 'bogus'"),
    ],
)
def test_a_step_out_of_range_is_an_input_error_naming_the_option(
    options: dict[str, object], named: str
) -> None:
    """``batch=0`` silently became the default batch (``batch or batch_slots()``), ``-3`` a
    bare ValueError, and StepShapeError was no InputError, so README's ``except
    rdu_sim.InputError`` missed ``phase="bogus"``."""
    from rdu_sim.serving.step_shape import StepShapeError

    with pytest.raises(rdu_sim.InputError, match=re.escape(named)) as caught:
        api.step(W, **options)  # type: ignore[arg-type]
    assert isinstance(caught.value, StepShapeError)
    assert caught.value.option == next(iter(options))
    with pytest.raises(rdu_sim.InputError, match=re.escape(named)):
        api.inspect_graph(W, **options)  # type: ignore[arg-type]


def test_a_step_of_batch_one_is_batch_one() -> None:
    assert api.step(W, batch=1).detail.batch == 1
    assert api.step(W, phase="prefill", batch=2, tokens=256, context=0).detail.batch == 2


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"batch": "4"}, "batch must be an integer or None, not str '4'"),
        ({"batch": 4.0}, "batch must be an integer or None, not float 4.0"),
        ({"tokens": True}, "tokens must be an integer or None, not bool True"),
        ({"phase": 1}, "phase must be 'decode' or 'prefill', not int 1"),
    ],
)
def test_a_step_option_of_the_wrong_type_is_a_type_error_naming_it(
    options: dict[str, object], named: str
) -> None:
    with pytest.raises(TypeError, match=re.escape(named)):
        api.step(W, **options)  # type: ignore[arg-type]


def test_a_numpy_integer_is_an_integer() -> None:
    assert api.step(W, batch=np.int64(2)).detail.batch == 2  # type: ignore[arg-type]


def test_studies_refuse_a_zero_batch_and_keep_a_given_context() -> None:
    """``decode_over_batches(..., context=0)`` used the workload's 8192 and dropped
    ``batch=0`` silently."""
    from rdu_sim import studies

    with pytest.raises(rdu_sim.InputError, match="batches must be >= 1, got 0"):
        studies.decode_over_batches(W, [0, 1], policies=("full",))
    with pytest.raises(rdu_sim.InputError, match="context must be >= 1, got 0"):
        studies.decode_over_batches(W, [1], policies=("full",), context=0)
    with pytest.raises(rdu_sim.InputError, match="batch must be >= 1, got 0"):
        studies.decode_over_contexts(W, [4096], policies=("full",), batch=0)
    (row,) = studies.decode_over_batches(W, [1], policies=("full",), context=4096)
    assert row["cache_len"] == 4096 and row["batch_slots"] == 1


@pytest.mark.parametrize(
    ("overrides", "shown"),
    [("serving.requests=4", "not str 'serving.requests=4'"), (42, "not int 42")],
)
def test_overrides_that_are_a_str_or_no_iterable_are_a_type_error(
    overrides: object, shown: str
) -> None:
    """A str was read one character at a time (``--set: s: an override must look like
    ...``); 42 gave a bare "'int' object is not iterable"."""
    for call in (
        lambda: api.run(W, overrides),  # type: ignore[arg-type]
        lambda: api.load(api.load(W), overrides),  # type: ignore[arg-type]
        lambda: run_cluster("llama3.1-8b-chat", overrides),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match="overrides must be a mapping") as caught:
            call()
        assert shown in str(caught.value) and "['serving.requests=8']" in str(caught.value)
    with pytest.raises(TypeError, match="each of an iterable of overrides must be a"):
        api.run(W, ["serving.requests=4", 5])  # type: ignore[list-item]


def test_a_progress_that_cannot_be_called_so_is_refused_before_the_run() -> None:
    with pytest.raises(TypeError, match="progress must be None or a callable"):
        api.run(W, {"serving.requests": 4}, progress=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"progress must take two arguments.*\(done\)"):
        api.run(W, {"serving.requests": 4}, progress=lambda done: None)  # type: ignore[arg-type]
    seen: list[int] = []
    api.run(W, {"serving.requests": 4}, progress=lambda done, *rest: seen.append(done))
    assert seen == [1, 2, 3, 4]


def test_share_steps_shares_in_the_callers_thread_only() -> None:
    """``share_steps()`` counted its depth in a module global: a thread that never entered
    the block shared the memo of one that had."""
    import threading

    from rdu_sim.compiler import shared_programs
    from rdu_sim.engine import shared_steps

    inside, leave = threading.Event(), threading.Event()
    seen: list[bool] = []

    def holder() -> None:
        with api.share_steps():
            seen.append(shared_programs.active())
            inside.set()
            leave.wait(60)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert inside.wait(60)
        assert seen == [True]
        assert not shared_programs.active()  # this thread never entered the block
        before = dict(shared_steps.stats)
        api.step(W, batch=3)
        api.step(W, batch=3)
        assert shared_steps.stats == before  # computed afresh, the memo untouched
        with api.share_steps():
            assert shared_programs.active()
            api.step(W, batch=3)
            api.step(W, batch=3)
        assert shared_steps.stats["hits"] >= before["hits"] + 1
    finally:
        leave.set()
        thread.join()
    assert not shared_programs.active()


def test_errors_cross_a_process_boundary_as_themselves() -> None:
    """A StepShapeError's default pickle lost its option (and could not be rebuilt)."""
    from rdu_sim.serving.step_shape import StepShapeError

    with ProcessPoolExecutor(1) as pool:
        with pytest.raises(StepShapeError, match="batch must be >= 1, got 0") as caught:
            pool.submit(api.step, W, batch=0).result()
        assert caught.value.option == "batch"
        with pytest.raises(rdu_sim.InputError, match=re.escape("serving.requestz")):
            pool.submit(api.run, W, {"serving.requestz": 1}).result()


def test_results_are_compared_and_hashed_by_identity(small_run: api.RunResult) -> None:
    """Frozen, yet ``hash(result)`` raised (dict fields) and ``==`` between two runs raised
    (NumPy records): identity now, for a run and a cluster's result alike."""
    again = api.run(W, {"serving.requests": 8})
    assert small_run == small_run and small_run != again
    assert hash(small_run) != hash(again) and {small_run: 1}[small_run] == 1
    assert small_run.to_json() == again.to_json()  # what compares two runs
    cluster = run_cluster("llama3.1-8b-chat", {"traffic.requests": 10})
    assert {cluster: 1}[cluster] == 1 and cluster == cluster


def test_a_step_report_round_trips() -> None:
    report = api.step_report(W, batch=2)
    assert pickle.loads(pickle.dumps(report)).to_dict() == report.to_dict()


def test_a_cluster_run_checks_its_progress_first() -> None:
    with pytest.raises(TypeError, match="progress must be None or a callable"):
        run_cluster("llama3.1-8b-chat", {"traffic.requests": 4}, progress=5)  # type: ignore[arg-type]


@pytest.mark.parametrize("given", [42, None, ["c.yaml"]])
def test_a_cluster_of_the_wrong_type_is_named(given: object) -> None:
    with pytest.raises(TypeError, match="cluster_or_path must be a ClusterScenario") as caught:
        run_cluster(given)  # type: ignore[arg-type]
    assert type(given).__name__ in str(caught.value)


def test_run_json_is_to_json_compact() -> None:
    """The README's word: ``to_json()`` indents by 2, and ``rdu-sim run --json`` prints
    the same sorted keys compact, ``to_json(indent=None)``, byte for byte."""
    from click.testing import CliRunner

    from rdu_sim.cli.main import cli

    printed = CliRunner().invoke(cli, ["run", W, "--set", "serving.requests=8", "--json"])
    assert printed.exit_code == 0, printed.output
    result = api.run(W, {"serving.requests": 8})
    assert printed.output == result.to_json(indent=None) + "\n"
    assert result.to_json() != result.to_json(indent=None) and "\n  " in result.to_json()
