"""A Hugging Face config.json, read from a local file, as an Architecture.

Nothing is downloaded: the file is the one a model repository ships beside its weights.
`model_type` picks the family and which keys matter (Hugging Face's own names):
- llama, mistral, qwen2, qwen3 -> `llama`: num_key_value_heads, head_dim,
  intermediate_size, attention_bias (Llama, Qwen3), mlp_bias (Llama), sliding_window
  (use_sliding_window, max_window_layers for Qwen), layer_types;
- mixtral, qwen3_moe, gpt_oss -> `gqa_moe`: the same, and num_local_experts (Qwen:
  num_experts), num_experts_per_tok (gpt-oss also experts_per_token),
  moe_intermediate_size, decoder_sparse_step, mlp_only_layers;
- deepseek_v3, kimi_k2 -> `deepseek`: n_routed_experts, n_shared_experts,
  num_experts_per_tok, moe_intermediate_size, intermediate_size, first_k_dense_replace,
  moe_layer_freq, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
  v_head_dim, n_group, topk_group, topk_method, attention_bias.

Common: hidden_size, num_hidden_layers, num_attention_heads, vocab_size,
max_position_embeddings, tie_word_embeddings, torch_dtype (or dtype), quantization_config
(`fp8` with `weight_block_size: [128, 128]` -> fp8_block weights; `mxfp4` -> MXFP4 experts).
A key left out takes the default of the model type's transformers config class (`DEFAULTS`,
one table naming each class's source file), or is required where that default is not
certain. Keys that do not change what the simulator counts (`HARMLESS_KEYS`: rope_theta,
rms_norm_eps, ...) are ignored; any other key the model type does not read is refused when
it is one edit from a key read that the file leaves out (a typo that would silently take a
default), else named in one warning. What it cannot model is refused with an error naming
the key: an unknown model_type, a vision tower (vision_config, text_config, a
*ForConditionalGeneration architecture), an attention kind other than full or
sliding-window (layer_types), a quantisation method it has no dtype for, DeepSeek MoE layers
that are not every layer after the first dense ones (moe_layer_freq), MLA without a query
low-rank projection (q_lora_rank) or with biases (attention_bias). DeepSeek's
multi-token-prediction layers (num_nextn_predict_layers) are left out, as in the presets:
plain decoding does not run them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
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
from rdu_sim.config.loader import MAX_DEPTH, MAX_FILE_BYTES, close_name, file_problem
from rdu_sim.config.yaml_io import read_text_file
from rdu_sim.models.layers import Architecture
from rdu_sim.sim_warnings import RduSimWarning, warn

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


@dataclass(frozen=True)
class Required:
    """A key with no default here (`why` says why): a file that leaves it out is refused."""

    why: str


@dataclass(frozen=True)
class SameAs:
    """A default that is another key's value (num_key_value_heads: num_attention_heads)."""

    key: str


@dataclass(frozen=True)
class Quotient:
    """A default that is one key's value over another's (head_dim: hidden_size over
    num_attention_heads), required when they do not divide."""

    numerator: str
    denominator: str


_HEADS = SameAs("num_attention_heads")
_HEAD_DIM = Quotient("hidden_size", "num_attention_heads")
_NO_CLASS = Required(
    "kimi_k2 has no transformers config class (its checkpoint ships its own code), so no "
    "default is certain"
)


def _common(vocab: int, hidden: int, layers: int, heads: int, context: int) -> dict[str, Any]:
    return {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "max_position_embeddings": context,
        "tie_word_embeddings": False,
    }


_DEEPSEEK_V3 = {
    **_common(129280, 7168, 61, 128, 4096),
    "first_k_dense_replace": 3,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "n_shared_experts": 1,
    "n_group": 8,
    "topk_group": 4,
    "attention_bias": False,
    # no DeepseekV3Config keys (DeepSeek's own remote code reads them); transformers' model
    # does what these defaults say: MoE in every layer after the dense ones, and the
    # router's score-correction bias
    "moe_layer_freq": 1,
    "topk_method": "noaux_tc",
}

DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers src/transformers/models/llama/configuration_llama.py (LlamaConfig);
    # sliding_window and layer_types are no LlamaConfig keys, read all the same (layers
    # with their windows; without them every layer is full attention)
    "llama": {
        **_common(32000, 4096, 32, 32, 2048),
        "num_key_value_heads": _HEADS,
        "head_dim": _HEAD_DIM,
        "intermediate_size": 11008,
        "attention_bias": False,
        "mlp_bias": False,
        "sliding_window": None,
        "layer_types": None,
    },
    # transformers src/transformers/models/mistral/configuration_mistral.py (MistralConfig)
    "mistral": {
        **_common(32000, 4096, 32, 32, 4096 * 32),
        "num_key_value_heads": 8,
        "head_dim": _HEAD_DIM,
        "intermediate_size": 14336,
        "sliding_window": 4096,
        "layer_types": None,
    },
    # transformers src/transformers/models/mixtral/configuration_mixtral.py (MixtralConfig);
    # intermediate_size is one expert's width
    "mixtral": {
        **_common(32000, 4096, 32, 32, 4096 * 32),
        "num_key_value_heads": 8,
        "head_dim": _HEAD_DIM,
        "intermediate_size": 14336,
        "sliding_window": None,
        "layer_types": None,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    },
    # transformers src/transformers/models/qwen2/configuration_qwen2.py (Qwen2Config);
    # head_dim is no Qwen2Config key: Qwen2Attention takes hidden_size / heads without it
    "qwen2": {
        **_common(151936, 4096, 32, 32, 32768),
        "num_key_value_heads": 32,
        "head_dim": _HEAD_DIM,
        "intermediate_size": 22016,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 28,
        "layer_types": None,
    },
    # transformers src/transformers/models/qwen3/configuration_qwen3.py (Qwen3Config)
    "qwen3": {
        **_common(151936, 4096, 32, 32, 32768),
        "num_key_value_heads": 32,
        "head_dim": 128,
        "intermediate_size": 22016,
        "attention_bias": False,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 28,
        "layer_types": None,
    },
    # transformers src/transformers/models/qwen3_moe/configuration_qwen3_moe.py
    # (Qwen3MoeConfig); head_dim and max_window_layers are no Qwen3MoeConfig keys, and
    # transformers versions differ on what the model takes without them
    "qwen3_moe": {
        **_common(151936, 2048, 24, 32, 32768),
        "num_key_value_heads": 4,
        "head_dim": Required(
            "Qwen3MoeConfig has no head_dim, and transformers versions differ on the model's "
            "without it (hidden_size / num_attention_heads, or none)"
        ),
        "intermediate_size": 6144,
        "attention_bias": False,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": Required(
            "Qwen3MoeConfig has no max_window_layers: with use_sliding_window it says which "
            "layers slide"
        ),
        "layer_types": None,
        "num_experts": 128,
        "moe_intermediate_size": 768,
        "num_experts_per_tok": 8,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    },
    # transformers src/transformers/models/gpt_oss/configuration_gpt_oss.py (GptOssConfig);
    # intermediate_size is one expert's width; without layer_types even layers slide
    "gpt_oss": {
        **_common(201088, 2880, 36, 64, 131072),
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "attention_bias": True,
        "sliding_window": 128,
        "layer_types": None,
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
    },
    # transformers src/transformers/models/deepseek_v3/configuration_deepseek_v3.py
    # (DeepseekV3Config)
    "deepseek_v3": _DEEPSEEK_V3,
    "kimi_k2": dict.fromkeys(_DEEPSEEK_V3, _NO_CLASS),
}
"""Each model_type's default for every key the loader reads for it (Hugging Face's names):
what transformers' config class of that type takes when config.json leaves the key out, or
`Required` where that is not certain. `SameAs` and `Quotient` are defaults derived from
other keys, as the config classes derive them. tests/test_hf_config.py checks that the keys
here are the keys read."""

NULL_MEANS: dict[str, Any] = {
    "num_key_value_heads": _HEADS,  # the config classes' "backward compatibility" rule
    "head_dim": _HEAD_DIM,
    "sliding_window": None,  # no window
    "layer_types": _MISSING,  # as left out: derived
    "mlp_only_layers": _MISSING,
}
"""What an explicit `null` means, for the keys whose config classes give None a meaning (a
DeepSeek `q_lora_rank: null` is refused: a direct query projection is not modelled). Any
other key written null is refused."""

ALIASES = {"gpt_oss": {"num_experts_per_tok": "experts_per_token"}}
"""A second name a model_type's files use for a key (read when the key itself is absent)."""

