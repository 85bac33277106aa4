"""The storage precisions a layer graph is built with; the step shape it is built for.

`StepShape` and the attention-length convention (`attended_keys`, `attended_pairs`) are
defined once in `rdu_sim.shapes` and re-exported here for the graph builders.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdu_sim.shapes import Phase, StepShape, attended_keys, attended_pairs

__all__ = [
    "DECODE_PART",
    "FP32",
    "INDEX",
    "Phase",
    "Precision",
    "StepShape",
    "attended_keys",
    "attended_pairs",
    "step_parts",
    "token_axes",
]


def token_axes(shape: StepShape) -> tuple[int, int]:
    """The leading axes of a tensor of the step's token rows: (batch, tokens), or one row
    axis for a mixed step, whose prompts and decode rows differ in tokens a slot."""
    return (1, shape.rows) if shape.decode_batch else (shape.batch, shape.tokens)


@dataclass(frozen=True)
class Precision:
    """Bytes per element of weights, KV cache and activations; routed experts' weights may
    have their own (`experts`, None: as the other weights)."""

    weights: float = 2.0
    kv: float = 2.0
    activations: float = 2.0
    experts: float | None = None

    @property
    def expert_weights(self) -> float:
        """Bytes per routed-expert weight (their biases stay at `weights`)."""
        return self.weights if self.experts is None else self.experts


DECODE_PART = "decode."
"""The prefix of a mixed step's decode rows' operators and tensors (`step_parts`)."""

FP32 = 4.0  # scores, softmax statistics, router logits
INDEX = 4.0  # int32 token ids and indices


def step_parts(shape: StepShape) -> tuple[tuple[str, StepShape], ...]:
    """A step's attention parts, each with the prefix of its operators' names: the prompts'
    (the whole step when it carries no decode rows) and a mixed step's decode rows
    (``DECODE_PART``)."""
    if not shape.decode_batch:
        return (("", shape),)
    return (("", shape.prefill_part()), (DECODE_PART, shape.decode_part()))
