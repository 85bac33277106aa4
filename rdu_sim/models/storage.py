"""Which dtype a model's weights are stored in: the one rule every entry point uses.

A workload's `dtypes.weights` wins; unset, the model's released dtype (its config.json's
`torch_dtype` or `quantization_config`), else bf16. Routed experts: `dtypes.experts`, else
the model's released expert dtype (gpt-oss ships its experts in MXFP4 and the rest in
BF16), else whatever the other weights resolved to.
"""

from __future__ import annotations

from rdu_sim.models.layers import Architecture

DEFAULT_WEIGHT_DTYPE = "bf16"


def storage_dtypes(
    arch: Architecture, weights: str | None = None, experts: str | None = None
) -> tuple[str, str]:
    """(weights, routed experts) dtypes for `arch` given a workload's (or a command's)
    explicit choices, None where it made none."""
    resolved = weights or arch.weight_dtype or DEFAULT_WEIGHT_DTYPE
    return resolved, experts or arch.expert_dtype or resolved
