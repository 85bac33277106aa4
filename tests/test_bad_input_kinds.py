"""Bad input of the kinds added since the last hostile-input round (issue 34): config.json
models, clusters, sweep databases read back, speculation, GPU rates, KV links, arrivals,
`examples copy`, huge sweep specs. Each class ends in one `error:` line and exit status 2
within seconds, with no traceback, or runs when it is valid."""

from __future__ import annotations

import json
import sqlite3
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rdu_sim.cli.main import cli
from rdu_sim.config.errors import ConfigError
from rdu_sim.models.hf_config import read_config_json

ROOT = Path(__file__).resolve().parents[1]
QWEN3_MOE = ROOT / "tests" / "models" / "qwen3-30b-a3b" / "config.json"
SECONDS = 20.0


def invoke(*args: str | Path) -> Result:
    start = time.perf_counter()
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert time.perf_counter() - start < SECONDS, args
    return result


def one_error(result: Result, *words: str) -> str:
    """Exit 2 by SystemExit, no traceback, exactly one `error:` line holding `words`."""
    assert result.exit_code == 2, (result.exit_code, result.output[-1500:], result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for word in words:
        assert word in errors[0], (word, errors[0])
    return errors[0]


def clean_error(result: Result, *words: str) -> str:
    """Exit 2 by SystemExit, no traceback, stderr all `error:` lines (a nested file's context
    first) holding `words`."""
    assert result.exit_code == 2, (result.exit_code, result.output[-1500:], result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.strip().splitlines()
    assert lines and all(line.startswith(("error: ", "  ")) for line in lines), result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    return result.stderr


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


# --- config.json ---


def _qwen3_moe(tmp_path: Path, **changes: object) -> Path:
    data = json.loads(QWEN3_MOE.read_text())
    data.update(changes)
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "changes",
    [
        {"model_type": "qwen3_moe"},
        {"model_type": "gpt_oss"},
        {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4096,
         "max_window_layers": 10**12},
    ],
)  # fmt: skip
def test_a_huge_layer_count_is_refused_before_any_per_layer_table(
    tmp_path: Path, changes: dict[str, object]
) -> None:
    path = _qwen3_moe(tmp_path, num_hidden_layers=10**12, **changes)
    start = time.perf_counter()
    with pytest.raises(ConfigError) as caught:
        read_config_json(path)
    assert time.perf_counter() - start < 1.0
    assert [i.field for i in caught.value.issues][:1] == ["num_hidden_layers"]
    assert "must be 1..10000, got 1000000000000" in str(caught.value)


def test_a_huge_layer_count_in_a_workload_model_or_draft_is_one_error(tmp_path: Path) -> None:
    path = _qwen3_moe(tmp_path, num_hidden_layers=10**12)
    workload = write(
        tmp_path / "wl.yaml",
        f"""
        hardware: sn40l
        model: {{config_json: {path}}}
        serving: {{batch_slots: 4, max_context: 4096, prompt_tokens: 256, output_tokens: 8,
                   requests: 4}}
        """,
    )
    clean_error(invoke("run", workload), "num_hidden_layers", "must be 1..10000")
    draft = write(
        tmp_path / "draft.yaml",
        f"""
        hardware: sn40l
        model: llama-3.1-8b
        serving: {{batch_slots: 4, max_context: 4096, prompt_tokens: 256, output_tokens: 8,
                   requests: 4}}
        speculation: {{draft: {{config_json: {path}}}, decoding: {{draft_tokens: 2,
                       acceptance: 0.8}}}}
        """,
    )
    clean_error(invoke("run", draft), "num_hidden_layers", "must be 1..10000")


@pytest.mark.parametrize("key", ["torch_dtype", "dtype"])
@pytest.mark.parametrize("value", [["bfloat16"], {"a": 1}, 16])
def test_a_dtype_that_is_not_a_string_is_refused(tmp_path: Path, key: str, value: object) -> None:
    data = json.loads(QWEN3_MOE.read_text())
    data.pop("torch_dtype", None)
    data[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    line = one_error(invoke("inspect", "model", path), key)
    assert f"{value!r} is not one of bfloat16, float16, float32" in line


@pytest.mark.parametrize("layers", [[1000], [-1], [0, 48]])
def test_mlp_only_layers_outside_the_stack_are_refused(tmp_path: Path, layers: list[int]) -> None:
    path = _qwen3_moe(tmp_path, mlp_only_layers=layers)
    outside = [i for i in layers if not 0 <= i < 48]
    line = one_error(invoke("inspect", "model", path), "mlp_only_layers")
    assert f"{outside} are not layers of 0..47" in line


def test_mlp_only_layers_inside_the_stack_are_dense() -> None:
    data = json.loads(QWEN3_MOE.read_text()) | {"mlp_only_layers": [0, 47]}
    from rdu_sim.models.hf_config import architecture_from_config

    arch = architecture_from_config(data, file="x.json", name="q")
    flags = arch.moe_layer_flags()
    assert flags[0] is False and flags[47] is False and all(flags[1:47])


def test_a_config_json_in_a_folder_with_a_long_name_is_named_by_its_first_200_characters(
    tmp_path: Path,
) -> None:
    folder = tmp_path / ("q" * 230)
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(QWEN3_MOE.read_text())
    assert read_config_json(path).name == "q" * 200
    result = invoke("inspect", "model", path, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["name"] == "q" * 200


# --- sweep databases read back ---


@pytest.fixture(scope="module")
def synthetic_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("db")
    spec = write(
        folder / "spec.yaml",
        f"""
        name: s
        base: {ROOT / "workloads" / "llama3.1-8b-1socket.yaml"}
        axes:
          serving.batch_slots: [1, 2, 3]
        evaluator: {{name: synthetic}}
        """,
    )
    result = invoke("sweep", spec, "--db", folder / "s.sqlite")
    assert result.exit_code == 0, result.output
    return folder / "s.sqlite"


def _damaged(db: Path, tmp_path: Path, sql: str, *args: object) -> Path:
    import shutil

    copy = tmp_path / "d.sqlite"
    shutil.copyfile(db, copy)
    with sqlite3.connect(copy) as conn:
        conn.execute(sql, args)
    return copy


@pytest.mark.parametrize(
    ("column", "value", "words"),
    [
        ("overrides", "[1, 2]", "column overrides holds JSON list"),
        ("overrides", "5", "column overrides holds JSON int 5"),
        ("metrics", '"x"', "column metrics holds JSON str 'x'"),
        ("metrics", "null", "column metrics holds JSON NoneType"),
        ("overrides", '{"serving.batch_slots": 1' + "0" * 400 + "}", "an integer of 401 digits"),
        ("overrides", "[" * 100 + "]" * 100, "nested more than 64"),
        ("metrics", "{", "column metrics holds not valid JSON"),
        ("wall_s", "slow", "column wall_s holds text 'slow'"),
        ("attempts", 1.5, "column attempts holds real 1.5"),
        ("version", b"\x00", "column version holds blob"),
    ],
)
def test_a_damaged_row_is_left_out_with_one_warning_naming_it(
    synthetic_db: Path, tmp_path: Path, column: str, value: object, words: str
) -> None:
    """One damaged row no longer blocks the database: a reader draws the good rows, with
    one warning naming the point and the column (the advice was to throw all away)."""
    db = _damaged(synthetic_db, tmp_path, f"UPDATE results SET {column} = ? WHERE rowid = 2", value)
    with sqlite3.connect(db) as conn:
        bad = conn.execute("SELECT key FROM results WHERE rowid = 2").fetchone()[0]
    conn.close()
    result = invoke("plot", "sweep", db, "-o", tmp_path / "p.png")
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1, result.stderr
    assert warned[0].startswith(f"warning: {db}: point {bad[:12]}: column {column} holds ")
    assert words in warned[0]
    assert warned[0].endswith(
        "; the point counts as not computed and is left out (its sweep runs it again)"
    )
    assert "move it aside" not in result.stderr


def test_a_row_whose_key_is_not_text_is_one_error_naming_it(
    synthetic_db: Path, tmp_path: Path
) -> None:
    """A key that is not text names no point to run again: the database is refused."""
    db = _damaged(synthetic_db, tmp_path, "UPDATE results SET key = ? WHERE rowid = 1", b"\x07")
    line = one_error(
        invoke("plot", "sweep", db, "-o", tmp_path / "p.png"), str(db), "column key holds blob"
    )
    assert "move it aside" in line


@pytest.mark.parametrize("name", ["status", "key", "version", "error"])
def test_an_axis_named_like_a_bookkeeping_column_keeps_its_own_column(
    synthetic_db: Path, tmp_path: Path, name: str
) -> None:
    from rdu_sim.sweep import load

    db = _damaged(
        synthetic_db,
        tmp_path,
        "UPDATE results SET overrides = json_object(?, json_extract(overrides, "
        "'$.\"serving.batch_slots\"'))",
        name,
    )
    frame = load(db)
    assert frame.columns.is_unique
    assert frame.attrs["axes"] == [f"overrides.{name}"]
    assert sorted(frame[f"overrides.{name}"]) == [1, 2, 3]
    assert list(frame["status"]) == ["done"] * 3  # the bookkeeping column is untouched
    result = invoke("plot", "sweep", db, "-o", tmp_path / "p.png")
    assert result.exit_code == 0, result.output
    assert "Warning" not in result.stderr


@pytest.fixture(scope="module")
def every_metric_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real sweep whose spec lists no metrics: every metric is stored, `version` too."""
    folder = tmp_path_factory.mktemp("all")
    spec = write(
        folder / "spec.yaml",
        f"""
        name: every-metric
        base: {ROOT / "workloads" / "llama3.1-8b-1socket.yaml"}
        set: {{serving.requests: 1, serving.prompt_tokens: 64, serving.output_tokens: 2}}
        axes:
          serving.batch_slots: [1, 2]
        """,
    )
    result = CliRunner().invoke(cli, ["sweep", str(spec), "--db", str(folder / "a.sqlite")])
    assert result.exit_code == 0, result.output
    return folder / "a.sqlite"


def test_plot_sweep_of_every_metric_prints_no_warning(
    every_metric_db: Path, tmp_path: Path
) -> None:
    import warnings

    from rdu_sim.sweep import load

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frame = load(every_metric_db)
    assert frame.columns.is_unique
    assert "metrics.version" in frame.columns and "version" in frame.columns
    result = invoke("plot", "sweep", every_metric_db, "-o", tmp_path / "p.png")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""


def test_the_flat_view_names_a_bookkeeping_metric_apart(every_metric_db: Path) -> None:

    with sqlite3.connect(every_metric_db) as conn:
        names = [r[1] for r in conn.execute("PRAGMA table_info(results_flat)")]
    assert len(names) == len(set(names))
    assert "metrics.version" in names and "version" in names


# --- GPU hardware rates ---

LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["hw.gpu.bf16_flops=1e-300"], "gpu.bf16_flops: must be at least 1 FLOP/s, got 1e-300"),
        (["hw.gpu.fp8_flops=5e-324"], "gpu.fp8_flops: must be at least 1 FLOP/s"),
        (["hw.gpu.vector_flops=1e-300"], "gpu.vector_flops"),
        (["hw.gpu.bf16_flops=1.5 FLOP/s", "hw.gpu.max_gemm_efficiency=0.5"],
         "bf16_flops x efficiency is 0.75 per second, below the least rate of 1 per second"),
        (["hw.gpu.bf16_flops=1 FLOP/s", "hw.gpu.max_gemm_efficiency=1"],
         "beyond the serving clock's range"),
        (["hw.gpu.bf16_flops=1000"],  # a bare rate is per second: a forgotten unit, named
         "gpu.bf16_flops: 1000 without a unit reads as 1 kFLOP/s (a bare compute rate is FLOP "
         "per second; one below 1 GFLOP/s is taken for a forgotten unit); write the unit"),
    ],
)  # fmt: skip
def test_a_gpu_rate_too_small_to_time_a_step_is_refused(overrides: list[str], words: str) -> None:
    sets = [arg for o in ["hardware=dgx-h100", *overrides] for arg in ("--set", o)]
    clean_error(invoke("run", LLAMA, *sets, "--set", "serving.requests=1"), words)


# --- clusters: the KV link and arrivals on the serving clock ---

CLUSTER = """
name: c
pools:
  {pools}
traffic: {{requests: {requests}, rate: {rate}, prompt_tokens: 256, output_tokens: 4}}
slo: {{ttft: 1 s, tpot: 40 ms, attainment: 0.9}}
{extra}
"""
DISAGGREGATED = (
    "prefill: {workload: wl.yaml, replicas: 1, role: prefill}\n"
    "  decode: {workload: wl.yaml, replicas: 1, role: decode}"
)
WORKLOAD = """
hardware: sn40l
model: llama-3.1-8b
serving: {batch_slots: 4, max_context: 4096, prompt_tokens: 256, output_tokens: 8, requests: 4}
"""


def cluster_file(
    tmp_path: Path,
    *,
    pools: str = "serve: {workload: wl.yaml, replicas: 1}",
    requests: int = 4,
    rate: float = 2.0,
    extra: str = "",
) -> Path:
    write(tmp_path / "wl.yaml", WORKLOAD)
    text = CLUSTER.format(pools=pools, requests=requests, rate=rate, extra=extra)
    return write(tmp_path / "cluster.yaml", text)


@pytest.mark.parametrize(
    ("bandwidth", "words"),
    [
        ("1 B/s", "kv_transfer.bandwidth: a KV transfer of 33,554,432 bytes takes 3.355e+07 s"),
        ("1e-300 B/s", "kv_transfer.bandwidth: must be at least 1 B/s, got 1e-300 B/s"),
        ("5e-324 B/s", "kv_transfer.bandwidth: must be at least 1 B/s, got 5e-324 B/s"),
    ],
)
def test_a_kv_link_too_slow_for_the_clock_is_one_error(
    tmp_path: Path, bandwidth: str, words: str
) -> None:
    path = cluster_file(
        tmp_path,
        pools=DISAGGREGATED,
        extra=f"kv_transfer: {{bandwidth: {bandwidth}, latency: 10 us}}",
    )
    one_error(invoke("run", path), str(path), words)


def test_a_slow_kv_link_within_the_clock_runs(tmp_path: Path) -> None:
    from rdu_sim import api_cluster

    path = cluster_file(
        tmp_path, pools=DISAGGREGATED, extra="kv_transfer: {bandwidth: 1 MB/s, latency: 10 us}"
    )
    result = api_cluster.run_cluster(path)
    kv = result.requests()
    assert (result.run.records.kv_end_ps >= 33_554_432 * 10**6).any()  # 33.5 s per cache
    assert len(kv["status"]) == 4


def test_cluster_arrivals_past_the_clock_are_refused_before_the_int64_cast(
    tmp_path: Path,
) -> None:
    import warnings

    path = cluster_file(tmp_path, requests=20, rate=1.0e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "invalid value encountered in cast"
        line = one_error(invoke("run", path), str(path), "traffic: an arrival at")
    assert "beyond 4.612e+06 s" in line


def test_arrivals_ps_refuses_nan_and_late_arrivals_and_casts_the_rest() -> None:
    import numpy as np

    from rdu_sim.serving.clock import MAX_ARRIVAL_S, SimulatedTimeError, arrivals_ps

    assert arrivals_ps(np.array([0.0, 1.5, MAX_ARRIVAL_S])).tolist() == [
        0,
        1_500_000_000_000,
        2**62,
    ]
    for bad in (np.nan, np.inf, MAX_ARRIVAL_S * 1.0001):
        with pytest.raises(SimulatedTimeError) as caught:
            arrivals_ps(np.array([0.0, bad]), "traffic")
        assert caught.value.field == "traffic"


# --- speculation ---


@pytest.mark.parametrize(
    ("mean", "concentration", "words"),
    [
        (1e-200, 1e-200, "alpha = mean x concentration is 0, below 2.23e-308"),
        (0.5, 1e-310, "alpha = mean x concentration is 5e-311"),
        (1 - 1e-16, 1e-300, "beta = (1 - mean) x concentration"),
    ],
)
def test_a_beta_acceptance_numpy_cannot_draw_is_refused(
    tmp_path: Path, mean: float, concentration: float, words: str
) -> None:
    path = write(
        tmp_path / "wl.yaml",
        WORKLOAD + "speculation:\n  draft: llama-3.2-1b\n  decoding: {draft_tokens: 2, acceptance: "
        f"{{dist: beta, mean: {mean!r}, concentration: {concentration!r}}}}}\n",
    )
    one_error(invoke("run", path), "speculation.decoding.acceptance", words)


def test_a_tiny_but_normal_beta_acceptance_draws_zeros_and_ones() -> None:
    from rdu_sim.config.speculation import BetaAcceptance
    from rdu_sim.serving.acceptance import request_rates

    acceptance = BetaAcceptance(dist="beta", mean=0.5, concentration=1e-300)
    rates = request_rates(acceptance, 64, seed=0)
    assert set(rates.tolist()) <= {0.0, 1.0} and len(set(rates.tolist())) == 2


# --- sweep specs ---


def test_a_base_that_is_a_symlink_loop_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    spec = write(tmp_path / "s.yaml", "base: a.yaml\naxes:\n  serving.batch_slots: [1, 2]\n")
    for command in (["check"], ["sweep", "--dry-run"]):
        result = invoke(*command, spec)
        clean_error(result, f"{spec}:1: base:", "a loop of symbolic links")
        assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("step", "words"),
    [("5e-324", "the range has inf values"), ("1e-300", "the range has 1e+300 values"),
     ("0.00001", "the range has 100001 values")],
)  # fmt: skip
def test_a_range_step_too_small_is_refused_by_its_count(
    tmp_path: Path, step: str, words: str
) -> None:
    write(tmp_path / "wl.yaml", WORKLOAD)
    spec = write(
        tmp_path / "s.yaml",
        f"base: wl.yaml\naxes:\n  serving.seed: {{start: 0, stop: 1, step: {step}}}\n",
    )
    clean_error(invoke("check", spec), "axes.serving.seed", words, "at most 100000")


@pytest.mark.parametrize(
    "body",
    [
        "set:\n  serving.seed: 1\n  serving: {seed: 2}\naxes:\n  serving.batch_slots: [1, 2]\n",
        "set:\n  serving: {seed: 2}\n  serving.seed: 1\naxes:\n  serving.batch_slots: [1, 2]\n",
        "set:\n  serving: {seed: 2}\naxes:\n  serving.batch_slots: [1, 2]\n",
        "set:\n  serving.arrival: {process: closed_loop}\naxes:\n  serving.arrival.rate: [1, 2]\n",
    ],
)
def test_a_field_set_both_dotted_and_inside_a_mapping_is_refused(tmp_path: Path, body: str) -> None:
    write(tmp_path / "wl.yaml", WORKLOAD)
    spec = write(tmp_path / "s.yaml", "base: wl.yaml\n" + body)
    clean_error(invoke("check", spec), "overlaps", "set the field in one place only")


def test_sibling_paths_of_one_mapping_are_not_an_overlap(tmp_path: Path) -> None:
    write(tmp_path / "wl.yaml", WORKLOAD)
    spec = write(
        tmp_path / "s.yaml",
        "base: wl.yaml\nset:\n  serving.seed: 1\n  serving.requests: 2\n"
        "axes:\n  serving.batch_slots: [1, 2]\n",
    )
    result = invoke("check", spec)
    assert result.exit_code == 0, result.output


@pytest.fixture
def sample_points(monkeypatch: pytest.MonkeyPatch) -> int:
    """A smaller sample of a huge grid (the shipped 500 resolves in about 10 s here): the rule
    is the same at any size."""
    from rdu_sim.sweep import run

    monkeypatch.setattr(run, "SAMPLE_POINTS", 40)
    return 40


def test_check_and_dry_run_of_a_huge_grid_count_it_and_resolve_a_sample(
    tmp_path: Path, sample_points: int
) -> None:
    from rdu_sim.sweep import load_spec
    from rdu_sim.sweep.expand import expand

    write(tmp_path / "wl.yaml", WORKLOAD)
    spec = write(
        tmp_path / "big.yaml",
        "base: wl.yaml\naxes:\n  serving.seed: {start: 0, stop: 99999, step: 1}\n",
    )
    result = invoke("check", spec)
    assert result.exit_code == 0, result.output
    assert f"100,000 grid points, {sample_points} of them resolved" in result.output
    result = invoke("sweep", spec, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "100,000 grid points" in result.stderr + result.stdout
    table = [line for line in result.stdout.splitlines() if "serving.seed=" in line]
    assert len(table) == sample_points
    assert table[0].endswith("serving.seed=0") and table[-1].endswith("serving.seed=99999")
    assert not (tmp_path / "big.sqlite").exists()  # a dry run writes nothing
    sample = expand(load_spec(spec), sample=sample_points)
    assert sample.sampled and sample.grid_size == 100_000


def test_a_sample_of_a_grid_is_its_evenly_spaced_points_in_grid_order(tmp_path: Path) -> None:
    from rdu_sim.sweep import load_spec
    from rdu_sim.sweep.expand import expand

    write(tmp_path / "wl.yaml", WORKLOAD)
    spec = write(
        tmp_path / "s.yaml",
        "base: wl.yaml\naxes:\n  serving.seed: [0, 1, 2, 3, 4]\n  serving.batch_slots: [1, 2, 3]\n",
    )
    whole = expand(load_spec(spec))
    sample = expand(load_spec(spec), sample=4)  # indices 0, 5, 9, 14 of 15
    assert not whole.sampled and whole.grid_size == 15
    assert [p.overrides for p in sample.points] == [
        whole.points[i].overrides for i in (0, 5, 9, 14)
    ]
    assert expand(load_spec(spec), sample=15).points == whole.points


# --- examples copy ---


def test_examples_copy_never_writes_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "dir"
    (target / "workloads").mkdir(parents=True)
    outside = tmp_path / "outside.yaml"
    link = target / "workloads" / "llama3.1-8b-1socket.yaml"
    link.symlink_to(outside)  # dangling: exists() is False
    result = invoke("examples", "copy", target)
    assert result.exit_code == 0, result.output
    assert "kept 1 existing file(s)" in result.stdout
    assert not outside.exists() and link.is_symlink()
    result = invoke("examples", "copy", target, "--force")
    assert result.exit_code == 0, result.output
    assert not outside.exists()
    assert not link.is_symlink() and link.read_text().startswith("#")


def test_examples_copy_refuses_a_folder_link_out_of_dir_before_writing(tmp_path: Path) -> None:
    target = tmp_path / "dir"
    elsewhere = tmp_path / "elsewhere"
    target.mkdir()
    elsewhere.mkdir()
    (target / "workloads").symlink_to(elsewhere)
    one_error(invoke("examples", "copy", target), f"{target / 'workloads'}", f"to {elsewhere}")
    assert list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in target.iterdir()) == ["workloads"]  # nothing else written
    inner = target / "inner"
    inner.mkdir()
    (target / "workloads").unlink()
    (target / "workloads").symlink_to(inner)  # a link that stays inside DIR is a folder
    assert invoke("examples", "copy", target).exit_code == 0
    assert (inner / "llama3.1-8b-1socket.yaml").is_file()


@pytest.mark.parametrize("target", ["", "   "])
def test_examples_copy_refuses_an_empty_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    monkeypatch.chdir(tmp_path)
    one_error(invoke("examples", "copy", target), "DIR: is empty")
    assert list(tmp_path.iterdir()) == []


# --- a Composition of Experts in a cluster pool ---


@pytest.mark.parametrize("where", ["workload", "set"])
def test_a_coe_block_in_a_cluster_pool_is_refused(tmp_path: Path, where: str) -> None:
    coe = "{experts: 4, router: llama-3.1-8b, popularity: {dist: zipf, exponent: 1.0}}"
    if where == "workload":
        write(tmp_path / "coe.yaml", WORKLOAD + f"coe: {coe}\n")
        pools = "serve: {workload: coe.yaml, replicas: 1}"
    else:
        pools = f"serve: {{workload: wl.yaml, replicas: 1, set: {{coe: {coe}}}}}"
    path = cluster_file(tmp_path, pools=pools)
    one_error(invoke("run", path), "pools.serve", "Composition of Experts (coe:)", "coe: null")
    clean_error(invoke("check", path), "pools.serve", "Composition of Experts (coe:)")


def test_coe_null_in_a_pool_s_set_runs_the_pool_as_one_model(tmp_path: Path) -> None:
    coe = "{experts: 4, router: llama-3.1-8b, popularity: {dist: zipf, exponent: 1.0}}"
    write(tmp_path / "coe.yaml", WORKLOAD + f"coe: {coe}\n")
    path = cluster_file(
        tmp_path, pools="serve: {workload: coe.yaml, replicas: 1, set: {coe: null}}"
    )
    result = invoke("run", path)
    assert result.exit_code == 0, result.output


def test_requests_csv_leaves_no_decode_replica_empty(tmp_path: Path) -> None:
    import csv

    mixed = cluster_file(tmp_path / "mixed", requests=3)
    result = invoke("run", mixed, "--out", tmp_path / "m")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((tmp_path / "m" / "requests.csv").open()))
    assert [r["decode_replica"] for r in rows] == ["", "", ""]
    assert [r["replica"] for r in rows] == ["0", "0", "0"]
    split = cluster_file(tmp_path / "split", pools=DISAGGREGATED, requests=3)
    result = invoke("run", split, "--out", tmp_path / "s")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((tmp_path / "s" / "requests.csv").open()))
    assert [r["decode_replica"] for r in rows] == ["1", "1", "1"]


# --- a valid but slow run says so before it runs ---


def test_a_step_past_the_slow_bound_warns_with_its_least_events(tmp_path: Path) -> None:
    from rdu_sim.compiler import compile_program
    from rdu_sim.engine import Engine
    from rdu_sim.engine.budget import SLOW_STEP_EVENTS
    from rdu_sim.scenario import load_scenario
    from rdu_sim.shapes import StepShape

    path = write(tmp_path / "wl.yaml", WORKLOAD)
    shape = StepShape("decode", 4, 1, 4096)
    for tiles, slow in ((8, False), (4096, True)):
        scenario = load_scenario(path, [f"engine.tiles_per_stage={tiles}"])
        engine = Engine(scenario.hardware, scenario.workload.engine)
        least = engine.estimate_events(compile_program(scenario, shape))
        assert (least > SLOW_STEP_EVENTS) is slow, (tiles, least)


def test_the_cli_prints_a_slow_step_as_one_warning_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rdu_sim.engine.budget as budget

    path = write(tmp_path / "wl.yaml", WORKLOAD)
    result = invoke("step", path)
    assert result.exit_code == 0 and result.stderr == "", result.stderr
    monkeypatch.setattr(budget, "SLOW_STEP_EVENTS", 100)
    result = invoke("step", path)
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: this decode step simulates at least ")
    assert "tiles per stage and call; engine.tiles_per_stage = 8)" in lines[0]


def test_only_the_rows_asked_for_are_checked(synthetic_db: Path, tmp_path: Path) -> None:

    from rdu_sim.sweep import load
    from rdu_sim.sweep.store import DamagedRowWarning

    db = _damaged(synthetic_db, tmp_path, "UPDATE results SET metrics = '[1]' WHERE rowid = 1")
    with sqlite3.connect(db) as conn:
        bad = conn.execute("SELECT key FROM results WHERE rowid = 1").fetchone()[0]
        good = [r[0] for r in conn.execute("SELECT key FROM results WHERE rowid > 1")]
    assert list(load(db, keys=good)["key"]) == good  # the keys' order, as given
    with pytest.warns(DamagedRowWarning, match=f"point {bad[:12]}: column metrics holds JSON list"):
        # the one sweep's rows in its grid order: the damaged row left out, every other kept
        assert sorted(load(db)["key"]) == sorted(good)


def test_a_sweep_over_a_large_grid_says_it_is_resolving_before_it_starts(
    tmp_path: Path, sample_points: int
) -> None:
    from rdu_sim.sweep import run_sweep
    from rdu_sim.sweep.progress import Silent

    class Recorder(Silent):
        def __init__(self) -> None:
            self.messages: list[str] = []

        def message(self, text: str) -> None:
            self.messages.append(text)

    write(tmp_path / "wl.yaml", WORKLOAD)
    spec = write(
        tmp_path / "s.yaml",
        f"base: wl.yaml\naxes:\n  serving.seed: {{start: 0, stop: {sample_points}, step: 1}}\n"
        "evaluator: {name: synthetic}\n",
    )
    recorder = Recorder()
    run_sweep(spec, db=tmp_path / "s.sqlite", workers=1, dry_run=True, progress=recorder)
    assert not any("resolving" in m for m in recorder.messages)
    run_sweep(spec, db=tmp_path / "s.sqlite", workers=1, progress=recorder)
    resolving = [m for m in recorder.messages if "resolving" in m]
    assert resolving == [f"s: resolving {sample_points + 1} grid points before the first runs"]


@pytest.mark.parametrize(
    ("base", "kind"),
    [
        (ROOT / "workloads" / "clusters" / "llama3.1-8b-chat.yaml", "cluster file"),
        (ROOT / "hw_configs" / "sn40l.yaml", "hardware file"),
        (ROOT / "workloads" / "sweeps" / "llama8b-batch.yaml", "sweep spec"),
    ],
)
def test_a_sweep_base_of_another_kind_is_one_error(tmp_path: Path, base: Path, kind: str) -> None:
    """Was one "unknown field" per top-level key of the base (pools, router, traffic...)."""
    spec = write(tmp_path / "s.yaml", f"base: {base}\naxes:\n  serving.batch_slots: [1, 2]\n")
    one_error(
        CliRunner().invoke(cli, ["sweep", str(spec), "--db", str(tmp_path / "s.sqlite")]),
        f"base: '{base}' is a {kind}, not a workload file",
    )
    assert not (tmp_path / "s.sqlite").exists()


def test_a_plan_cluster_or_a_pool_workload_of_another_kind_is_one_error(tmp_path: Path) -> None:
    workload = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
    cluster = ROOT / "workloads" / "clusters" / "llama3.1-8b-chat.yaml"
    plan = write(tmp_path / "p.yaml", f"cluster: {workload}\nsearch: {{tp: [1]}}\n")
    one_error(
        CliRunner().invoke(cli, ["plan", str(plan), "--db", str(tmp_path / "p.sqlite")]),
        f"cluster: '{workload}' is a workload file, not a cluster file",
    )
    pool = write(
        tmp_path / "c.yaml",
        f"pools:\n  serve: {{workload: {cluster}, replicas: 1}}\n"
        "traffic: {trace: chat-400}\nslo: {ttft: 500 ms, tpot: 40 ms}\n",
    )
    one_error(
        CliRunner().invoke(cli, ["run", str(pool)]),
        f"pools.serve.workload: pool 'serve': '{cluster}' is a cluster file, not a workload file",
    )


@pytest.mark.parametrize("field", ["hardware", "stack"])
def test_a_hardware_or_stack_of_another_kind_is_one_error(field: str) -> None:
    cluster = ROOT / "workloads" / "clusters" / "llama3.1-8b-chat.yaml"
    expected = {"hardware": "hardware file", "stack": "serving stack"}[field]
    one_error(
        CliRunner().invoke(cli, ["run", "llama3.1-8b-1socket", "--set", f"{field}={cluster}"]),
        f"{field}: '{cluster}' is a cluster file, not a {expected}",
    )
