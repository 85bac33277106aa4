"""Hugging Face config.json files: mapped to the architecture, or refused by key.

tests/models/<name>/config.json are written by this project with the real field names and
values of each model's published config.json; each must map to the preset of that name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.config import ConfigError
from rdu_sim.models import get_model, layer_kinds, params_total, read_config_json
from rdu_sim.scenario import build_scenario, load_scenario

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "models"
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())


def _fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name / "config.json").read_text())
    return data


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return path


def _issues(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        read_config_json(path)
    return [f"{i.field}: {i.message}" for i in info.value.issues]


def test_every_family_has_a_fixture() -> None:
    families = {get_model(name).family for name in NAMES}
    assert families == {"llama", "gqa_moe", "deepseek"}
    assert {"mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b", "kimi-k2"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_fixture_maps_to_its_preset(name: str) -> None:
    """Two ways to the same architecture: the preset written in Python and the file. The
    Llama 3.1 presets predate released dtypes and declare none (bf16 either way)."""
    mapped, preset = read_config_json(FIXTURES / name / "config.json"), get_model(name)
    if preset.weight_dtype is None:
        assert mapped.weight_dtype == "bf16"
        mapped = mapped.model_copy(update={"weight_dtype": None})
    assert mapped == preset


def test_inspect_model_on_a_config_json_in_a_subprocess() -> None:
    """The issue's command: the published count within 1% (Qwen3-30B-A3B's card: 30.5B in
    total, 3.3B activated)."""
    path = FIXTURES / "qwen3-30b-a3b" / "config.json"
    result = subprocess.run(
        [sys.executable, "-m", "rdu_sim.cli.main", "inspect", "model", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["name"] == "qwen3-30b-a3b"
    assert data["family"] == "gqa_moe"
    assert abs(data["params_total"] / 30.5e9 - 1) < 0.01
    assert abs(data["params_active"] / 3.3e9 - 1) < 0.02
    assert data["weight_dtype"] == "bf16"


def test_inspect_model_mixtral_and_gpt_oss_dtypes() -> None:
    runner = CliRunner()
    result = runner.invoke(
        cli, ["inspect", "model", str(FIXTURES / "mixtral-8x7b" / "config.json"), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert abs(json.loads(result.stdout)["params_total"] / 46.7e9 - 1) < 0.01
    result = runner.invoke(
        cli, ["inspect", "model", str(FIXTURES / "gpt-oss-120b" / "config.json"), "--json"]
    )
    data = json.loads(result.stdout)
    assert (data["weight_dtype"], data["expert_dtype"]) == ("bf16", "mxfp4")
    assert data["sliding_window_layers"] == 18
    assert abs(data["weight_bytes"] / 2**30 / 60.8 - 1) < 0.01  # the card's checkpoint size
    assert abs(data["params_active_without_embedding"] / 5.13e9 - 1) < 0.01


def test_qwen_window_layers_and_sparse_step(tmp_path: Path) -> None:
    """Qwen's use_sliding_window puts windows on layers >= max_window_layers; Qwen3-MoE's
    decoder_sparse_step and mlp_only_layers make dense layers (Qwen3MoeDecoderLayer)."""
    data = _fixture("qwen3-30b-a3b") | {
        "use_sliding_window": True,
        "sliding_window": 4096,
        "max_window_layers": 40,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [1],
    }
    kinds = layer_kinds(read_config_json(_write(tmp_path, data)))
    assert [k.window for k in kinds] == [None] * 40 + [4096] * 8
    moe = [i for i, k in enumerate(kinds) if k.ffn == "moe"]
    assert moe == [i for i in range(48) if (i + 1) % 2 == 0 and i != 1]


def test_name_is_the_folder_or_given(tmp_path: Path) -> None:
    path = _write(tmp_path, _fixture("mixtral-8x7b"))
    assert read_config_json(path).name == "model"
    assert read_config_json(path, "mine").name == "mine"


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"model_type": "llava"}, "model_type", "supported: deepseek_v3"),
        ({"model_type": "qwen3_next"}, "model_type", "not a model type"),
        ({"vision_config": {"hidden_size": 1024}}, "vision_config", "vision tower"),
        ({"text_config": {}}, "text_config", "multimodal"),
        (
            {"architectures": ["MixtralForConditionalGeneration"]},
            "architectures[0]",
            "not a decoder-only",
        ),
        ({"layer_types": ["linear_attention"] * 32}, "layer_types[0]", "linear_attention"),
        (
            {"quantization_config": {"quant_method": "awq"}},
            "quantization_config.quant_method",
            "awq",
        ),
        (
            {"quantization_config": {"quant_method": "fp8", "weight_block_size": [64, 64]}},
            "quantization_config.weight_block_size",
            "128 x 128",
        ),
        ({"torch_dtype": "float8"}, "torch_dtype", "float8"),
        ({"hidden_size": "4096"}, "hidden_size", "must be an integer"),
        ({"num_hidden_layers": None}, "num_hidden_layers", "is required"),
        (
            {"num_key_value_heads": 5},
            "num_attention_heads",
            "multiple of num_key_value_heads (5)",
        ),
        ({"num_experts_per_tok": 9}, "num_experts_per_tok", "exceeds"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings", "true or false"),
        ({"mlp_bias": True}, "mlp_bias", "not modelled"),
    ],
)
def test_refusals_name_the_key(
    tmp_path: Path, changes: dict[str, Any], field: str, words: str
) -> None:
    data = _fixture("mixtral-8x7b") | changes
    issues = _issues(_write(tmp_path, data))
    assert any(i.startswith(f"{field}:") and words in i for i in issues), issues


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"moe_layer_freq": 2}, "moe_layer_freq", "every layer after the dense"),
        ({"q_lora_rank": None}, "q_lora_rank", "DeepSeek-V2-Lite"),
        ({"n_group": 7}, "n_routed_experts", "multiple of n_group (7)"),
        (
            {"first_k_dense_replace": 62},
            "first_k_dense_replace",
            "exceeds num_hidden_layers (61)",
        ),
    ],
)
def test_deepseek_refusals(tmp_path: Path, changes: dict[str, Any], field: str, words: str) -> None:
    issues = _issues(_write(tmp_path, _fixture("kimi-k2") | changes))
    assert any(i.startswith(f"{field}:") and words in i for i in issues), issues


def test_a_bad_key_is_named_once_not_again_through_the_defaults_it_feeds(tmp_path: Path) -> None:
    """Without num_key_value_heads or head_dim, both are derived from num_attention_heads: a
    bad num_attention_heads is the one error, not three."""
    data = _fixture("llama-3.1-8b") | {"num_attention_heads": 0}
    for derived in ("num_key_value_heads", "head_dim"):
        data.pop(derived, None)
    issues = _issues(_write(tmp_path, data))
    assert issues == ["num_attention_heads: Input should be greater than or equal to 1"], issues


def test_errors_carry_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, _fixture("mixtral-8x7b") | {"model_type": "llava"})
    with pytest.raises(ConfigError) as info:
        read_config_json(path)
    issue = info.value.issues[0]
    assert issue.file == str(path)
    assert issue.line == path.read_text().splitlines().index('  "model_type": "llava",') + 1


@pytest.mark.parametrize(
    ("text", "words"),
    [("{not json", "not valid JSON"), ("[1, 2]", "JSON object"), ("", "not valid JSON")],
)
def test_unreadable_files(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    assert any(words in i for i in _issues(path))
    assert any("file not found" in i for i in _issues(tmp_path / "none.json"))


def test_a_byte_order_mark_is_not_part_of_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, _fixture("mixtral-8x7b"))
    plain = read_config_json(path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())  # as some Windows editors save
    assert read_config_json(path) == plain


def test_all_issues_at_once(tmp_path: Path) -> None:
    data = _fixture("mixtral-8x7b") | {"hidden_size": "x", "vocab_size": -1.5}
    issues = _issues(_write(tmp_path, data))
    assert {i.split(":")[0] for i in issues} >= {"hidden_size", "vocab_size"}


def _workload(model: object) -> dict[str, Any]:
    return {
        "hardware": str(REPO / "hw_configs" / "sn40l-8.yaml"),
        "model": model,
        "parallelism": {"tp": 8},
        "serving": {"batch_slots": 4, "max_context": 4096},
    }


def test_workload_reads_the_config_json_relative_to_itself(tmp_path: Path) -> None:
    folder = tmp_path / "models" / "mixtral"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text((FIXTURES / "mixtral-8x7b" / "config.json").read_text())
    workload = tmp_path / "w.yaml"
    scenario = build_scenario(
        _workload({"config_json": "models/mixtral/config.json"}), workload_file=str(workload)
    )
    assert scenario.model == get_model("mixtral-8x7b").model_copy(update={"name": "mixtral"})
    named = build_scenario(
        _workload({"config_json": "models/mixtral/config.json", "name": "m"}),
        workload_file=str(workload),
    )
    assert named.model.name == "m"
    assert params_total(named.model) == params_total(get_model("mixtral-8x7b"))


def test_workload_error_names_the_workload_then_the_json(tmp_path: Path) -> None:
    path = _write(tmp_path, _fixture("mixtral-8x7b") | {"model_type": "bert"})
    workload = tmp_path / "w.yaml"
    workload.write_text(
        f"hardware: {REPO / 'hw_configs' / 'sn40l-8.yaml'}\n"
        "model:\n  config_json: model/config.json\nparallelism: {tp: 8}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_scenario(workload)
    first, second = info.value.issues[:2]
    assert (first.file, first.field, first.line) == (str(workload), "model.config_json", 3)
    assert (second.file, second.field) == (str(path), "model_type")
    result = CliRunner().invoke(cli, ["check", str(workload)])
    assert result.exit_code == 2
    assert "model_type" in result.stderr and "Traceback" not in result.stderr


def test_workload_config_json_unknown_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_scenario(
            _workload({"config_json": "x.json", "layers": 4}),
            workload_file=str(tmp_path / "w.yaml"),
        )
    assert any(i.field == "model.layers" for i in info.value.issues)


def test_set_on_a_config_json_model_edits_its_architecture() -> None:
    """`--set model.layers=4` turns the referenced config.json into an editable mapping,
    as it does a preset name; the released dtypes come along."""
    scenario = load_scenario(
        REPO / "workloads" / "gpt-oss-120b-8socket.yaml",
        [
            "model.layers=4",
            "model.layer_types=[sliding_attention, full_attention, sliding_attention, "
            "full_attention]",
        ],
    )
    assert scenario.model.layers == 4
    assert scenario.model.name == "gpt-oss-120b"
    assert scenario.expert_dtype == "mxfp4"
    with pytest.raises(ConfigError, match=r"nope\.json: file not found"):
        build_scenario(
            _workload({"config_json": "nope.json"}),
            workload_file=str(REPO / "workloads" / "x.yaml"),
            overrides=["model.layers=3"],
        )


def test_config_json_keys_inline_in_a_workload(tmp_path: Path) -> None:
    """A workload may write a config.json's own keys as its model (model_type marks them):
    what the README promised; their errors name model.<key> and the YAML line."""
    keys = _fixture("mixtral-8x7b")
    scenario = build_scenario(_workload(keys), workload_file=str(tmp_path / "w.yaml"))
    assert scenario.model == get_model("mixtral-8x7b").model_copy(update={"name": "mixtral"})
    named = build_scenario(_workload(keys | {"name": "mx"}), workload_file="w.yaml")
    assert named.model.name == "mx"
    workload = tmp_path / "bad.yaml"
    workload.write_text(
        f"hardware: {REPO / 'hw_configs' / 'sn40l-8.yaml'}\n"
        "parallelism: {tp: 8}\n"
        "model:\n"
        "  model_type: mixtral\n"
        "  hidden_size: 4096\n"
        "  num_hidden_layers: 32\n"
        "  num_attention_heads: 32\n"
        "  vocab_size: 32000\n"
        "  max_position_embeddings: 32768\n"
        "  intermediate_size: 14336\n"
        "  num_local_experts: 8\n"
        "  num_experts_per_tok: [2]\n"
    )
    with pytest.raises(ConfigError) as info:
        load_scenario(workload)
    (issue,) = info.value.issues
    assert (issue.field, issue.line) == ("model.num_experts_per_tok", 12)
    assert "must be an integer" in issue.message


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path: Path) -> None:
    """json keeps the last of two equal keys, silently (the YAML loader refuses them): a
    hand-edited config.json with `hidden_size` twice would model another architecture."""
    text = json.dumps(_fixture("llama-3.1-8b"), indent=2)
    path = tmp_path / "config.json"
    path.write_text(text[: text.rindex("}")].rstrip() + ',\n  "hidden_size": 8\n}\n')
    first = text.splitlines().index('  "hidden_size": 4096,') + 1
    last = len(path.read_text().splitlines()) - 1
    with pytest.raises(ConfigError) as info:
        read_config_json(path)
    (issue,) = info.value.issues
    assert issue.line == last
    assert f"duplicate key 'hidden_size' (lines {first} and {last})" in issue.message
