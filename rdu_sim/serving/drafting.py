"""What a draft model adds to a server's prefill steps: the drafting strategy.

:class:`Drafting` itself is no draft. Speculation (``serving.speculative.DraftWork``)
overrides it: under speculative decoding the draft prefills every prompt too (after the
target's step on shared sockets, beside it on separate ones); under speculative prefill the
draft scores a request's whole prompt before the target's first prefill step.
"""

from __future__ import annotations

from rdu_sim.native import mypyc_attr
from rdu_sim.shapes import StepShape


@mypyc_attr(allow_interpreted_subclasses=True)
class Drafting:
    """No draft (module docstring)."""

    def packs(self) -> bool:
        """Whether prompts may share a prefill step (a draft's work is per request)."""
        return True

    def admitted(self, request: int) -> int:
        """Time (ps) before ``request``'s first prefill step, once admitted (0: none)."""
        return 0

    def prefill_ps(self, target_ps: int, shape: StepShape) -> int:
        """A prefill step of ``shape`` with the draft's share, given the target's (ps); the
        draft's steps are counted in its own cache."""
        return target_ps
