"""``last_admitted``: the running request admitted last (vLLM V1's rule under ``fcfs``).

vLLM V1 keeps its running requests in the order it scheduled them and preempts with
``self.running.pop()``: the one admitted last. A preempted request goes back to the
waiting queue's front and, readmitted, joins the running list's tail again, so it is the
next victim, where ``latest_arrival`` would take a later arrival admitted before it. Without
a readmission the two agree (admissions in arrival order); they differ once a preempted
request is readmitted beside requests that arrived after it.
"""

from __future__ import annotations

from rdu_sim.serving.preemption.base import PreemptionPolicy, RunningView, register


class LastAdmitted(PreemptionPolicy):
    """The latest admission among the running requests (module docstring)."""

    def victim(self, running: RunningView) -> int:
        """The slot of the largest admission serial."""
        victim, latest = -1, -1
        for slot in range(len(running)):
            if running.request(slot) >= 0 and running.admitted(slot) > latest:
                victim, latest = slot, running.admitted(slot)
        return victim


register("last_admitted", LastAdmitted)
