"""A Hugging Face config.json, read from a local file, as an Architecture.

Nothing is downloaded: the file is the one a model repository ships beside its weights.
`model_type` picks the family and which keys matter (Hugging Face's own names):
- llama, mistral, qwen2, qwen3 -> `llama`: num_key_value_heads, head_dim,
  intermediate_size, attention_bias, sliding_window (use_sliding_window, max_window_layers
  for Qwen), layer_types;
- mixtral, qwen3_moe, gpt_oss -> `gqa_moe`: the same, and num_local_experts (Qwen:
  num_experts), num_experts_per_tok (gpt-oss also experts_per_token),
  moe_intermediate_size, decoder_sparse_step, mlp_only_layers;
- deepseek_v3, kimi_k2 -> `deepseek`: n_routed_experts, n_shared_experts,
  num_experts_per_tok, moe_intermediate_size, intermediate_size, first_k_dense_replace,
  moe_layer_freq, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
  v_head_dim, n_group, topk_group, topk_method.

Common: hidden_size, num_hidden_layers, num_attention_heads, vocab_size,
max_position_embeddings, tie_word_embeddings, torch_dtype (or dtype), quantization_config
(`fp8` with `weight_block_size: [128, 128]` -> fp8_block weights; `mxfp4` -> MXFP4 experts).
Keys that do not change what the simulator counts (rope_theta, rms_norm_eps, ...) are
ignored; what it cannot model is refused with an error naming the key: an unknown
model_type, a vision tower (vision_config, text_config, a *ForConditionalGeneration
architecture), an attention kind other than full or sliding-window (layer_types), a
quantisation method it has no dtype for, DeepSeek MoE layers that are not every layer after
the first dense ones (moe_layer_freq), MLA without a query low-rank projection (q_lora_rank).
DeepSeek's multi-token-prediction layers (num_nextn_predict_layers) are left out, as in the
presets: plain decoding does not run them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rdu_sim.config import json_text
from rdu_sim.config.architecture import (
    MAX_LAYERS,
    MAX_NAME_CHARS,
    DeepSeekArchitecture,
    GqaMoeArchitecture,
    LlamaArchitecture,
)
from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.config.loader import MAX_DEPTH, MAX_FILE_BYTES, file_problem
from rdu_sim.config.yaml_io import read_text_file
from rdu_sim.models.layers import Architecture

FAMILIES = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "llama",
    "qwen3": "llama",
    "mixtral": "gqa_moe",
    "qwen3_moe": "gqa_moe",
    "gpt_oss": "gqa_moe",
    "deepseek_v3": "deepseek",
    "kimi_k2": "deepseek",
}
"""Supported model_type values and the family each maps to."""

TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_QK_NORM = {"qwen3", "qwen3_moe"}
_WINDOW_LAYERS = {"qwen2", "qwen3", "qwen3_moe"}  # use_sliding_window + max_window_layers
_ALL_SLIDING = {"mistral", "mixtral"}  # sliding_window alone: every layer
_REFUSED_KEYS = {
    "vision_config": "a vision tower is not modelled; use the language model's own config",
    "text_config": "a multimodal wrapper is not modelled; use its text_config as the file",
    "audio_config": "an audio tower is not modelled",
}
_ATTENTION_TYPES = ("full_attention", "sliding_attention")
_MISSING = object()


def _key_pattern(key: str) -> re.Pattern[str]:
    """Where `key` is written as an object key in JSON text (`"key":`)."""
    return re.compile(rf'"{re.escape(key)}"\s*:')


class _Reader:
    """Typed access to the JSON's keys; every problem becomes an issue naming the key.

    `lines` and `prefix` place the keys in a YAML workload that writes them inline
    (`model: {model_type: ...}`); otherwise lines are found in the JSON `text`.
    """

    def __init__(
        self,
        data: Mapping[str, Any],
        file: str,
        text: str,
        lines: Mapping[tuple[str, ...], int] | None = None,
        prefix: str = "",
    ) -> None:
        self.data, self.file, self.text = data, file, text
        self.lines, self.prefix = lines, prefix
        self.issues: list[ConfigIssue] = []

    def line(self, key: str) -> int | None:
        """The line of the key's first appearance (nested keys: after their parent's)."""
        if self.lines is not None:
            path = tuple(self.prefix.split(".")[:-1]) + tuple(key.split("[")[0].split("."))
            while path and path not in self.lines:
                path = path[:-1]
            return self.lines.get(path)
        position = 0
        for part in key.split(".")[:2]:
            part = part.split("[")[0]
            match = _key_pattern(part).search(self.text, position)
            if match is None:
                return None
            position = match.start()
        return self.text.count("\n", 0, position) + 1

    def fail(self, key: str, message: str) -> None:
        self.issues.append(ConfigIssue(self.file, self.prefix + key, message, self.line(key)))

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError([ConfigIssue(self.file, self.prefix + key, message, self.line(key))])

    def get(self, key: str, default: Any = _MISSING) -> Any:
        if key in self.data and self.data[key] is not None:
            return self.data[key]
        if default is _MISSING:
            self.fail(key, "is required for this model_type")
            return None
        return default

    def int(self, key: str, default: Any = _MISSING) -> Any:
        value = self.get(key, default)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            self.fail(key, f"must be an integer, got {value!r}")
            return None
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {value!r}")
            return default
        return value


def read_config_json(path: str | Path, name: str | None = None) -> Architecture:
    """The architecture a local config.json describes; named `name`, else its folder's name.

    Every problem is a ConfigError naming the file, the key and its line.
    """
    file = Path(path)
    problem = file_problem(file)
    if problem is not None:
        raise ConfigError.single(str(file), "", problem.replace("a YAML file", "a config.json"))
    text = read_text_file(file, MAX_FILE_BYTES, "a config.json")  # reads no more than that
    try:  # 5000-digit numbers, NaN, deep nesting, a key twice
        data = json_text.loads(text, MAX_DEPTH, unique_keys=True)
    except json_text.DuplicateKeyError as exc:
        lines = [text.count("\n", 0, m.start()) + 1 for m in _key_pattern(exc.key).finditer(text)]
        two = len(lines) > 1 and lines[0] != lines[1]  # else the error's own line says it
        shown = f" (lines {lines[0]} and {lines[1]})" if two else ""
        message = f"{exc}{shown}; {json_text.KEY_ONCE}"
        line = lines[1] if len(lines) > 1 else None
        raise ConfigError.single(str(file), "", message, line) from None
    except (json.JSONDecodeError, json_text.JsonLimitError) as exc:
        line = exc.lineno if isinstance(exc, json.JSONDecodeError) else None
        message = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise ConfigError.single(str(file), "", f"not valid JSON: {message}", line) from None
    if not isinstance(data, dict):
        raise ConfigError.single(str(file), "", "expected a JSON object of config keys")
    label = name or (file.resolve().parent.name or file.stem)[:MAX_NAME_CHARS]
    return architecture_from_config(data, file=str(file), name=label, text=text)


def architecture_from_config(
    data: Mapping[str, Any],
    *,
    file: str,
    name: str,
    text: str = "",
    lines: Mapping[tuple[str, ...], int] | None = None,
    prefix: str = "",
) -> Architecture:
    """Map config.json keys to an Architecture (see the module docstring). Issues name
    `prefix` + the key (a workload writing the keys inline passes "model.")."""
    r = _Reader(data, file, text, lines, prefix)
    _refuse_wrappers(r)
    model_type = r.get("model_type")
    if model_type is None:
        raise ConfigError(r.issues)
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise r.error(
            "model_type",
            f"{model_type!r} is not a model type the simulator models; supported: "
            f"{', '.join(sorted(FAMILIES))}",
        )
    family = FAMILIES[model_type]
    fields: dict[str, Any] = {
        "family": family,
        "name": name,
        "vocab_size": r.int("vocab_size"),
        "hidden_size": r.int("hidden_size"),
        "layers": r.int("num_hidden_layers"),
        "heads": r.int("num_attention_heads"),
        "max_context": r.int("max_position_embeddings"),
        "tie_embeddings": r.flag("tie_word_embeddings", False),
        **_dtypes(r),
    }
    layers = fields["layers"]
    if isinstance(layers, int) and not 1 <= layers <= MAX_LAYERS:  # before per-layer tuples
        r.fail("num_hidden_layers", f"must be 1..{MAX_LAYERS}, got {layers}")
        fields["layers"] = None
    origin = {
        "vocab_size": "vocab_size",
        "hidden_size": "hidden_size",
        "layers": "num_hidden_layers",
        "heads": "num_attention_heads",
        "max_context": "max_position_embeddings",
    }
    if family == "deepseek":
        fields |= _deepseek(r, origin)
    else:
        fields |= _gqa(r, model_type, fields, origin)
        if family == "gqa_moe":
            fields |= _gqa_moe(r, model_type, fields, origin)
        else:
            fields["ffn_intermediate"] = r.int("intermediate_size")
            origin["ffn_intermediate"] = "intermediate_size"
    if r.issues:
        raise ConfigError(r.issues)
    try:
        arch: Architecture
        if family == "llama":
            arch = LlamaArchitecture.model_validate(fields)
        elif family == "gqa_moe":
            arch = GqaMoeArchitecture.model_validate(fields)
        else:
            arch = DeepSeekArchitecture.model_validate(fields)
    except ValidationError as exc:
        found = [_in_json_terms(err["loc"], str(err["msg"]), origin) for err in exc.errors()]
        # a key the file leaves out takes a default derived from another (num_key_value_heads
        # from num_attention_heads): when the file's own keys err, the defaults' errors are
        # only theirs again
        given = [(key, message) for key, message in found if key in r.data]
        for key, message in given or found:
            r.fail(key, message)
        raise ConfigError(r.issues) from None
    return arch


def _in_json_terms(
    loc: tuple[int | str, ...], message: str, origin: dict[str, str]
) -> tuple[str, str]:
    """An architecture's validation error in the config.json's own key names: the key is the
    error's field, or (for a rule across fields) the first field its message names."""
    message = message.removeprefix("Value error, ")
    names = sorted(origin, key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    first = pattern.search(message)
    field = str(loc[0]) if loc else (first.group(1) if first else "")
    return origin.get(field, field), pattern.sub(lambda m: origin[m.group(1)], message)


def _refuse_wrappers(r: _Reader) -> None:
    for key, why in _REFUSED_KEYS.items():
        if key in r.data:
            raise r.error(key, why)
    architectures = r.data.get("architectures") or []
    if isinstance(architectures, list):
        for i, value in enumerate(architectures):
            if isinstance(value, str) and not value.endswith("ForCausalLM"):
                raise r.error(
                    f"architectures[{i}]",
                    f"{value!r} is not a decoder-only language model (*ForCausalLM); "
                    "vision and encoder towers are not modelled",
                )


def _dtypes(r: _Reader) -> dict[str, Any]:
    """weight_dtype / expert_dtype from torch_dtype (or dtype) and quantization_config."""
    out: dict[str, Any] = {}
    key = "torch_dtype" if "torch_dtype" in r.data else "dtype"
    torch_dtype = r.data.get(key)
    if torch_dtype is not None:
        if not isinstance(torch_dtype, str) or torch_dtype not in TORCH_DTYPES:
            r.fail(key, f"{torch_dtype!r} is not one of {', '.join(TORCH_DTYPES)}")
        else:
            out["weight_dtype"] = TORCH_DTYPES[torch_dtype]
    quant = r.data.get("quantization_config")
    if quant is None:
        return out
    if not isinstance(quant, Mapping):
        r.fail("quantization_config", "must be an object")
        return out
    method = quant.get("quant_method")
    if method == "fp8":
        block = quant.get("weight_block_size")
        if block is None:
            out["weight_dtype"] = "fp8"
        elif block == [128, 128]:
            out["weight_dtype"] = "fp8_block"
        else:
            r.fail(
                "quantization_config.weight_block_size",
                f"{block!r}: only 128 x 128 blocks (one FP32 scale each) are modelled",
            )
    elif method == "mxfp4":
        out["expert_dtype"] = "mxfp4"  # gpt-oss: experts in MXFP4, the rest as torch_dtype
    else:
        r.fail(
            "quantization_config.quant_method",
            f"{method!r} has no dtype here; modelled: fp8 (block-scaled), mxfp4",
        )
    return out


def _gqa(
    r: _Reader, model_type: str, fields: dict[str, Any], origin: dict[str, str]
) -> dict[str, Any]:
    heads, hidden, layers = fields["heads"], fields["hidden_size"], fields["layers"]
    out: dict[str, Any] = {"kv_heads": r.int("num_key_value_heads", heads)}
    origin |= {"kv_heads": "num_key_value_heads", "head_dim": "head_dim"}
    head_dim = r.int("head_dim", None)
    if head_dim is None and isinstance(hidden, int) and isinstance(heads, int) and heads:
        if hidden % heads:
            r.fail("head_dim", f"is required: hidden_size {hidden} is not a multiple of {heads}")
        head_dim = hidden // heads
    out["head_dim"] = head_dim
    if model_type == "qwen2":  # biases on q/k/v, none on o (Qwen2Attention)
        out["qkv_bias"] = True
    elif model_type not in _ALL_SLIDING:  # one flag for q/k/v and o
        bias = r.flag("attention_bias", False)
        out["qkv_bias"] = out["o_bias"] = bias
    if r.flag("mlp_bias", False):  # LlamaConfig's biases on the FFN projections
        r.fail("mlp_bias", "true (biases on the FFN projections) is not modelled")
    out["qk_norm"] = model_type in _QK_NORM
    out["attention_sinks"] = model_type == "gpt_oss"
    out |= _windows(r, model_type, layers)
    origin |= {"sliding_window": "sliding_window", "layer_types": "layer_types"}
    return out


def _windows(r: _Reader, model_type: str, layers: Any) -> dict[str, Any]:
    """sliding_window and layer_types: given, or as the model_type's config class derives."""
    window = r.int("sliding_window", None)
    types = r.data.get("layer_types")
    if types is not None:
        if not isinstance(types, list):
            r.fail("layer_types", "must be a list of attention types")
            return {}
        bad = [i for i, value in enumerate(types) if value not in _ATTENTION_TYPES]
        if bad:
            r.fail(
                f"layer_types[{bad[0]}]",
                f"{types[bad[0]]!r} ({len(bad)} layer(s)): only "
                f"{' and '.join(_ATTENTION_TYPES)} are modelled",
            )
            return {}
        return {"sliding_window": window, "layer_types": tuple(types)}
    if not isinstance(layers, int):
        return {}
    if model_type == "gpt_oss":  # GptOssConfig's default: even layers sliding
        return {
            "sliding_window": window,
            "layer_types": tuple(
                "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)
            ),
        }
    if model_type in _ALL_SLIDING:
        return {"sliding_window": window}
    if model_type in _WINDOW_LAYERS and r.flag("use_sliding_window", False):
        first = r.int("max_window_layers", layers)
        if window is None:
            r.fail("sliding_window", "is required when use_sliding_window is true")
            return {}
        return {
            "sliding_window": window,
            "layer_types": tuple(
                "sliding_attention" if i >= (first or 0) else "full_attention"
                for i in range(layers)
            ),
        }
    return {}


def _gqa_moe(
    r: _Reader, model_type: str, fields: dict[str, Any], origin: dict[str, str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if model_type == "qwen3_moe":
        out["routed_experts"] = r.int("num_experts")
        out["moe_intermediate"] = r.int("moe_intermediate_size")
        out["ffn_intermediate"] = r.int("intermediate_size", None)
        origin |= {
            "routed_experts": "num_experts",
            "moe_intermediate": "moe_intermediate_size",
            "ffn_intermediate": "intermediate_size",
        }
        step = r.int("decoder_sparse_step", 1)
        dense = r.get("mlp_only_layers", [])
        layers = fields["layers"]
        indices = isinstance(dense, list) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in dense
        )
        if not indices:
            r.fail("mlp_only_layers", f"must be a list of layer indices, got {dense!r}")
        elif isinstance(step, int) and isinstance(layers, int):
            outside = sorted({i for i in dense if not 0 <= i < layers})
            if outside:
                r.fail("mlp_only_layers", f"{outside} are not layers of 0..{layers - 1}")
            elif step < 1:
                r.fail("decoder_sparse_step", f"must be >= 1, got {step}")
            else:  # Qwen3MoeDecoderLayer: sparse iff not mlp_only and (i + 1) % step == 0
                only = set(dense)
                out["mlp_only_layers"] = tuple(
                    i for i in range(layers) if i in only or (i + 1) % step
                )
                origin["mlp_only_layers"] = "mlp_only_layers"
    else:
        out["routed_experts"] = r.int("num_local_experts")
        out["moe_intermediate"] = r.int("intermediate_size")
        origin |= {"routed_experts": "num_local_experts", "moe_intermediate": "intermediate_size"}
    key = "experts_per_token" if "num_experts_per_tok" not in r.data else "num_experts_per_tok"
    out["experts_per_token"] = r.int(key)
    origin["experts_per_token"] = key
    if model_type == "gpt_oss":
        out["router_bias"] = out["expert_bias"] = True
    return out


def _deepseek(r: _Reader, origin: dict[str, str]) -> dict[str, Any]:
    names = {
        "dense_layers": "first_k_dense_replace",
        "q_lora_rank": "q_lora_rank",
        "kv_lora_rank": "kv_lora_rank",
        "qk_nope_head_dim": "qk_nope_head_dim",
        "qk_rope_head_dim": "qk_rope_head_dim",
        "v_head_dim": "v_head_dim",
        "ffn_intermediate": "intermediate_size",
        "moe_intermediate": "moe_intermediate_size",
        "routed_experts": "n_routed_experts",
        "experts_per_token": "num_experts_per_tok",
        "shared_experts": "n_shared_experts",
        "expert_groups": "n_group",
        "groups_per_token": "topk_group",
    }
    origin |= names
    defaults = {"first_k_dense_replace": 0, "n_shared_experts": 0, "n_group": 1, "topk_group": 1}
    if "q_lora_rank" in r.data and r.data["q_lora_rank"] is None:
        r.fail("q_lora_rank", "null (a direct q_proj, as DeepSeek-V2-Lite) is not modelled")
    out = {field: r.int(key, defaults.get(key, _MISSING)) for field, key in names.items()}
    freq = r.int("moe_layer_freq", 1)
    if freq not in (1, None):
        r.fail("moe_layer_freq", f"{freq}: only every layer after the dense ones is modelled")
    method = r.get("topk_method", "noaux_tc")
    out["router_bias"] = method == "noaux_tc"  # its e_score_correction_bias per expert
    return out
