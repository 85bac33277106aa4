"""Model architecture presets and their derived figures."""

from rdu_sim.models.figures import (
    Architecture,
    ModelFigures,
    decode_flops_per_token,
    kv_bytes_per_token,
    layer_params,
    model_figures,
    params_active,
    params_total,
    weight_bytes,
)
from rdu_sim.models.presets import UnknownModelError, get_model, preset_names

__all__ = [
    "Architecture",
    "ModelFigures",
    "UnknownModelError",
    "decode_flops_per_token",
    "get_model",
    "kv_bytes_per_token",
    "layer_params",
    "model_figures",
    "params_active",
    "params_total",
    "preset_names",
    "weight_bytes",
]
