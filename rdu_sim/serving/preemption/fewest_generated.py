"""``fewest_generated``: the running request that has generated the fewest output tokens
(SGLang's ``retract_decode``).

SGLang retracts, when a decode batch lacks KV memory, the request with the fewest output
tokens so far, among those the longest original prompt (the most memory freed for the
least decoding lost); ties here go to the latest arrival (``latest_arrival``'s rule). A
request still prefilling has generated none (a readmitted one, those of its earlier
admissions).
"""

from __future__ import annotations

from rdu_sim.serving.preemption.base import PreemptionPolicy, RunningView, register


class FewestGenerated(PreemptionPolicy):
    """The fewest tokens generated, then the longest prompt (module docstring)."""

    def victim(self, running: RunningView) -> int:
        """The slot of the smallest (generated, -prompt, -arrival, -request id)."""
        victim = -1
        best = (0, 0, 0, 0)
        for slot in range(len(running)):
            request = running.request(slot)
            if request < 0:
                continue
            key = (
                running.generated(slot),
                -running.prompt_tokens(slot),
                -running.arrival_ps(slot),
                -request,
            )
            if victim < 0 or key < best:
                victim, best = slot, key
        return victim


register("fewest_generated", FewestGenerated)
