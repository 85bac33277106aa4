"""The serving time series: one packed row of state counts per instant with a change.

Written by the scheduler at each decision (two rows a request), read by the reports
(``report.summary``) as NumPy views.
"""

from __future__ import annotations

from array import array

import numpy as np
from numpy.typing import NDArray

SERIES_COLUMNS = ("time_ps", "waiting", "prefilling", "decoding", "decode_bucket")
"""Time-series row: after the change at ``time_ps``, requests waiting in the queue, slots
prefilling (chunked prompts in progress), slots decoding, and the decode bucket of the last
decode step (0 before any)."""


class SeriesLog:
    """Time-series rows (``SERIES_COLUMNS``), one per instant: a change at the same
    picosecond as the last row replaces it (the states in between last no time, so no time
    average or occupancy sees them). Packed in two growing buffers, the times as int64 and
    the four counts as C ints: 24 bytes a row where a list of tuples took ~120 a row and two
    rows an instant (a million DeepSeek-R1 requests keep ~48 MB). ``times`` and ``counts``
    are views, not copies."""

    def __init__(self) -> None:
        self._times = array("q")
        self._counts = array("i")
        self._last_ps = -1
        # rows not yet packed: (time, waiting, prefilling, decoding, bucket) flat, moved into
        # the buffers a chunk at a time (an item written to an ``array`` is a parsed call)
        self._rows: list[int] = []
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
        """Move the pending rows into the buffers (new ones when a view holds the old)."""
        rows = self._rows
        if not rows:
            return
        times = rows[0 :: len(SERIES_COLUMNS)]
        del rows[0 :: len(SERIES_COLUMNS)]
        try:
            self._times.extend(times)
        except BufferError:  # a view is alive: go on in buffers of our own
            self._times = array("q", self._times)
            self._counts = array("i", self._counts)
            self._times.extend(times)
        try:
            self._counts.extend(rows)
        except BufferError:
            self._counts = array("i", self._counts)
            self._counts.extend(rows)
        rows.clear()

    def _unpack_last(self) -> None:
        """Take the last packed row back into the pending ones (to replace it)."""
        times, counts = self._times, self._counts
        self._rows.extend((times[-1], *counts[-_COUNTS:]))
        try:
            del times[-1]
        except BufferError:  # a view is alive: a shorter copy
            self._times = array("q", times[:-1])
        try:
            del counts[-_COUNTS:]
        except BufferError:
            self._counts = array("i", counts[:-_COUNTS])

    def __len__(self) -> int:
        return len(self._times) + len(self._rows) // len(SERIES_COLUMNS)

    def times(self) -> NDArray[np.int64]:
        """Each row's time (ps), a view of the buffer."""
        self._pack()
        return np.frombuffer(self._times, dtype=np.int64) if self._times else _EMPTY

    def counts(self) -> NDArray[np.intc]:
        """Each row's waiting, prefilling, decoding and decode bucket: a (rows, 4) view."""
        self._pack()
        flat = np.frombuffer(self._counts, dtype=np.intc) if self._counts else _EMPTY_COUNTS
        return flat.reshape(-1, _COUNTS)

    def as_array(self) -> NDArray[np.int64]:
        """The rows as a (rows, 5) int64 array (a copy)."""
        rows = np.empty((len(self), len(SERIES_COLUMNS)), dtype=np.int64)
        rows[:, 0] = self.times()
        rows[:, 1:] = self.counts()
        return rows


_COUNTS = len(SERIES_COLUMNS) - 1
_CHUNK = 4096 * len(SERIES_COLUMNS)  # pending items packed at once (4,096 rows)
_EMPTY: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
_EMPTY_COUNTS: NDArray[np.intc] = np.zeros(0, dtype=np.intc)