_ALWAYS_READ = frozenset(
    {"model_type", "torch_dtype", "dtype", "quantization_config", "architectures"}
)

HARMLESS_KEYS = frozenset(
    {
        # bookkeeping and token ids
        "transformers_version",
        "_name_or_path",
        "auto_map",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "use_cache",
        # training only
        "initializer_range",
        "attention_dropout",
        "pretraining_tp",
        "router_aux_loss_coef",
        "output_router_logits",
        "aux_loss_alpha",
        "seq_aux",
        # numerics the simulator's counts do not depend on (docs/models.md, Limits)
        "rms_norm_eps",
        "hidden_act",
        "rope_theta",
        "rope_scaling",
        "rope_parameters",
        "initial_context_length",
        "swiglu_limit",
        "norm_topk_prob",
        "routed_scaling_factor",
        "scoring_func",
        "ep_size",
        # DeepSeek: MLA has no KV heads; its MTP layers are left out (docs/models.md)
        "num_key_value_heads",
        "num_nextn_predict_layers",
    }
)
"""Keys a config.json may hold that change nothing the simulator counts, so they are not
read and not warned about; any other key the model_type does not read is (docs/models.md,
"config.json keys read")."""


class UnreadKeyWarning(RduSimWarning):
    """config.json keys that are neither read for the model_type nor in HARMLESS_KEYS; the
    CLI prints it as one `warning:` line."""


class DefaultedShapeWarning(RduSimWarning):
    """A config.json that leaves out a key of the model's size (:data:`SHAPE_KEYS`): read
    with the transformers default, as transformers would, but a checkpoint's file gives
    them, so a file without one is likely cut or edited by mistake."""


SHAPE_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "moe_intermediate_size",
)
"""The keys that size the model: every released checkpoint's config.json writes them."""


def _key_pattern(key: str) -> re.Pattern[str]:
    """Where `key` is written as an object key in JSON text (`"key":`)."""
    return re.compile(rf'"{re.escape(key)}"\s*:')


class _Reader:
    """Typed access to the JSON's keys, each left out taking the model_type's default
    (`DEFAULTS`); every problem becomes an issue naming the key.

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
        self.model_type = ""  # set once model_type is known; its defaults then apply

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
        """Record an issue, once (a key a default derives from is read again for it)."""
        issue = ConfigIssue(self.file, self.prefix + key, message, self.line(key))
        if issue not in self.issues:
            self.issues.append(issue)

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError([ConfigIssue(self.file, self.prefix + key, message, self.line(key))])

    def default(self, key: str) -> Any:
        """The model_type's default for `key` (`DEFAULTS`)."""
        return DEFAULTS[self.model_type][key] if self.model_type else _MISSING

    def get(self, key: str) -> Any:
        """The key's value: given, else its alias's, else the model_type's default (derived
        ones resolved); an explicit null as `NULL_MEANS` says. None after an issue."""
        if key not in self.data:
            alias = ALIASES.get(self.model_type, {}).get(key)
            if alias is not None and alias in self.data:
                key = alias
        if key in self.data:
            value = self.data[key]
            if value is not None:
                return value
            meaning = NULL_MEANS.get(key, _NULL)
            if meaning is _NULL:
                default = self.default(key)
                if isinstance(default, Required) or default is _MISSING:
                    self.fail(key, "is null: a value is required")
                else:
                    self.fail(
                        key,
                        f"is null: give a value, or leave the key out for its default "
                        f"({default_words(default)})",
                    )
                return None
            if meaning is not _MISSING:
                return self._resolve(key, meaning)
        default = self.default(key)
        if default is _MISSING:
            self.fail(key, "is required")
            return None
        return self._resolve(key, default)

    def _resolve(self, key: str, default: Any) -> Any:
        if isinstance(default, Required):
            self.fail(key, f"is required for model_type {self.model_type}: {default.why}")
            return None
        if isinstance(default, SameAs):
            return self.int(default.key)
        if isinstance(default, Quotient):
            top, bottom = self.int(default.numerator), self.int(default.denominator)
            if not isinstance(top, int) or not isinstance(bottom, int) or bottom < 1:
                return None  # their own issues say why
            if top % bottom:
                self.fail(
                    key,
                    f"is required: {default.numerator} {top} is not a multiple of "
                    f"{default.denominator} {bottom}",
                )
                return None
            return top // bottom
        return list(default) if isinstance(default, list) else default

    def int(self, key: str) -> Any:
        value = self.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            self.fail(key, f"must be an integer, got {value!r}")
            return None
        return value

    def flag(self, key: str) -> bool | None:
        value = self.get(key)
        if value is not None and not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {value!r}")
            return None
        return value


