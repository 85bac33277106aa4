"""How long one row takes to cross a kernel's stages (`allocation.path_spread` shortens it).

With fewer rows than tiles (batch-1 decode) a stage that finishes its output row only at its
end (`compiler.row_barriers`) holds its consumers until then, and a consumer of a stage that
streams works beside it, tile for tile. So one row through stages of times t_i starts and
ends each stage at

    S_i = max(0, F_p for a holding producer p, S_p for a streaming one)
    F_i = max(S_i + t_i, F_p for a streaming producer p)

(a streaming consumer cannot finish before its producer's last tile), and takes the longest
F_i: the longest path of an event graph whose edges carry the t_i (`RowGraph.path`). Parallel
branches (the shared expert beside the router) count once, and a stage streaming beside its
producer only as far as it outlasts it. A plain chain (every stage holding, each feeding the
next) is the sum of the t_i.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RowGraph:
    """A kernel's stages as one row crosses them: each stage's producers (indices of
    earlier stages) and whether it finishes its output row only at its end (`holds`)."""

    inputs: tuple[tuple[int, ...], ...]
    holds: tuple[bool, ...]

    def __post_init__(self) -> None:
        if len(self.inputs) != len(self.holds):
            raise ValueError("a row graph needs the producers and the holding of every stage")
        for i, producers in enumerate(self.inputs):
            if any(not 0 <= p < i for p in producers):
                raise ValueError(f"stage {i}'s producers {producers} are not earlier stages")

    def path(self, times: Sequence[float]) -> float:
        """The time one row takes through stages of ``times`` (module docstring)."""
        return self.longest(times)[0]

    def longest(self, times: Sequence[float]) -> tuple[float, list[bool]]:
        """The time one row takes, and which stages' times a longest path adds."""
        n = len(times)
        start = [0.0] * n
        finish = [0.0] * n
        # where each start and finish comes from: ("s" | "f", stage) or None (time 0 / own)
        start_from: list[tuple[str, int] | None] = [None] * n
        finish_from: list[int | None] = [None] * n  # a streaming producer's finish, or own
        for i in range(n):
            for p in self.inputs[i]:
                at, kind = (finish[p], "f") if self.holds[p] else (start[p], "s")
                if at > start[i]:
                    start[i], start_from[i] = at, (kind, p)
            finish[i] = start[i] + times[i]
            for p in self.inputs[i]:
                if not self.holds[p] and finish[p] > finish[i]:
                    finish[i], finish_from[i] = finish[p], p
        on = [False] * n
        if n == 0:
            return 0.0, on
        end = max(range(n), key=lambda i: (finish[i], -i))
        node: tuple[str, int] | None = ("f", end)
        while node is not None:
            kind, i = node
            if kind == "f":
                producer = finish_from[i]
                if producer is not None:
                    node = ("f", producer)
                    continue
                on[i] = True
            node = start_from[i]
        return finish[end], on
