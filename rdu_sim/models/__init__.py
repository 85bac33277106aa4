"""Model architecture presets and their derived figures."""

from rdu_sim.models.figures import (
    Architecture,
    ModelFigures,
    decode_flops_per_token,
    kv_bytes,
    kv_bytes_per_token,
    layer_params,
    model_figures,
    params_active,
    params_total,
    weight_bytes,
)
from rdu_sim.models.hf_config import read_config_json
from rdu_sim.models.layers import LayerKind, Segment, layer_kinds, layer_segments, window_tokens
from rdu_sim.models.presets import UnknownModelError, get_model, preset_names
from rdu_sim.models.storage import storage_dtypes

__all__ = [
    "Architecture",
    "LayerKind",
    "ModelFigures",
    "Segment",
    "UnknownModelError",
    "decode_flops_per_token",
    "get_model",
    "kv_bytes",
    "kv_bytes_per_token",
    "layer_kinds",
    "layer_params",
    "layer_segments",
    "model_figures",
    "params_active",
    "params_total",
    "preset_names",
    "read_config_json",
    "storage_dtypes",
    "weight_bytes",
    "window_tokens",
]
