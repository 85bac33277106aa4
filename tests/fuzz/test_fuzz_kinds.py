"""Fuzz: the input kinds added after the YAML corpus (issue 34): config.json models, cluster
files, plan specs, speculation, GPU hardware, sweep databases read back, and the folder
`examples copy` writes into. Each class generates its cases from a valid base and states the
outcome each case must have: accepted, or one ConfigError naming the file and the field it
broke, quickly; never another exception, never a hang, never a write outside the target."""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rdu_sim.cli.check_cmd import check_file
from rdu_sim.cli.main import cli
from rdu_sim.config.architecture import MAX_LAYERS
from rdu_sim.config.errors import ConfigError
from rdu_sim.input_errors import InputError
from rdu_sim.models.hf_config import read_config_json

REPO = Path(__file__).resolve().parents[2]
MODELS = sorted((REPO / "tests" / "models").glob("*/config.json"))
LLAMA = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SECONDS = 2.0  # a config file of any of these kinds is checked within this

NUMBERS = st.sampled_from(
    [0, 1, -1, 7, 2**31, 2**63, 10**12, 10**39, 0.5, 1e-300, 5e-324, 1e308, -0.0]
)
JUNK = st.sampled_from([None, True, "", "x", "bfloat16", [], [1], ["bfloat16"], {}, {"a": 1}])
VALUES = st.one_of(NUMBERS, JUNK)


def _timed_check(path: Path) -> ConfigError | None:
    """`rdu-sim check`'s verdict on one file: None (accepted) or its ConfigError."""
    start = time.process_time()
    try:
        check_file(path)
    except ConfigError as exc:
        assert all(issue.file for issue in exc.issues)
        return exc
    finally:
        assert time.process_time() - start < SECONDS, path
    return None


# --- config.json ---

CONFIG_KEYS = [
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
    "head_dim", "vocab_size", "intermediate_size", "max_position_embeddings", "torch_dtype",
    "dtype", "mlp_only_layers", "max_window_layers", "sliding_window", "use_sliding_window",
    "layer_types", "num_experts", "num_local_experts", "num_experts_per_tok",
    "decoder_sparse_step", "first_k_dense_replace", "quantization_config", "model_type",
]  # fmt: skip


@SETTINGS
@given(
    model=st.sampled_from(MODELS),
    changes=st.dictionaries(st.sampled_from(CONFIG_KEYS), VALUES, min_size=1, max_size=3),
)
def test_a_mutated_config_json_is_a_model_or_an_error_naming_a_key(
    tmp_path: Path, model: Path, changes: dict[str, Any]
) -> None:
    data = json.loads(model.read_text()) | changes
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    layers = data.get("num_hidden_layers")
    start = time.process_time()
    try:
        arch = read_config_json(path)
    except ConfigError as exc:
        event("refused")
        assert {i.file for i in exc.issues} == {str(path)}
        if isinstance(layers, int) and not isinstance(layers, bool):
            outside = not 1 <= layers <= MAX_LAYERS
            assert outside <= any(i.field == "num_hidden_layers" for i in exc.issues)
    else:  # accepted: what it says is what was given
        event("accepted")
        assert isinstance(layers, int) and 1 <= layers <= MAX_LAYERS
        assert arch.layers == layers
        dense = data.get("mlp_only_layers")
        if data.get("model_type") == "qwen3_moe" and isinstance(dense, list):
            assert all(not arch.moe_layer_flags()[i] for i in dense)
    assert time.process_time() - start < 1.0


# --- cluster files (and speculation or CoE inside a pool) ---

