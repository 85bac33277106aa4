"""The serving runtime between the hardware and the user: what a served step pays beyond
the device's own time.

A decode step cannot start before the previous one's tokens are sampled (the next input is
the sampled token), so host work per step is serialized with the device: the runtime's
scheduler, launching the step's program, reading the logits back over the host link,
sampling, detokenizing and streaming each sequence's token. How the runtime lays out the KV
cache is its choice too: static graphs compiled per context length (SambaStack) attend over
the padded length, a paged cache (TensorRT-LLM, vLLM) over the pages a sequence holds. Both
kinds of hardware file carry one ``runtime:`` section; every field defaults to the
hardware's ceiling (no host time; static context buckets, the workload's). The shipped
values are fitted to measured deployments by ``rdu-sim calibrate`` (docs/calibration.md).
"""

from pydantic import Field

from rdu_sim.config.base import StrictModel
from rdu_sim.config.units import Seconds

_MAX_OVERHEAD_S = 1.0


class RuntimeConfig(StrictModel):
    """Host time the serving runtime adds to every step, serialized with the device."""

    step_overhead: Seconds = Field(
        default=0.0,
        ge=0,
        le=_MAX_OVERHEAD_S,
        description="host time per step, serialized with the device: the scheduler, the "
        "step's launch and the wait for its end, the logits' trip back to the host",
    )
    slot_overhead: Seconds = Field(
        default=0.0,
        ge=0,
        le=_MAX_OVERHEAD_S,
        description="host time per batch slot of a step (every slot of the static graph): "
        "one sequence's logits sampled, its token detokenized and streamed to its client",
    )

    kv_page_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1 << 20,
        description="tokens per page of a paged KV cache: a decode step's attention reads "
        "each sequence's pages (its cache rounded up to a page), not a static graph's "
        "context bucket; none: static decode graphs at the workload's kv.context_buckets",
    )

    prefill_batch_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1 << 24,
        description="the runtime packs waiting prompts of one static prefill shape into one "
        "prefill step, up to this many (padded) tokens; none: one prompt per prefill step",
    )

    def host_s(self, batch: int) -> float:
        """Host seconds a step of ``batch`` slots adds to the device's time."""
        return self.step_overhead + batch * self.slot_overhead