_NULL = object()


def default_words(default: Any) -> str:
    """A `DEFAULTS` entry in words: ``8``, ``as many as num_attention_heads``, ``hidden_size /
    num_attention_heads``, ``none`` (a window: none), ``required``."""
    if isinstance(default, Required):
        return "required"
    if isinstance(default, SameAs):
        return f"as many as {default.key}"
    if isinstance(default, Quotient):
        return f"{default.numerator} / {default.denominator}"
    if default is None:
        return "none"
    return json.dumps(default)


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
    `prefix` + the key (a workload writing the keys inline passes "model."). Keys the
    model_type does not read are refused when one edit away from a key it reads that the
    file leaves out (a typo), else named in one UnreadKeyWarning (`unread_keys`)."""
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
    r.model_type = model_type
    family = FAMILIES[model_type]
    typos, unread = unread_keys(data, model_type)
    for key, meant in typos.items():
        r.fail(
            key,
            f"is not a key {model_type} reads; did you mean {meant!r}? (left out, "
            f"{meant} takes its default: {default_words(DEFAULTS[model_type][meant])})",
        )
    fields: dict[str, Any] = {
        "family": family,
        "name": name,
        "vocab_size": r.int("vocab_size"),
        "hidden_size": r.int("hidden_size"),
        "layers": r.int("num_hidden_layers"),
        "heads": r.int("num_attention_heads"),
        "max_context": r.int("max_position_embeddings"),
        "tie_embeddings": r.flag("tie_word_embeddings"),
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
        # a key the file leaves out takes a default, perhaps derived from another
        # (num_key_value_heads from num_attention_heads): when the file's own keys err, the
        # defaults' errors are only theirs again
        given = [(key, message) for key, message in found if key in r.data]
        for key, message in given or found:
            r.fail(key, message + _defaults_named(message, r))
        raise ConfigError(r.issues) from None
    if unread:
        _warn_unread(r, unread)
    _warn_defaulted_shape(r)
    return arch


def _warn_defaulted_shape(r: _Reader) -> None:
    """One DefaultedShapeWarning naming the :data:`SHAPE_KEYS` the model type reads that the
    file leaves out, each with the default it took."""
    left_out = [
        key
        for key in SHAPE_KEYS
        if key in DEFAULTS[r.model_type]
        and key not in r.data
        and ALIASES.get(r.model_type, {}).get(key) not in r.data
    ]
    if not left_out:
        return
    taken = ", ".join(
        f"{r.prefix}{key} {default_words(DEFAULTS[r.model_type][key])}" for key in left_out
    )
    warn(
        DefaultedShapeWarning(
            f"{r.file}: leaves out keys that size the model, read with model_type "
            f"{r.model_type}'s defaults: {taken} (a checkpoint's config.json gives them; "
            "docs/models.md)"
        )
    )


def unread_keys(data: Mapping[str, Any], model_type: str) -> tuple[dict[str, str], list[str]]:
    """The file's keys that `model_type` does not read and that are not in HARMLESS_KEYS:
    (typos: each key one edit away from a key it reads that the file leaves out, with that
    key; the others, in the file's order)."""
    reads = set(DEFAULTS[model_type]) | set(ALIASES.get(model_type, {}).values())
    typos: dict[str, str] = {}
    unread: list[str] = []
    for key in data:
        if key in reads or key in _ALWAYS_READ or key in HARMLESS_KEYS or key in _REFUSED_KEYS:
            continue
        meant = [k for k in DEFAULTS[model_type] if k not in data and _one_edit(key, k)]
        if meant:
            typos[key] = meant[0]
        else:
            unread.append(key)
    return typos, unread


def _one_edit(a: str, b: str) -> bool:
    """Whether `a` becomes `b` by one insertion, deletion, substitution or swap of two
    neighbouring characters."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        swap = len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
        return len(diff) == 1 or (swap and a[diff[1]] == b[diff[0]])
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def _warn_unread(r: _Reader, unread: list[str]) -> None:
    """One UnreadKeyWarning naming the keys (each with its line and a close key it reads)."""
    reads = sorted(DEFAULTS[r.model_type])
    named = []
    for key in unread:
        where = [f"line {line}"] if (line := r.line(key)) is not None else []
        close = close_name(key, reads)
        if close is not None:
            where.append(f"did you mean {close!r}?")
        named.append(f"{r.prefix}{key}" + (f" ({'; '.join(where)})" if where else ""))
    warn(
        UnreadKeyWarning(
            f"{r.file}: not read for model_type {r.model_type}, so they change nothing: "
            f"{', '.join(named)} (docs/models.md, config.json keys read)"
        )
    )


def _defaults_named(message: str, r: _Reader) -> str:
    """What the keys a message names took when the file left them out: `` (num_key_value_heads
    left out: its default, 8)``; "" when it names none."""
    left = [
        f"{key} left out: its default, {default_words(DEFAULTS[r.model_type][key])}"
        for key in sorted(DEFAULTS[r.model_type])
        if key not in r.data and re.search(rf"\b{re.escape(key)}\b", message)
    ]
    return f" ({'; '.join(left)})" if left else ""


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
    out: dict[str, Any] = {
        "kv_heads": r.int("num_key_value_heads"),
        "head_dim": r.int("head_dim"),
    }
    origin |= {"kv_heads": "num_key_value_heads", "head_dim": "head_dim"}
    if model_type == "qwen2":  # biases on q/k/v, none on o (Qwen2Attention)
        out["qkv_bias"] = True
    elif "attention_bias" in DEFAULTS[model_type]:  # one flag for q/k/v and o
        bias = r.flag("attention_bias")
        out["qkv_bias"] = out["o_bias"] = bias
    if "mlp_bias" in DEFAULTS[model_type] and r.flag("mlp_bias"):  # LlamaConfig's FFN biases
        r.fail("mlp_bias", "true (biases on the FFN projections) is not modelled")
    out["qk_norm"] = model_type in _QK_NORM
    out["attention_sinks"] = model_type == "gpt_oss"
    out |= _windows(r, model_type, fields["layers"])
    origin |= {"sliding_window": "sliding_window", "layer_types": "layer_types"}
    return out


def _windows(r: _Reader, model_type: str, layers: Any) -> dict[str, Any]:
    """sliding_window and layer_types: given, or as the model_type's config class derives."""
    window = r.int("sliding_window")
    types = r.get("layer_types")
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
    if model_type in _WINDOW_LAYERS:  # windows only with use_sliding_window (Qwen)
        if not r.flag("use_sliding_window"):
            return {}
        first = r.int("max_window_layers")
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
    if model_type in _ALL_SLIDING and window is not None:  # every layer slides
        return {"sliding_window": window}
    return {}  # Llama reads a window only with layer_types


def _gqa_moe(
    r: _Reader, model_type: str, fields: dict[str, Any], origin: dict[str, str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if model_type == "qwen3_moe":
        out["routed_experts"] = r.int("num_experts")
        out["moe_intermediate"] = r.int("moe_intermediate_size")
        out["ffn_intermediate"] = r.int("intermediate_size")
        origin |= {
            "routed_experts": "num_experts",
            "moe_intermediate": "moe_intermediate_size",
            "ffn_intermediate": "intermediate_size",
        }
        step = r.int("decoder_sparse_step")
        dense = r.get("mlp_only_layers")
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
    out["experts_per_token"] = r.int("num_experts_per_tok")
    alias = ALIASES.get(model_type, {}).get("num_experts_per_tok")
    given = alias if alias in r.data and "num_experts_per_tok" not in r.data else None
    origin["experts_per_token"] = given or "num_experts_per_tok"
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
    out: dict[str, Any] = {}
    for field, key in names.items():
        if key == "q_lora_rank" and key in r.data and r.data[key] is None:
            r.fail(key, "null (a direct q_proj, as DeepSeek-V2-Lite) is not modelled")
            out[field] = None
        else:
            out[field] = r.int(key)
    freq = r.int("moe_layer_freq")
    if freq not in (1, None):
        r.fail("moe_layer_freq", f"{freq}: only every layer after the dense ones is modelled")
    if r.flag("attention_bias"):
        r.fail("attention_bias", "true (biases on MLA's projections) is not modelled")
    method = r.get("topk_method")
    out["router_bias"] = method == "noaux_tc"  # its e_score_correction_bias per expert
    return out
