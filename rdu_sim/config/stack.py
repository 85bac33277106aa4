"""A serving stack: the software between the hardware and the user, its own file beside the
hardware (``stacks/``).

A machine's hardware file holds what the silicon and its wiring do; a stack (SambaStudio as
Argonne measured it in 2024, SambaStack, TensorRT-LLM, vLLM) holds what its runtime adds to
every step and how it lays out and batches the work: host time on the critical path (a
decode step's input is the token the previous step sampled), host time it overlaps with the
device, how its KV cache is paged and whether it packs prompts. A workload names its stack
(``stack:``); without one it runs the stack its hardware file names (``default_stack:``),
and ``none`` is the hardware's ceiling: no host time, static context buckets, one prompt per
prefill step. A stack's values are fitted on that stack's measurements only
(docs/calibration.md).
"""

from typing import Literal

from pydantic import Field

from rdu_sim.config.base import StrictModel
from rdu_sim.config.units import Seconds

_MAX_HOST_S = 1.0

NONE = "none"
"""The name of the built-in stack that adds nothing: the hardware's ceiling."""

RunsOn = Literal["rdu", "gpu", "any"]


class HostWorkConfig(StrictModel):
    """Host time the runtime spends per step, and whether the device waits for it."""

    serial_per_step: Seconds = Field(
        default=0.0,
        ge=0,
        le=_MAX_HOST_S,
        description="host time per step on the device's critical path: the scheduler, the "
        "step's launch and the wait for its end, the sampled tokens' trip to the host",
    )
    serial_per_slot: Seconds = Field(
        default=0.0,
        ge=0,
        le=_MAX_HOST_S,
        description="host time per batch slot of a step on the critical path (every slot of "
        "the static graph): one sequence's logits sampled, its token detokenized and streamed "
        "before the next step starts",
    )


class StackConfig(StrictModel):
    """A complete serving stack file."""

    name: str = Field(min_length=1, max_length=200, description="the name reports show")
    description: str = Field(default="", description="what the stack is (free text)")
    runs_on: RunsOn = Field(
        description="the hardware kind it runs on: 'rdu' (SN40L), 'gpu', or 'any'"
    )
    host: HostWorkConfig = Field(
        default_factory=HostWorkConfig,
        description="host time per step and per slot, and what of it the device waits for",
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
        return self.host.serial_per_step + batch * self.host.serial_per_slot


NO_STACK = StackConfig(name=NONE, runs_on="any", description="the hardware's ceiling")
"""The stack named ``none``."""
