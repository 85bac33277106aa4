"""Hugging Face config.json files: mapped to the architecture, or refused by key.

tests/models/<name>/config.json are written by this project with the real field names and
values of each model's published config.json; each must map to the preset of that name.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.config import ConfigError
from rdu_sim.models import get_model, hf_config, layer_kinds, params_total, read_config_json
from rdu_sim.models.figures import decode_flops_per_token, kv_bytes_per_token, params_active
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
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every key of a real file is read or harmless
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
        ({"num_hidden_layers": None}, "num_hidden_layers", "is null: give a value"),
        (
            {"num_key_value_heads": 5},
            "num_attention_heads",
            "multiple of num_key_value_heads (5)",
        ),
        ({"num_experts_per_tok": 9}, "num_experts_per_tok", "exceeds"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings", "true or false"),
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
    issues = _issues(_write(tmp_path, data | {"num_attention_heads": "x"}))
    assert issues == ["num_attention_heads: must be an integer, got 'x'"], issues


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


def test_set_config_json_on_a_preset_replaces_it_or_is_one_error() -> None:
    """`--set model.config_json=...` on a preset name printed one "unknown field 'heads';
    did you mean 'heads'?" per field of the preset: the reference replaces the preset, and
    beside an edit of the preset's fields it is one line naming what to remove."""
    workload = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
    folder = REPO / "tests" / "models" / "gpt-oss-20b"
    scenario = load_scenario(workload, [f"model.config_json={folder}", "model.name=g"])
    assert scenario.model == read_config_json(folder / "config.json", "g")
    with pytest.raises(ConfigError) as info:
        load_scenario(workload, [f"model.config_json={folder}", "model.layers=4"])
    assert [str(issue) for issue in info.value.issues] == [
        f"{workload}: model.config_json: a config.json replaces the preset 'llama-3.1-8b', "
        "whose fields (model.layers) it cannot be set beside: remove those --set, or this one "
        "(from --set model.config_json)"
    ]


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


MISTRAL_LEFT_OUT = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "torch_dtype": "bfloat16",
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "max_position_embeddings": 32768,
}
"""Mistral 7B v0.1's config.json without num_key_value_heads and sliding_window."""

DEEPSEEK_V3_LEFT_OUT = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "torch_dtype": "bfloat16",
    "vocab_size": 129280,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 163840,
}
"""DeepSeek-V3's config.json without first_k_dense_replace, n_shared_experts, n_group,
topk_group, moe_layer_freq and topk_method."""


def test_mistral_keys_left_out_take_mistral_configs_defaults(tmp_path: Path) -> None:
    """MistralConfig: 8 KV heads and a 4,096-token window when the file does not say, so
    the file is Mistral 7B v0.1 (7,241,732,096 parameters, 128 KiB of bf16 KV a token), not
    a full multi-head model with 4x the KV cache."""
    arch = read_config_json(_write(tmp_path, MISTRAL_LEFT_OUT))
    assert (arch.kv_heads, arch.head_dim, arch.sliding_window) == (8, 128, 4096)
    assert [k.window for k in layer_kinds(arch)] == [4096] * 32
    assert params_total(arch) == 7_241_732_096
    assert kv_bytes_per_token(arch, 2) == 32 * 2 * 8 * 128 * 2 == 131_072
    assert arch == get_model("mistral-7b").model_copy(update={"name": "model"})


def test_deepseek_keys_left_out_take_deepseek_v3_configs_defaults(tmp_path: Path) -> None:
    """DeepseekV3Config: 3 dense layers, 1 shared expert, 8 groups of which 4 a token, so
    the file is DeepSeek-V3 (671.03B, 37.55B active, 73.25 GFLOP a decoded token)."""
    arch = read_config_json(_write(tmp_path, DEEPSEEK_V3_LEFT_OUT))
    assert (arch.dense_layers, arch.shared_experts) == (3, 1)
    assert (arch.expert_groups, arch.groups_per_token, arch.router_bias) == (8, 4, True)
    assert [k.ffn for k in layer_kinds(arch)] == ["dense"] * 3 + ["moe"] * 58
    assert params_total(arch) == 671_026_419_200
    assert params_active(arch) == 37_552_297_472
    assert decode_flops_per_token(arch, 0) == 73_249_193_984
    assert arch == get_model("deepseek-r1").model_copy(
        update={"name": "model", "weight_dtype": "bf16"}
    )


