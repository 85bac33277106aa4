"""Speculation knobs of a workload: speculative decoding and speculative prefill.

The workload's ``speculation`` section (``config.workload.SpeculationConfig``) names a draft
model and where it runs; this module holds its two mechanisms' own settings:

- ``decoding`` (:class:`SpecDecodingConfig`): the draft proposes ``draft_tokens`` (k) tokens
  per round, the target verifies k + 1 in one static step; each request accepts drafted
  tokens with its per-token ``acceptance`` rate: a number, a distribution over requests
  (``uniform``, ``beta``), or the ``acceptance`` column of the workload's request trace.
- ``prefill`` (:class:`SpecPrefillConfig`): the draft prefills the whole prompt and scores
  it, the target prefills only ``keep_ratio`` of it (Speculative Prefill, Liu et al., ICML
  2025; across model families, SambaNova's Cross-Family Speculative Prefill, 2026).
"""

import sys
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, BeforeValidator, Field, model_validator

from rdu_sim.config.base import StrictModel
from rdu_sim.config.show import shown
from rdu_sim.config.units import ShortSeconds


def _rate(description: str) -> Any:
    """An acceptance rate (0 to 1) and what it is."""
    return Field(ge=0, le=1, description=description)


class FixedAcceptance(StrictModel):
    """Every request accepts each drafted token with the same probability."""

    dist: Literal["fixed"] = Field(default="fixed", description="the distribution: fixed")
    rate: float = _rate("probability a drafted token is accepted")


class UniformAcceptance(StrictModel):
    """Each request's acceptance rate uniform on [low, high]."""

    dist: Literal["uniform"] = Field(description="the distribution: uniform")
    low: float = _rate("lowest acceptance rate of a request")
    high: float = _rate("highest acceptance rate of a request")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        return self


class BetaAcceptance(StrictModel):
    """Each request's acceptance rate from a Beta distribution of the given mean;
    ``concentration`` = alpha + beta (larger: requests closer to the mean)."""

    dist: Literal["beta"] = Field(description="the distribution: beta")
    mean: float = Field(gt=0, lt=1, description="mean acceptance rate over requests")
    concentration: float = Field(
        gt=0, le=1e6, description="alpha + beta: larger keeps requests closer to the mean"
    )

    @property
    def shape(self) -> tuple[float, float]:
        """The Beta distribution's (alpha, beta)."""
        return self.mean * self.concentration, (1.0 - self.mean) * self.concentration

    @model_validator(mode="after")
    def _drawable(self) -> Self:
        """alpha and beta are normal positive floats: a product that underflows to 0 (or to
        a denormal) is no distribution NumPy can draw from."""
        for name, value in zip(("alpha", "beta"), self.shape, strict=True):
            if not value >= sys.float_info.min:
                raise ValueError(
                    f"{name} = {'mean' if name == 'alpha' else '(1 - mean)'} x concentration "
                    f"is {value:.3g}, below {sys.float_info.min:.3g} (the least normal "
                    "float): raise mean or concentration"
                )
        return self


class TraceAcceptance(StrictModel):
    """Each request's acceptance rate from the ``acceptance`` column of ``serving.trace``."""

    dist: Literal["trace"] = Field(description="the rates come from the trace")


ACCEPTANCE_FORMS = (
    "a rate from 0 to 1 (acceptance: 0.8), {dist: fixed, rate}, {dist: uniform, low, high}, "
    "{dist: beta, mean, concentration} or {dist: trace} (the trace's acceptance column)"
)
"""The forms ``acceptance`` takes, in words (its error lists them)."""


def _rate_shorthand(value: Any) -> Any:
    """Let ``acceptance: 0.8`` mean a fixed rate; anything else but a mapping is refused
    with the forms accepted (``"80%"`` is neither)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"dist": "fixed", "rate": value}
    if not isinstance(value, dict | BaseModel):  # (a model: validated again, as it is)
        raise ValueError(f"expected {ACCEPTANCE_FORMS}; got {shown(value)}")
    return value


AcceptanceDistribution = Annotated[
    FixedAcceptance | UniformAcceptance | BetaAcceptance | TraceAcceptance,
    BeforeValidator(
        _rate_shorthand,
        json_schema_input_type=float
        | FixedAcceptance
        | UniformAcceptance
        | BetaAcceptance
        | TraceAcceptance,
    ),
    Field(discriminator="dist"),
]


class SpecDecodingConfig(StrictModel):
    """Speculative decoding: k draft tokens per round, verified by the target at once."""

    draft_tokens: int = Field(
        default=4,
        ge=1,
        le=32,
        description="k: tokens the draft proposes per round; the target verifies k + 1 "
        "tokens per slot in one static step (a graph compiled per k)",
    )
    acceptance: AcceptanceDistribution = Field(
        default_factory=lambda: FixedAcceptance(rate=0.8),
        description=f"per-token acceptance rate of each request: {ACCEPTANCE_FORMS}",
    )


class SpecPrefillConfig(StrictModel):
    """Speculative prefill: the draft reads the whole prompt, the target only what it keeps."""

    keep_ratio: float = Field(
        gt=0,
        le=1,
        description="share of the prompt's tokens the target prefills (chosen by the "
        "draft's attention scores, in whole chunks)",
    )
    chunk_tokens: int = Field(
        default=32,
        ge=1,
        le=1_000_000,
        description="tokens per selection chunk: whole chunks are kept or dropped "
        "(SpecPrefill's default, 32)",
    )
    look_ahead: int = Field(
        default=8,
        ge=0,
        le=1024,
        description="tokens the draft decodes past the prompt; their attention over the "
        "prompt scores its tokens (SpecPrefill's default, 8)",
    )
    token_mapping: ShortSeconds | None = Field(
        default=None,
        ge=0,
        le=1.0,
        description="host time per prompt token to map the kept tokens from the draft's "
        "tokenizer to the target's (cross-family drafts, whose vocabulary differs); "
        "unset: the same tokenizer, no mapping",
    )
