"""`rdu-sim inspect model` prints the exact figures; `inspect graph` checks its input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.models import get_model, kv_bytes, preset_names

REPO = Path(__file__).resolve().parents[1]
KEYS = {
    "params_total",
    "params_active",
    "layers",
    "kv_bytes_per_token",
    "weight_bytes",
    "decode_flops_per_token",
}


def _json(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(cli, ["inspect", "model", *args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def test_deepseek_json_in_a_subprocess() -> None:
    """The exact command of the issue, through the real entry point."""
    result = subprocess.run(
        [sys.executable, "-m", "rdu_sim.cli.main", "inspect", "model", "deepseek-r1", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) >= KEYS
    assert data["params_total"] == 671_026_419_200
    assert data["params_active"] == 37_552_297_472
    assert data["kv_bytes_per_token"] == 70_272
    assert data["layers"] == 61
    # released in FP8 with a 4-byte scale per 128 x 128 block: 1 + 4/16384 bytes a weight
    assert data["weight_bytes"] == 671_190_244_009 == round(671_026_419_200 * (1 + 4 / 16384))


@pytest.mark.parametrize(
    ("name", "params", "kv", "layers"),
    [
        ("llama-3.1-8b", 8_030_261_248, 131_072, 32),
        ("llama-3.1-70b", 70_553_706_496, 327_680, 80),
        ("llama-3.1-405b", 405_853_388_800, 516_096, 126),
    ],
)
def test_llama_json(name: str, params: int, kv: int, layers: int) -> None:
    data = _json(name)
    assert set(data) >= KEYS
    assert (data["params_total"], data["params_active"]) == (params, params)
    assert data["kv_bytes_per_token"] == kv
    assert data["layers"] == layers
    assert data["weight_bytes"] == 2 * params


def test_dtype_and_context_options() -> None:
    base = _json("llama-3.1-8b")
    fp8 = _json("llama-3.1-8b", "--kv-dtype", "fp8", "--weight-dtype", "int4")
    assert fp8["kv_bytes_per_token"] == 65_536
    assert fp8["weight_bytes"] == 8_030_261_248 // 2
    long = _json("llama-3.1-8b", "--context", "8192")
    per_key = 32 * 2 * 32 * 128 * 2  # layers x (QK^T and PV) x heads x head_dim x 2 FLOPs
    assert long["decode_flops_per_token"] == (base["decode_flops_per_token"] + per_key * 8192)  # type: ignore[operator]
    # no cached token: the products' 15,009,316,864 and the token attending to itself
    assert base["decode_flops_per_token"] == 15_009_316_864 + per_key
    assert (long["context"], long["attended_tokens"]) == (8192, 8193)


@pytest.mark.parametrize(
    ("workload", "model"),
    [("llama3.1-8b-1socket", "llama-3.1-8b"), ("gpt-oss-120b-8socket", "gpt-oss-120b")],
)
def test_inspect_context_is_steps_cached_tokens(workload: str, model: str) -> None:
    """`inspect model --context C` counts as `rdu-sim step` on C cached tokens does: the
    decoded token attends to them and itself (C + 1), so its FLOPs are the step's model
    FLOPs a token (sliding windows too); both outputs say so in their labels."""
    runner = CliRunner()
    for context in ("2048", "8192"):
        step = runner.invoke(
            cli, ["step", workload, "--batch", "2", "--context", context, "--json"]
        )
        assert step.exit_code == 0, step.output
        data = json.loads(step.stdout)
        assert data["context"] == int(context)
        figures = _json(model, "--context", context)
        assert figures["decode_flops_per_token"] * data["batch"] == data["model_flops"]
    shown = runner.invoke(cli, ["inspect", "model", model, "--context", "8192"]).stdout
    text = " ".join(shown.replace("│", " ").split())  # a wrapped cell's lines, rejoined
    assert "cached tokens (attending to 8,193: them and itself, as rdu-sim step counts)" in text
    said = runner.invoke(cli, ["step", workload, "--batch", "1", "--context", "8192"]).stdout
    said = " ".join(said.split())
    assert "1 new token, 8,192 cached tokens" in said
    assert "the new token attending to them and itself" in said


def test_workload_file_in_place_of_a_name() -> None:
    data = _json(str(REPO / "workloads" / "deepseek-r1-128k-full.yaml"))
    assert data["params_total"] == 671_026_419_200
    assert data["weight_dtype"] == "fp8_block"  # the workload's own dtype
    # FP8 values plus one FP32 scale per 128 x 128 block
    assert data["weight_bytes"] == pytest.approx(671_026_419_200 * (1 + 4 / 128**2), rel=1e-12)


def test_human_table() -> None:
    result = CliRunner().invoke(cli, ["inspect", "model", "llama-3.1-8b"])
    assert result.exit_code == 0
    assert "8,030,261,248" in result.stdout
    assert "131,072" in result.stdout


def test_list() -> None:
    result = CliRunner().invoke(cli, ["inspect", "model", "--list"])
    assert result.exit_code == 0
    assert result.stdout.split() == preset_names()


def test_unknown_name_exits_2_with_the_valid_names() -> None:
    result = CliRunner().invoke(cli, ["inspect", "model", "gpt-5", "--json"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "unknown model 'gpt-5'" in result.stderr
    for name in preset_names():
        assert name in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name", ["", "x" * 5000, "a\x00b", "../nowhere"])
def test_odd_names_are_input_errors(name: str) -> None:
    result = CliRunner().invoke(cli, ["inspect", "model", name])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "valid presets" in result.stderr


def test_name_required_unless_list() -> None:
    result = CliRunner().invoke(cli, ["inspect", "model"])
    assert result.exit_code == 2
    assert "--list" in result.stderr


def test_bad_dtype_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["inspect", "model", "llama-3.1-8b", "--kv-dtype", "fp7"])
    assert result.exit_code == 2


def test_inspect_graph_checks_its_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["inspect", "graph", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2
    assert "none.yaml: file not found" in result.stderr
    result = CliRunner().invoke(
        cli,
        [
            "inspect",
            "graph",
            str(REPO / "workloads" / "llama3.1-8b-1socket.yaml"),
            "--set",
            "kv.polcy=full",
        ],
    )
    assert result.exit_code == 2
    assert "kv.polcy" in result.stderr


def test_inspect_graph_json_and_dot(tmp_path: Path) -> None:
    dot = tmp_path / "layer.dot"
    result = CliRunner().invoke(
        cli,
        [
            "inspect",
            "graph",
            str(REPO / "workloads" / "llama3.1-8b-1socket.yaml"),
            "--json",
            "--batch",
            "2",
            "--context",
            "1024",
            "--dot",
            str(dot),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["shape"] == {"phase": "decode", "batch": 2, "tokens": 1, "cache_len": 1024}
    assert [k["name"] for k in data["kernels"]] == ["embedding", "decoder", "lm_head"]
    assert data["kernels"][1]["calls"] == 32
    # the stages that finish a row only at its end (2 rows, fewer than the 8 tiles)
    rows = {s["name"]: s["whole_row_outputs"] for s in data["kernels"][1]["stages"]}
    assert {name for name, n in rows.items() if n} == {
        "attn_norm",
        "attn.flash",
        "ffn_norm",
        "ffn.down_proj",
    }
    assert set(rows.values()) == {0, 2}
    assert dot.read_text().startswith("digraph")


def test_inspect_graph_table_and_prefill() -> None:
    result = CliRunner().invoke(
        cli,
        [
            "inspect",
            "graph",
            str(REPO / "workloads" / "deepseek-r1-128k-snapstream.yaml"),
            "--phase",
            "prefill",
            "--tokens",
            "4096",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "prefill step: batch 1, 4096 new token(s)" in result.stdout
    assert "decoder_moe" in result.stdout and "hbm" in result.stdout
    assert "…" not in result.stdout  # numbers are never cut to fit the terminal


def test_capacity_error_exits_2() -> None:
    """A model that does not fit is bad input too: one message with the fix, exit 2."""
    result = CliRunner().invoke(
        cli,
        [
            "inspect",
            "graph",
            str(REPO / "workloads" / "llama3.1-8b-1socket.yaml"),
            "--set",
            "hw.socket.hbm.capacity=1 GiB",
        ],
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ")
    assert "HBM" in result.stderr


def test_config_json_errors_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "bert"\n}\n')
    for name in (str(path), str(tmp_path / "missing.json")):
        result = CliRunner().invoke(cli, ["inspect", "model", name])
        assert result.exit_code == 2
        assert "Traceback" not in result.stderr
    result = CliRunner().invoke(cli, ["inspect", "model", str(path)])
    assert f"{path}:2: model_type: 'bert' is not a model type" in result.stderr


def test_the_architectures_dimensions_are_listed_from_its_fields() -> None:
    """What a reader would otherwise compute from models/presets.py: each integer field the
    architecture has, by its config name, in the JSON and as a table row described by the
    field (a family's own fields only: MLA has no kv_heads, Llama no experts)."""
    deepseek = _json("deepseek-r1")["architecture"]
    assert isinstance(deepseek, dict)
    assert {
        "hidden_size": 7168,
        "heads": 128,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "layers": 61,
        "routed_experts": 256,
        "shared_experts": 1,
        "experts_per_token": 8,
        "expert_groups": 8,
        "groups_per_token": 4,
        "ffn_intermediate": 18432,
        "moe_intermediate": 2048,
        "vocab_size": 129280,
    }.items() <= deepseek.items()
    assert "kv_heads" not in deepseek
    llama = _json("llama-3.1-70b")["architecture"]
    assert isinstance(llama, dict)
    assert (llama["hidden_size"], llama["heads"], llama["kv_heads"], llama["head_dim"]) == (
        8192,
        64,
        8,
        128,
    )
    assert "routed_experts" not in llama and "sliding_window" not in llama  # unset: left out
    table = CliRunner().invoke(cli, ["inspect", "model", "llama-3.1-70b"], terminal_width=200)
    assert "│ kv_heads" in table.stdout and "key/value heads per layer" in table.stdout
    assert "28,672" in table.stdout  # ffn_intermediate


def test_an_alias_says_whose_architecture_it_is() -> None:
    """deepseek-v3 is registered for the deepseek-r1 architecture: said, not renamed."""
    table = CliRunner().invoke(cli, ["inspect", "model", "deepseek-v3"], terminal_width=200)
    assert table.stdout.split("\n")[0].strip() == (
        "deepseek-v3: the deepseek-r1 architecture (deepseek)"
    )
    data = _json("deepseek-v3")
    assert (data["name"], data["preset"]) == ("deepseek-r1", "deepseek-v3")
    assert "preset" not in _json("deepseek-r1")
    plain = CliRunner().invoke(cli, ["inspect", "model", "deepseek-r1"], terminal_width=200)
    assert plain.stdout.split("\n")[0].strip() == "deepseek-r1 (deepseek)"


@pytest.mark.parametrize(
    ("name", "inside", "past", "window", "words"),
    [
        ("mistral-7b", 131_072, 0, 4096, "every layer keeps its last 4,095 tokens"),
        ("gpt-oss-120b", 73_728, 18 * 2 * 8 * 64 * 2, 128, "the 18 full-attention layers alone"),
        ("llama-3.1-8b", 131_072, 131_072, None, None),
    ],
)
def test_kv_bytes_per_token_inside_and_past_the_windows(
    name: str, inside: int, past: int, window: int | None, words: str | None
) -> None:
    """kv_bytes_per_token is a token's while inside every sliding window, and says so; past
    the windows a further token costs the full-attention layers' KV alone, which is what a
    sequence grows by there (`kv_bytes`)."""
    data = _json(name)
    assert (data["kv_bytes_per_token"], data["kv_bytes_per_token_past_windows"]) == (inside, past)
    assert data["longest_window"] == window
    arch = get_model(name)
    far = 3 * (window or 1000)
    assert kv_bytes(arch, far + 1, 2) - kv_bytes(arch, far, 2) == past
    text = CliRunner().invoke(cli, ["inspect", "model", name], env={"COLUMNS": "200"}).stdout
    row = next(line for line in text.splitlines() if "kv_bytes_per_token " in line)
    assert ("a token inside every sliding window" in row) == (window is not None)
    assert ("past the windows" in text) == (words is not None)
    if words is not None:
        assert words in text


def test_a_tied_tables_note_says_it_is_the_lm_head() -> None:
    """Llama 3.2 1B ties its LM head to the embedding: without the embedding it still holds
    the table, as the head, and the note says so instead of "gathered"."""
    text = CliRunner().invoke(cli, ["inspect", "model", "llama-3.2-1b"], env={"COLUMNS": "200"})
    row = next(line for line in text.stdout.splitlines() if "without embedding" in line)
    assert "1,235,814,400" in row and "tied: the table is also the LM head" in row
    text = CliRunner().invoke(cli, ["inspect", "model", "llama-3.1-8b"], env={"COLUMNS": "200"})
    row = next(line for line in text.stdout.splitlines() if "without embedding" in line)
    assert "7,504,924,672" in row and "(the table is gathered)" in row