CLUSTER: dict[str, Any] = {
    "name": "c",
    "pools": {
        "prefill": {"workload": str(LLAMA), "replicas": 1, "role": "prefill"},
        "decode": {"workload": str(LLAMA), "replicas": 1, "role": "decode"},
    },
    "traffic": {"requests": 4, "rate": 2.0, "prompt_tokens": 256, "output_tokens": 4},
    "slo": {"ttft": "1 s", "tpot": "40 ms", "attainment": 0.9},
    "kv_transfer": {"bandwidth": "50 GB/s", "latency": "10 us"},
}
CLUSTER_FIELDS = [
    ("traffic", "rate"), ("traffic", "requests"), ("traffic", "prompt_tokens"),
    ("kv_transfer", "bandwidth"), ("kv_transfer", "latency"), ("slo", "attainment"),
    ("slo", "ttft"), ("pools", "decode", "replicas"), ("pools", "prefill", "set"),
]  # fmt: skip
POOL_SETS = st.sampled_from(
    [
        {"coe": {"experts": 4, "router": "llama-3.1-8b"}},
        {"speculation": {"draft": "llama-3.2-1b", "decoding": {"draft_tokens": 2}}},
        {"serving.max_context": 4096},
        {"kv.policy": "snapstream"},
    ]
)
RATES = st.sampled_from(["1 B/s", "1e-300 B/s", "5e-324 B/s", "0 B/s", "-1 GB/s", "1e30 B/s"])


def _expected_cluster_field(where: tuple[str, ...], value: Any) -> str | None:
    """The field a cluster mutation must be refused at, or None when it may be accepted."""
    if where[-1] == "set":
        if isinstance(value, dict) and ("coe" in value or "speculation" in value):
            return "pools.prefill"
        return None  # a pool's own override: valid, or refused by the rules across pools
    if where == ("kv_transfer", "bandwidth") and value in ("1e-300 B/s", "5e-324 B/s"):
        return "kv_transfer.bandwidth"
    return None


@SETTINGS
@given(
    where=st.sampled_from(CLUSTER_FIELDS),
    value=st.one_of(VALUES, RATES, POOL_SETS),
)
def test_a_mutated_cluster_is_valid_or_refused_at_its_field(
    tmp_path: Path, where: tuple[str, ...], value: Any
) -> None:
    data = json.loads(json.dumps(CLUSTER))
    node = data
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = value
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    error = _timed_check(path)
    event("refused" if error else "accepted")
    expected = _expected_cluster_field(where, value)
    if expected is not None:
        assert error is not None and any(i.field == expected for i in error.issues), error


@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(
    bandwidth=st.sampled_from(["1 B/s", "2 B/s", "1 kB/s", "1 MB/s", "50 GB/s"]),
    rate=st.sampled_from([1e-6, 1e-3, 2.0, 1e4]),
)
def test_a_cluster_on_the_clock_edge_runs_or_names_the_field(
    tmp_path_factory: pytest.TempPathFactory, bandwidth: str, rate: float
) -> None:
    from rdu_sim import api_cluster

    data = json.loads(json.dumps(CLUSTER))
    data["kv_transfer"]["bandwidth"] = bandwidth
    data["traffic"]["rate"] = rate
    data["traffic"]["requests"] = 20
    path = tmp_path_factory.mktemp("edge") / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        result = api_cluster.run_cluster(path)
    except ConfigError as exc:
        event("refused")
        fields = {i.field for i in exc.issues}
        assert fields <= {"kv_transfer.bandwidth", "traffic"}, exc
        late = 20 / rate > 4.6e6 / 4  # the 20th arrival is near or past 2^62 ps
        slow = bandwidth in ("1 B/s", "2 B/s", "1 kB/s")
        assert late or slow, exc
        return
    event("ran")
    ttft = result.requests()["ttft_s"]
    assert all(math.isfinite(t) and 0 <= t < 9.3e6 for t in ttft[~(ttft != ttft)])


# --- plan specs ---

PLAN_FIELDS = ["tp", "batch_slots", "disaggregation", "max_replicas"]


@SETTINGS
@given(field=st.sampled_from(PLAN_FIELDS), value=st.one_of(VALUES, st.sampled_from(["9:0", "x"])))
def test_a_mutated_plan_is_valid_or_refused_at_its_field(
    tmp_path: Path, field: str, value: Any
) -> None:
    data = yaml.safe_load((REPO / "workloads" / "plans" / "llama3.1-8b-chat.yaml").read_text())
    data["cluster"] = str(REPO / "workloads" / "clusters" / "llama3.1-8b-chat.yaml")
    data["search"][field] = value
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    error = _timed_check(path)
    event("refused" if error else "accepted")
    if error is not None:
        assert any(i.field.startswith(f"search.{field}") for i in error.issues), error


