"""The serving time series: one packed row of state counts per instant with a change.

Written by the scheduler at each decision (two rows a request), read by the reports
(``report.summary``) as NumPy views.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

SERIES_COLUMNS = ("time_ps", "waiting", "prefilling", "decoding", "decode_bucket")
"""Time-series row: after the change at ``time_ps``, requests waiting in the queue, slots
prefilling (chunked prompts in progress), slots decoding, and the decode bucket of the last
decode step (0 before any)."""


class SeriesLog:
    """Time-series rows (``SERIES_COLUMNS``), one per instant: a change at the same
    picosecond as the last row replaces it (the states in between last no time, so no time
    average or occupancy sees them). Rows gather in a list of ints and are packed, 4,096 at
    a time, into NumPy blocks: the times as int64 and the four counts as C ints, 24 bytes a
    row (a million DeepSeek-R1 requests keep ~48 MB). ``times`` and ``counts`` join the
    blocks into one (kept as the only block until the next row); a later row never changes
    an array they returned."""

    def __init__(self) -> None:
        self._rows: list[int] = []  # rows not yet packed, flat
        self._times: list[NDArray[np.int64]] = []  # packed blocks, in order
        self._counts: list[NDArray[np.intc]] = []
        self._packed = 0  # rows in the blocks
        self._last_ps = -1
        self.elsewhere = 0
        """Requests waiting outside the scheduler's queue, counted with it (a Composition of
        Experts' routed requests waiting for their expert's turn)."""

    def append(self, now: int, waiting: int, prefilling: int, decoding: int, bucket: int) -> None:
        """The state after a change at ``now`` ps (never before the last row's)."""
        rows = self._rows
        if now == self._last_ps:
            if not rows:  # the row to replace is packed already
                self._unpack_last()
            rows[-4] = waiting + self.elsewhere
            rows[-3] = prefilling
            rows[-2] = decoding
            rows[-1] = bucket
            return
        rows.append(now)
        rows.append(waiting + self.elsewhere)
        rows.append(prefilling)
        rows.append(decoding)
        rows.append(bucket)
        self._last_ps = now
        if len(rows) >= _CHUNK:
            self._pack()

    def _pack(self) -> None:
        """Move the pending rows into a block."""
        rows = self._rows
        if rows:
            block = np.fromiter(rows, np.int64, len(rows)).reshape(-1, len(SERIES_COLUMNS))
            self._times.append(block[:, 0].copy())
            self._counts.append(block[:, 1:].astype(np.intc))
            self._packed += len(block)
            rows.clear()

    def _unpack_last(self) -> None:
        """Take the last packed row back into the pending ones (to replace it); the block
        it leaves is a shorter view, the arrays handed out stay as they were."""
        times, counts = self._times[-1], self._counts[-1]
        self._rows.extend((int(times[-1]), *(int(c) for c in counts[-1])))
        self._times[-1], self._counts[-1] = times[:-1], counts[:-1]
        self._packed -= 1

    def __len__(self) -> int:
        return self._packed + len(self._rows) // len(SERIES_COLUMNS)

    def _joined(self) -> None:
        """Every row in one block each of times and counts."""
        self._pack()
        if len(self._times) > 1:
            self._times = [np.concatenate(self._times)]
            self._counts = [np.concatenate(self._counts)]

    def times(self) -> NDArray[np.int64]:
        """Each row's time (ps)."""
        self._joined()
        return self._times[0] if self._times else _EMPTY

    def counts(self) -> NDArray[np.intc]:
        """Each row's waiting, prefilling, decoding and decode bucket: (rows, 4)."""
        self._joined()
        return self._counts[0] if self._counts else _EMPTY_COUNTS

    def as_array(self) -> NDArray[np.int64]:
        """The rows as a (rows, 5) int64 array (a copy)."""
        rows = np.empty((len(self), len(SERIES_COLUMNS)), dtype=np.int64)
        rows[:, 0] = self.times()
        rows[:, 1:] = self.counts()
        return rows


_COUNTS = len(SERIES_COLUMNS) - 1
_CHUNK = 4096 * len(SERIES_COLUMNS)  # pending items packed at once (4,096 rows)
_EMPTY: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
_EMPTY_COUNTS: NDArray[np.intc] = np.zeros((0, _COUNTS), dtype=np.intc)