@pytest.mark.parametrize(
    ("model_type", "left_out", "field", "value"),
    [
        ("qwen3-30b-a3b", "num_key_value_heads", "kv_heads", 4),  # Qwen3MoeConfig
        ("llama-3.1-8b", "num_key_value_heads", "kv_heads", 32),  # LlamaConfig: the heads
        ("qwen3-32b", "head_dim", "head_dim", 128),  # Qwen3Config: 128, not 5120 / 64
        ("gpt-oss-20b", "attention_bias", "o_bias", True),  # GptOssConfig
        ("gpt-oss-20b", "sliding_window", "sliding_window", 128),
        ("mixtral-8x7b", "num_experts_per_tok", "experts_per_token", 2),
    ],
)
def test_a_key_left_out_takes_its_types_default(
    tmp_path: Path, model_type: str, left_out: str, field: str, value: object
) -> None:
    data = {k: v for k, v in _fixture(model_type).items() if k != left_out}
    assert getattr(read_config_json(_write(tmp_path, data)), field) == value


def test_qwen2_kv_heads_default_is_32_not_the_heads(tmp_path: Path) -> None:
    """Qwen2Config's num_key_value_heads is 32 (None alone means the heads)."""
    data = {k: v for k, v in _fixture("qwen2.5-72b").items() if k != "num_key_value_heads"}
    assert read_config_json(_write(tmp_path, data)).kv_heads == 32
    assert read_config_json(_write(tmp_path, data | {"num_key_value_heads": None})).kv_heads == 64


@pytest.mark.parametrize(
    ("name", "left_out", "words"),
    [
        ("qwen3-30b-a3b", "head_dim", "transformers versions differ"),
        ("kimi-k2", "n_group", "no transformers config class"),
        ("kimi-k2", "tie_word_embeddings", "no transformers config class"),
    ],
)
def test_an_uncertain_default_is_required(
    tmp_path: Path, name: str, left_out: str, words: str
) -> None:
    data = {k: v for k, v in _fixture(name).items() if k != left_out}
    issues = _issues(_write(tmp_path, data))
    assert len(issues) == 1 and issues[0].startswith(f"{left_out}: is required"), issues
    assert words in issues[0]


def test_null_means_what_the_config_class_makes_of_none(tmp_path: Path) -> None:
    """sliding_window null: no window (Mixtral's file says so); num_key_value_heads null:
    the heads; any key without such a meaning, null, is refused."""
    mistral = read_config_json(_write(tmp_path, MISTRAL_LEFT_OUT | {"sliding_window": None}))
    assert mistral.sliding_window is None
    assert {k.window for k in layer_kinds(mistral)} == {None}
    heads = read_config_json(_write(tmp_path, MISTRAL_LEFT_OUT | {"num_key_value_heads": None}))
    assert heads.kv_heads == 32
    issues = _issues(_write(tmp_path, DEEPSEEK_V3_LEFT_OUT | {"n_group": None}))
    assert issues == ["n_group: is null: give a value, or leave the key out for its default (8)"]


def test_a_default_in_an_error_is_said(tmp_path: Path) -> None:
    """A rule broken by a default names it: 4 heads cannot share MistralConfig's 8 KV
    heads."""
    issues = _issues(_write(tmp_path, MISTRAL_LEFT_OUT | {"num_attention_heads": 4}))
    assert issues == [
        "num_attention_heads: num_attention_heads (4) must be a multiple of "
        "num_key_value_heads (8) (num_key_value_heads left out: its default, 8)"
    ]


