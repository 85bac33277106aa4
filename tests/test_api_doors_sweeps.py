"""More doors of the Python API a notebook trial found ajar: ``sweep.load`` of a sweep name
the database does not hold returned an empty frame (and ``metrics="x"`` a frame without
metrics), ``run_sweep(workers=0)`` started a process per core where ``--workers 0`` is
refused, ``run_sweep(progress=callback)`` failed with an AttributeError, ``api.run`` of a
``backend`` that is no Backend failed inside the serving loop, and ``compare`` read one
hardware file's name a character at a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdu_sim import InputError, api
from rdu_sim.compare import compare
from rdu_sim.sweep import load, run_sweep
from rdu_sim.sweep.store import StoreError

ROOT = Path(__file__).resolve().parents[1]
W = "llama3.1-8b-1socket"
SPEC = """base: {base}
name: tiny
set: {{serving.requests: 2}}
axes: {{serving.batch_slots: [1, 2]}}
metrics: [decode_tokens_per_s]
evaluator: {{name: synthetic}}
"""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(SPEC.format(base=ROOT / "workloads" / f"{W}.yaml"))
    return path


def test_loading_a_sweep_the_database_does_not_hold_names_those_it_does(spec: Path) -> None:
    db = run_sweep(spec, workers=1).db
    assert len(load(db, sweep="tiny")) == 2
    with pytest.raises(
        StoreError, match=r"tiny.sqlite: sweep: no sweep 'tinny' here; it holds tiny"
    ):
        load(db, sweep="tinny")


def test_one_str_of_metrics_or_keys_is_a_type_error_not_a_frame_without_them(spec: Path) -> None:
    db = run_sweep(spec, workers=1).db
    assert "decode_tokens_per_s" in load(db, metrics=["decode_tokens_per_s"]).columns
    with pytest.raises(TypeError, match=r"^metrics must be a list .* \(give \['decode_tokens"):
        load(db, metrics="decode_tokens_per_s")
    with pytest.raises(TypeError, match=r"^keys must be a list"):
        load(db, keys="abc")
    with pytest.raises(TypeError, match=r"^db must be a sweep database's path .* not int 42"):
        load(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("workers", "error", "message"),
    [
        (0, ValueError, r"^workers must be at least 1 \(got 0\)"),
        (-1, ValueError, r"^workers must be at least 1 \(got -1\)"),
        ("2", TypeError, r"^workers must be an integer or None, not str '2'"),
        (1.5, TypeError, r"^workers must be an integer or None, not float 1.5"),
        (True, TypeError, r"^workers must be an integer or None, not bool"),
    ],
)
def test_run_sweep_refuses_workers_the_command_refuses_before_anything_runs(
    spec: Path, workers: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        run_sweep(spec, workers=workers)  # type: ignore[arg-type]
    assert not spec.with_suffix(".sqlite").exists()  # nothing ran, no database made


def test_run_sweep_refuses_a_progress_callback_naming_what_it_takes(spec: Path) -> None:
    with pytest.raises(
        TypeError, match=r"^progress must be True, False or a Reporter .* no message"
    ):
        run_sweep(spec, workers=1, progress=lambda done, total: None)  # type: ignore[arg-type]
    assert not spec.with_suffix(".sqlite").exists()


def test_a_backend_that_is_no_backend_is_a_type_error_naming_it() -> None:
    pattern = r"^backend must be None or a Backend such as EngineBackend\(\), not str 'engine'"
    with pytest.raises(TypeError, match=pattern):
        api.run(W, {"serving.requests": 1}, backend="engine")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=pattern):
        api.step(W, backend="engine")  # type: ignore[arg-type]


@pytest.mark.parametrize("argument", ["hardware_files", "vary"])
def test_compare_refuses_one_str_where_it_takes_a_list(argument: str) -> None:
    given = "sn40l" if argument == "hardware_files" else "kv.policy=full,snapstream"
    kwargs = {"hardware_files": [], "vary": [], argument: given}
    with pytest.raises(TypeError, match=rf"^{argument} must be a list .* give \['{given}'\]"):
        compare(W, **kwargs)  # type: ignore[arg-type]


def test_a_path_given_as_an_override_value_is_the_path_written_out() -> None:
    """``{"hardware": Path(...)}`` was refused: "Input should be a valid string"."""
    from rdu_sim.config import shipped

    hardware = shipped.locate("sn40l", ["hardware"])
    as_path = api.load(W, {"hardware": hardware})
    as_text = api.load(W, {"hardware": str(hardware)})
    assert as_path.overrides == as_text.overrides == {"hardware": str(hardware)}


@pytest.mark.parametrize("given", ["", "  "])
def test_an_empty_workload_path_says_so(given: str) -> None:
    """``api.run("")`` said ``.: is a directory, expected a file`` (Path("") is ".")."""
    with pytest.raises(InputError, match=r"^'\s*': an empty path: give a file or a shipped name$"):
        api.run(given)


def test_warn_and_record_take_a_bool_not_a_true_string() -> None:
    """``warn="no"`` is a true string: it warned."""
    with pytest.raises(TypeError, match=r"^warn must be True or False, not str 'no'$"):
        api.run(W, {"serving.requests": 1}, warn="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^record must be True or False, not int 1$"):
        api.step(W, record=1)  # type: ignore[arg-type]


def test_a_metric_no_row_or_result_can_hold_is_refused_not_dropped(
    spec: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``metrics=["decode_tokens_per_sec"]`` gave a frame without it, in silence; a metric a
    result may hold that these rows lack (a section this sweep's points did not have) still
    loads, without a column. The shipped evaluators only: one a test registered without a
    schema (test_sweep_run.py's, in the same process) turns the check off."""
    import rdu_sim.sweep.evaluators as evaluators

    shipped = {n: e for n, e in evaluators._REGISTRY.items() if n in ("simulate", "synthetic")}
    monkeypatch.setattr(evaluators, "_REGISTRY", shipped)
    db = run_sweep(spec, workers=1).db
    with pytest.raises(
        ValueError,
        match=r"^metrics: not in the results: decode_tokens_per_sec "
        r"\(did you mean 'decode_tokens_per_s'\?\)$",
    ):
        load(db, metrics=["decode_tokens_per_s", "decode_tokens_per_sec"])
    frame = load(db, metrics=["decode_tokens_per_s", "ttft_s.p50"])
    assert "decode_tokens_per_s" in frame.columns
