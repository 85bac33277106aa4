"""A trace for a cluster: parallel arrays, with block hashes and extra columns when it has them.

``published.read_table`` turns a trace of any registered format into a :class:`TraceTable`:
arrival times on the trace's own clock (seconds from its earliest request), prompt and
output lengths, Mooncake-style block hashes when the format has them, and the other columns
as text (for filters and request classes). Rows the trace marks as failed requests (zero
tokens: BurstGPT logs failures that way) are counted in ``skipped``, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class TraceTable:
    """A trace's requests (file order) and what reading it found."""

    format: str
    arrival_s: NDArray[np.float64]  # trace clock: seconds from its earliest request
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    hash_offsets: NDArray[np.int64] | None = None  # request i: values[offsets[i]:offsets[i+1]]
    hash_values: NDArray[np.int64] | None = None
    columns: Mapping[str, NDArray[np.object_]] = field(default_factory=dict)
    skipped: int = 0  # rows that were failed requests in the trace (zero tokens)

    def __len__(self) -> int:
        return int(self.prompt_tokens.shape[0])

    def requests(self) -> Iterator[tuple[float, int, int]]:
        """``(arrival_s, prompt_tokens, output_tokens)`` of each request, in order (writers)."""
        return zip(
            self.arrival_s.tolist(),
            self.prompt_tokens.tolist(),
            self.output_tokens.tolist(),
            strict=True,
        )


class TableBuilder:
    """Collects checked rows of one trace, then makes the arrays."""

    def __init__(self, format: str, with_hashes: bool = False) -> None:
        self.format = format
        self.arrival: list[float] = []
        self.prompt: list[int] = []
        self.output: list[int] = []
        self.offsets: list[int] | None = [0] if with_hashes else None
        self.values: list[int] = []
        self.columns: dict[str, list[str]] = {}
        self.skipped = 0

    def add(
        self,
        arrival_s: float,
        prompt: int,
        output: int,
        hashes: Sequence[int] = (),
        extra: Mapping[str, str] | None = None,
    ) -> None:
        """One request row (zero-token rows go to :meth:`skip` instead)."""
        self.arrival.append(arrival_s)
        self.prompt.append(prompt)
        self.output.append(output)
        if self.offsets is not None:
            self.values.extend(hashes)
            self.offsets.append(len(self.values))
        for name, value in (extra or {}).items():
            self.columns.setdefault(name, []).append(value)

    def skip(self) -> None:
        """A row the trace records as a failed request."""
        self.skipped += 1

    def build(self) -> TraceTable:
        """The table, arrival times shifted to start at the earliest (at least one row)."""
        arrival = np.asarray(self.arrival, dtype=np.float64)
        arrival -= arrival.min()
        return TraceTable(
            format=self.format,
            arrival_s=arrival,
            prompt_tokens=np.asarray(self.prompt, dtype=np.int64),
            output_tokens=np.asarray(self.output, dtype=np.int64),
            hash_offsets=None if self.offsets is None else np.asarray(self.offsets, np.int64),
            hash_values=None if self.offsets is None else np.asarray(self.values, np.int64),
            columns={k: np.asarray(v, dtype=np.object_) for k, v in self.columns.items()},
            skipped=self.skipped,
        )
