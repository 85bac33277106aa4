"""Storage dtypes and their bytes per element, scales included: the one home of that math.

Plain formats are their element size and carry no scales: `int4` is 0.5 bytes a weight, a
4-bit checkpoint without its group scales (a real one with an FP16 scale and zero point per
128 weights, as GPTQ and AWQ store them, is about 4.25 bits, 6% more: `mxfp4`'s 4.25 bits
counts that size); `int8` and `fp8` likewise leave out per-channel or per-tensor scales. The
block-scaled weight formats count their scales as bytes of the weights they scale:
- `fp8_block`: FP8 (E4M3) values with one FP32 scale per 128 x 128 block, as DeepSeek-V3 and
  Kimi K2 release their weights (config.json `quantization_config`: `quant_method: fp8`,
  `weight_block_size: [128, 128]`): 1 + 4 / 128^2 bytes per weight. Counted per element: a
  matrix whose sides are not multiples of 128 pays its partial edge blocks' scales too,
  which this leaves out (under 0.01% of DeepSeek-V3's weights);
- `mxfp4`: OCP Microscaling FP4 (E2M1) values with one 8-bit E8M0 scale per 32 elements, as
  gpt-oss releases its experts (`quant_method: mxfp4`): 4 + 8/32 = 4.25 bits per weight.
Block formats scale weights only; the KV cache and activations take the plain formats.
"""

from __future__ import annotations

from typing import Literal

ValueDtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
"""Formats of any stored value: weights, KV cache, activations."""

WeightDtype = Literal["fp32", "bf16", "fp16", "fp8", "fp8_block", "int8", "int4", "mxfp4"]
"""Formats of stored weights: the plain ones and the block-scaled ones."""

FP8_BLOCK_SIDE = 128  # DeepSeek-V3 / Kimi K2 weight_block_size: [128, 128]
FP8_BLOCK_SCALE_BYTES = 4  # one FP32 scale (weight_scale_inv) per block
MX_BLOCK = 32  # OCP MX v1.0: one shared scale per 32 elements
MX_SCALE_BITS = 8  # E8M0

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_block": 1.0 + FP8_BLOCK_SCALE_BYTES / FP8_BLOCK_SIDE**2,
    "int8": 1.0,
    "int4": 0.5,
    "mxfp4": (4 + MX_SCALE_BITS / MX_BLOCK) / 8,
}
"""Bytes per element of every dtype (weights' scales included)."""

FP8_DTYPES = frozenset({"fp8", "fp8_block"})
"""Formats whose values are FP8 (E4M3), plain or block-scaled: a GPU multiplies them on its
FP8 tensor cores (the block scales are applied per block of the product, as DeepSeek-V3's
FP8 GEMMs do)."""