@pytest.mark.parametrize("model_type", sorted(hf_config.FAMILIES))
def test_the_defaults_table_holds_every_key_read(
    model_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each model_type's keys in DEFAULTS are the keys its loader reads (windows on, so the
    Qwen window keys are read too): a key read without a default, or a default never read,
    fails."""
    read: set[str] = set()
    original = hf_config._Reader.get

    def recording(self: Any, key: str) -> Any:
        read.add(key)
        return original(self, key)

    monkeypatch.setattr(hf_config._Reader, "get", recording)
    keys = set(hf_config.DEFAULTS[model_type])
    data = {"model_type": model_type} | (
        {"use_sliding_window": True} if "max_window_layers" in keys else {}
    )
    with contextlib.suppress(ConfigError), warnings.catch_warnings():
        # kimi_k2, Qwen3-MoE require keys: still read; every size left out is warned about
        warnings.simplefilter("ignore", hf_config.DefaultedShapeWarning)
        hf_config.architecture_from_config(data, file="config.json", name="m")
    assert read == keys | {"model_type"}


def test_a_typo_of_a_key_left_out_is_refused(tmp_path: Path) -> None:
    """num_key_value_head (one letter short) would silently make a multi-head model with 4x
    the KV cache: refused, naming the key it is one edit from; through the CLI, exit 2 and
    one error line without a traceback."""
    data = {k: v for k, v in _fixture("llama-3.1-8b").items() if k != "num_key_value_heads"}
    path = _write(tmp_path, data | {"num_key_value_head": 8})
    issues = _issues(path)
    assert issues == [
        "num_key_value_head: is not a key llama reads; did you mean 'num_key_value_heads'? "
        "(left out, num_key_value_heads takes its default: as many as num_attention_heads)"
    ]
    result = CliRunner().invoke(cli, ["inspect", "model", str(path)])
    assert result.exit_code == 2
    assert "num_key_value_head" in result.stderr and str(path) in result.stderr
    assert "Traceback" not in result.stderr


def test_keys_not_read_are_named_in_one_warning(tmp_path: Path) -> None:
    """Keys neither read for the model_type nor harmless: one warning naming each with its
    line and the closest key read (shared_expert_intermediate_size is Qwen2-MoE's; MixtralConfig
    has no mlp_bias). A typo beside the key it misspells is only warned about."""
    data = _fixture("qwen3-30b-a3b") | {
        "shared_expert_intermediate_size": 4096,
        "num_expert": 64,
    }
    path = _write(tmp_path, data)
    with pytest.warns(hf_config.UnreadKeyWarning) as caught:
        arch = read_config_json(path)
    assert arch == read_config_json(FIXTURES / "qwen3-30b-a3b" / "config.json").model_copy(
        update={"name": "model"}
    )
    (warning,) = caught
    lines = path.read_text().splitlines()
    shared = lines.index('  "shared_expert_intermediate_size": 4096,') + 1
    expert = lines.index('  "num_expert": 64') + 1
    assert str(warning.message) == (
        f"{path}: not read for model_type qwen3_moe, so they change nothing: "
        f"shared_expert_intermediate_size (line {shared}; did you mean 'moe_intermediate_size'?), "
        f"num_expert (line {expert}; did you mean 'num_experts'?) "
        "(docs/models.md, config.json keys read)"
    )
    result = CliRunner().invoke(cli, ["inspect", "model", str(path), "--json"])
    assert result.exit_code == 0
    assert result.stderr.count("warning:") == 1 and "num_expert (line" in result.stderr
    with pytest.warns(hf_config.UnreadKeyWarning, match="mlp_bias"):
        read_config_json(_write(tmp_path, _fixture("mixtral-8x7b") | {"mlp_bias": True}))
    issues = _issues(_write(tmp_path, _fixture("llama-3.1-8b") | {"mlp_bias": True}))
    assert issues == ["mlp_bias: true (biases on the FFN projections) is not modelled"]


def test_deepseek_attention_bias_is_read(tmp_path: Path) -> None:
    issues = _issues(_write(tmp_path, DEEPSEEK_V3_LEFT_OUT | {"attention_bias": True}))
    assert issues == ["attention_bias: true (biases on MLA's projections) is not modelled"]


def test_a_file_leaving_out_a_key_that_sizes_the_model_is_warned_about(tmp_path: Path) -> None:
    """Qwen2.5-72B's file without hidden_size reads as transformers would (Qwen2Config's
    4096: a 33 B model, not 72 B), and says so in one warning naming the key and the default
    it took (the trial's silently accepted cut file); the shipped files, which give every
    such key, say nothing."""
    data = _fixture("qwen2.5-72b")
    del data["hidden_size"]
    path = _write(tmp_path, data)
    with pytest.warns(hf_config.DefaultedShapeWarning) as caught:
        arch = read_config_json(path)
    assert arch.hidden_size == 4096
    (warning,) = caught
    assert str(warning.message) == (
        f"{path}: leaves out keys that size the model, read with model_type qwen2's defaults: "
        "hidden_size 4096 (a checkpoint's config.json gives them; docs/models.md)"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", hf_config.DefaultedShapeWarning)
        for name in NAMES:
            read_config_json(FIXTURES / name / "config.json")
