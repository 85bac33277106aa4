"""Factories for the common operators: projections, norms, RoPE, residuals, gating.

Vector-FLOP weights per element (elementwise work is not in the model's figures; these are
the usual operation counts, used only for the vector-unit time of a stage):
RMSNorm 4 (square, sum, scale, weight), RoPE 3 (two multiplies, one add), softmax 5 (max,
subtract, exp, sum, divide), SiLU-gating 5 (exp, add, divide, multiply, gate multiply),
residual add 1, sampling a token 8 a logit (temperature scale, the softmax's 5, and two
compares of a top-k/top-p threshold search).
"""

from __future__ import annotations

from rdu_sim.graph.operator import Gemm, Operator, OpKind, Split, TensorSpec
from rdu_sim.graph.shape import Precision, StepShape

NORM_FLOPS = 4
ROPE_FLOPS = 3
SOFTMAX_FLOPS = 5
SILU_MUL_FLOPS = 5
ADD_FLOPS = 1
SAMPLE_FLOPS = 8


def act(name: str, shape: tuple[int, ...], precision: Precision) -> TensorSpec:
    """An activation tensor at the activation precision."""
    return TensorSpec(name, shape, precision.activations)


def by_part(
    name: str,
    parts: tuple[tuple[str, StepShape], ...],
    rest: tuple[int, ...],
    precision: Precision,
) -> tuple[TensorSpec, ...]:
    """A tensor of a step's rows as one activation for each attention part's rows
    (`graph.shape.step_parts`), named with the part's prefix."""
    return tuple(
        act(prefix + name, (part.batch, part.tokens, *rest), precision) for prefix, part in parts
    )


def linear(
    name: str,
    x: TensorSpec,
    outputs: tuple[TensorSpec, ...],
    *,
    rows: int,
    k: int,
    n: int,
    precision: Precision,
    split: Split,
    kind: OpKind = "gemm",
    resident: bool = True,
    bias: bool = False,
) -> Operator:
    """A weight GEMM: `rows` x `k` activations times a `k` x `n` weight (plus an n-wide
    bias, added elementwise, when `bias`).

    `resident=False` for a product that re-reads weights another operator owns (so they are
    not counted twice in the model's resident parameters).
    """
    params = k * n + (n if bias else 0)
    return Operator(
        name,
        kind,
        inputs=(x,),
        outputs=outputs,
        flops=2 * rows * k * n,
        vector_flops=ADD_FLOPS * rows * n if bias else 0,
        weight_params=params if resident else 0,
        weight_bytes=params * precision.weights if resident else 0,
        weight_read_bytes=params * precision.weights,
        gemm=Gemm(m=rows, n=n, k=k),
        split=split,
    )


def rmsnorm(name: str, x: TensorSpec, out: str, precision: Precision, split: Split) -> Operator:
    """RMSNorm over the last dimension, with a weight of that size."""
    width = x.shape[-1]
    return Operator(
        name,
        "rmsnorm",
        inputs=(x,),
        outputs=(act(out, x.shape, precision),),
        vector_flops=NORM_FLOPS * x.elements,
        weight_params=width,
        weight_bytes=width * precision.weights,
        weight_read_bytes=width * precision.weights,
        split=split,
    )


def rope(name: str, x: TensorSpec, out: str, precision: Precision, split: Split) -> Operator:
    """Rotary position embedding applied to `x`."""
    return Operator(
        name,
        "rope",
        inputs=(x,),
        outputs=(act(out, x.shape, precision),),
        vector_flops=ROPE_FLOPS * x.elements,
        split=split,
    )


def residual(name: str, a: TensorSpec, b: TensorSpec, out: str, precision: Precision) -> Operator:
    """Residual add of two hidden states (replicated on every socket)."""
    return Operator(
        name,
        "residual",
        inputs=(a, b),
        outputs=(act(out, a.shape, precision),),
        vector_flops=ADD_FLOPS * a.elements,
    )


def silu_mul(
    name: str, gate: TensorSpec, up: TensorSpec, out: str, precision: Precision, split: Split
) -> Operator:
    """SwiGLU gating: silu(gate) * up."""
    return Operator(
        name,
        "silu_mul",
        inputs=(gate, up),
        outputs=(act(out, gate.shape, precision),),
        vector_flops=SILU_MUL_FLOPS * gate.elements,
        split=split,
    )


def softmax(name: str, scores: TensorSpec, out: TensorSpec, split: Split) -> Operator:
    """Row softmax (scaling and causal mask folded in)."""
    return Operator(
        name,
        "softmax",
        inputs=(scores,),
        outputs=(out,),
        vector_flops=SOFTMAX_FLOPS * scores.elements,
        split=split,
    )