# --- speculation ---

ACCEPTANCES = st.one_of(
    NUMBERS,
    st.fixed_dictionaries({"dist": st.just("beta"), "mean": NUMBERS, "concentration": NUMBERS}),
    st.fixed_dictionaries({"dist": st.just("uniform"), "low": NUMBERS, "high": NUMBERS}),
)


@SETTINGS
@given(acceptance=ACCEPTANCES, draft_tokens=st.one_of(NUMBERS, JUNK))
def test_speculation_draws_rates_in_0_1_or_is_refused_at_its_field(
    tmp_path: Path, acceptance: Any, draft_tokens: Any
) -> None:
    from rdu_sim.scenario import load_scenario
    from rdu_sim.serving.acceptance import request_rates

    data = yaml.safe_load(LLAMA.read_text())
    data["hardware"] = str(REPO / "hw_configs" / "sn40l.yaml")
    data["speculation"] = {
        "draft": "llama-3.2-1b",
        "decoding": {"draft_tokens": draft_tokens, "acceptance": acceptance},
    }
    path = tmp_path / "wl.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        scenario = load_scenario(path)
    except ConfigError as exc:
        event("refused")
        assert all(i.field.startswith("speculation") for i in exc.issues), exc
        return
    decoding = scenario.workload.speculation.decoding  # type: ignore[union-attr]
    event("accepted")
    rates = request_rates(decoding.acceptance, 32, seed=0)
    assert ((rates >= 0) & (rates <= 1)).all()


# --- GPU hardware ---

GPU_FIELDS = [
    "gpu.bf16_flops", "gpu.fp8_flops", "gpu.vector_flops", "gpu.max_gemm_efficiency",
    "gpu.hbm.bandwidth", "gpu.hbm.efficiency", "gpu.kernel.launch", "gpu.kernel.sync",
    "gpu.mma_rows",
]  # fmt: skip


@settings(max_examples=24, deadline=None, derandomize=True, database=None)
@given(field=st.sampled_from(GPU_FIELDS), value=NUMBERS)
def test_a_gpu_step_is_finite_or_an_input_error(field: str, value: Any) -> None:
    from rdu_sim import api

    overrides = ["hardware=dgx-h100", f"hw.{field}={value!r}"]
    try:
        cost = api.step(LLAMA, overrides, phase="decode")
    except InputError as exc:
        event("refused")
        assert field.split(".")[-1] in str(exc) or "serving clock" in str(exc), exc
        return
    event("ran")
    assert math.isfinite(cost.step_s) and cost.step_s > 0


# --- sweep databases read back ---


@pytest.fixture(scope="module")
def sweep_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rdu_sim.sweep import run_sweep

    folder = tmp_path_factory.mktemp("db")
    spec = folder / "spec.yaml"
    spec.write_text(
        f"base: {LLAMA}\naxes:\n  serving.batch_slots: [1, 2, 3]\nevaluator: {{name: synthetic}}\n"
    )
    return run_sweep(spec, db=folder / "good.sqlite", workers=1).db


JSON_COLUMNS = ("overrides", "metrics")
STORED = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.binary(max_size=8),
    st.none(),
    st.sampled_from(['{"status": 1}', '{"version": "x"}', '{"key": 2}', '{"error": null}']),
    st.sampled_from(["[1, 2]", "5", '"x"', "null", "{", "1" + "0" * 60, "[" * 99 + "]" * 99]),
    st.text(max_size=12),
)


def _valid(column: str, value: Any) -> bool:
    """Whether a read must accept `value` stored in `column` (the store's types)."""
    if column in JSON_COLUMNS:
        if value is None:
            return column == "metrics"
        if not isinstance(value, str):
            return False
        try:
            parsed = json.loads(value)
        except ValueError:
            return False
        return isinstance(parsed, dict)
    if column == "wall_s":
        return value is None or isinstance(value, int | float)
    if column == "attempts":
        return isinstance(value, int)
    if column == "status":
        return value in ("done", "failed")
    return isinstance(value, str) or (value is None and column in ("error", "worker"))


