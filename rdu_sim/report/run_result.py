"""A serving run as the report reads it: metrics, per-request columns, time series, shapes.

:class:`RunResult` is the :class:`~rdu_sim.serving.run.ServingRun` that ``rdu_sim.api.run``
returns, with the report's views of it: ``to_dict()`` (the JSON contract of ``rdu-sim run
--json``, see docs/serving.md) of its typed ``summary()``, ``requests()``, ``timeseries()``
and ``step_shapes()``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

from numpy.typing import NDArray

from rdu_sim.report.files import ROWS_PER_BLOCK
from rdu_sim.report.summary import (
    RunSummary,
    request_columns,
    run_warnings,
    series_columns,
    summarize,
)
from rdu_sim.serving.run import ServingRun
from rdu_sim.sim_warnings import RduSimWarning, warn

__all__ = ["RunResult"]


@dataclass(frozen=True, eq=False)
class RunResult(ServingRun):
    """Everything a run produced (a ServingRun), and the report's views of it; compared and
    hashed by identity, as a ServingRun is (compare two runs' ``to_json()``)."""

    @classmethod
    def of(cls, run: ServingRun) -> RunResult:
        """The report's view of a serving run."""
        return cls(**{f.name: getattr(run, f.name) for f in fields(ServingRun)})

    @cached_property
    def _summary(self) -> RunSummary:
        return summarize(self)

    def summary(self) -> RunSummary:
        """The run's metrics, typed (computed once): a copy of its own each call, so editing
        one (its dicts, its lists) changes nothing of a later ``to_dict()`` or ``summary()``."""
        return copy.deepcopy(self._summary)

    def warnings(self) -> list[RduSimWarning]:
        """The run's warnings (its report's ``warnings``: ``report.summary.run_warnings``),
        each of its class and naming the workload file."""
        return [
            type(found)(f"{self.scenario.workload_file}: {found}")
            for found in run_warnings(self, self._summary.speculation)
        ]

    def warn(self) -> None:
        """The run's ``warnings`` as Python warnings, attributed to the first line outside
        rdu-sim (``sim_warnings.warn``: ``api.run``'s caller)."""
        for message in self.warnings():
            warn(message)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (see docs/serving.md): metrics, memory, identity."""
        return self._summary.to_dict()

    def to_json(self, indent: int | None = 2) -> str:
        """``to_dict`` as JSON: sorted keys, byte-identical for identical inputs."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=indent)

    def requests(self) -> dict[str, NDArray[Any]]:
        """Per-request columns: ids, lengths, slot, arrival/admit/first-token/finish times,
        queue delay, TTFT, TPOT, end-to-end latency (seconds); new arrays each call."""
        return request_columns(self.records)

    def request_blocks(self, rows: int = ROWS_PER_BLOCK) -> Iterator[dict[str, NDArray[Any]]]:
        """``requests()`` a block of ``rows`` requests at a time (what ``--out`` writes
        ``requests.csv`` from: a million requests never hold every column at once)."""
        total = len(self.records)
        for start in range(0, max(total, 1), rows):
            yield request_columns(self.records, slice(start, start + rows))

    def timeseries(self) -> dict[str, NDArray[Any]]:
        """State after each change: waiting, prefilling, decoding, occupied, occupancy,
        decode bucket, by ``time_s``."""
        return series_columns(self.records, self.batch_slots)

    def step_shapes(self) -> list[dict[str, Any]]:
        """Every simulated shape with its step time and how many steps ran it (a mixed step:
        the decode rows it carried, 0 otherwise)."""
        shapes = sorted(
            self.cache.steps.items(),
            key=lambda i: (
                i[0].phase,
                i[0].tokens,
                i[0].cache_len,
                i[0].decode_batch,
                i[0].decode_cache_len,
            ),
        )
        return [
            {
                "phase": shape.phase,
                "batch": shape.batch,
                "tokens": shape.tokens,
                "cache_len": shape.cache_len,
                "decode_batch": shape.decode_batch,
                "decode_cache_len": shape.decode_cache_len,
                "step_s": self.cache.step_s(shape),
                "steps": count,
            }
            for shape, count in shapes
        ]
