"""A trace for a cluster: parallel arrays, with block hashes and extra columns when it has them.

``traces.reader.read_table`` turns a trace of any registered format into a :class:`TraceTable`:
arrival times on the trace's own clock (seconds from its earliest request), prompt and
output lengths, Mooncake-style block hashes when the format has them, and the other columns
as text (for filters and request classes). Rows the trace marks as failed requests (zero
tokens: BurstGPT logs failures that way) are counted in ``skipped``, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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
    lines: NDArray[np.int64] | None = None  # each request's line in the file (None: drawn)

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


def out_of_order(arrival_s: NDArray[np.float64]) -> int:
    """Rows (in file order) that arrive before a row above them: what a replay reorders (its
    requests are numbered by arrival), counted the one way ``rdu-sim run`` (a cluster's
    ``traffic.out_of_order_rows``) and ``rdu-sim check`` say it."""
    return int((arrival_s < np.maximum.accumulate(arrival_s)).sum()) if len(arrival_s) else 0