@SETTINGS
@given(
    column=st.sampled_from([*JSON_COLUMNS, "status", "wall_s", "attempts", "worker", "error"]),
    value=STORED,
)
def test_a_stored_value_reads_back_or_its_row_is_left_out_named(
    tmp_path: Path, sweep_db: Path, column: str, value: Any
) -> None:
    import warnings

    from rdu_sim.sweep import load
    from rdu_sim.sweep.store import DamagedRowWarning

    db = Path(tempfile.mkdtemp(dir=tmp_path)) / "d.sqlite"  # no WAL left by another case
    shutil.copyfile(sweep_db, db)
    with sqlite3.connect(db) as conn:
        total = conn.execute("SELECT count(*) FROM results").fetchone()[0]
        try:
            conn.execute(f"UPDATE results SET {column} = ? WHERE rowid = 1", (value,))
        except sqlite3.IntegrityError:  # NOT NULL or CHECK: a database rdu-sim cannot hold
            return
        stored = conn.execute(f"SELECT {column} FROM results WHERE rowid = 1").fetchone()[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = load(db)
    damaged = [str(w.message) for w in caught if issubclass(w.category, DamagedRowWarning)]
    if damaged:  # the row left out, one warning naming it; every other row read
        event("left out")
        assert len(damaged) == 1 and damaged[0].startswith(str(db))
        assert f"column {column} holds" in damaged[0]
        assert not _valid(column, stored), (column, stored)
        assert len(frame) == total - 1
    else:
        event("accepted")
        assert _valid(column, stored), (column, stored)
        assert len(frame) == total
    assert frame.columns.is_unique


# --- examples copy: what DIR already holds ---

ENTRIES = st.sampled_from(
    ["file", "link-outside-file", "dangling-outside", "link-inside", "folder-link-outside",
     "folder-link-inside"]
)  # fmt: skip
PLACES = st.sampled_from(
    ["workloads", "hw_configs", "workloads/llama3.1-8b-1socket.yaml", "hw_configs/sn40l.yaml",
     "notebooks"]
)  # fmt: skip


@settings(max_examples=20, deadline=None, derandomize=True, database=None)
@given(
    entries=st.lists(st.tuples(PLACES, ENTRIES), min_size=1, max_size=3),
    force=st.booleans(),
)
def test_examples_copy_never_writes_outside_dir(
    tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[str, str]], force: bool
) -> None:
    root = tmp_path_factory.mktemp("copy")
    target, outside = root / "dir", root / "outside"
    target.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    refusals: list[str] = []  # places whose presence makes the copy refuse, naming one
    for place, entry in entries:
        path = target / place
        if os.path.lexists(path) or not path.parent.is_dir() or path.parent.is_symlink():
            continue
        if entry == "file":
            path.write_text("old") if path.suffix else path.mkdir()
        elif entry in ("link-outside-file", "dangling-outside"):
            path.symlink_to(outside / ("keep.txt" if entry == "link-outside-file" else "new"))
            if not path.suffix:  # a folder of the copy that is a link out of DIR
                refusals.append(str(path))
        elif entry == "link-inside":  # to a place in DIR that does not exist
            (target / "elsewhere").mkdir(exist_ok=True)
            path.symlink_to(target / "elsewhere" / path.name)
            if not path.suffix:  # no folder to write into: refused, naming it
                refusals.append(str(path))
        elif entry == "folder-link-outside" and not path.suffix:
            path.symlink_to(outside)
            refusals.append(str(path))
        elif entry == "folder-link-inside" and not path.suffix:
            (target / "inner").mkdir(exist_ok=True)
            path.symlink_to(target / "inner")
    before = sorted((p.name, p.read_bytes()) for p in outside.iterdir())
    args = ["examples", "copy", str(target), *(["--force"] if force else [])]
    result = CliRunner().invoke(cli, args)
    assert sorted((p.name, p.read_bytes()) for p in outside.iterdir()) == before
    event("refused" if refusals else "copied")
    if refusals:
        assert result.exit_code == 2, result.output
        assert any(place in result.stderr for place in refusals), result.stderr
        assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    else:
        assert result.exit_code == 0, (result.output, result.exception)
