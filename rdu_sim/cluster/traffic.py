"""A cluster's requests: a trace replayed (filtered, windowed, scaled) or a synthetic mix.

Order of the trace steps, each counted in ``TrafficSummary`` so nothing disappears unseen: rows that
are failed requests in the trace (``skipped``), ``filter`` (column equals value), the time window
``[start, end)`` on the trace's own clock, then the first ``requests`` by arrival. Requests are
numbered by arrival, not by row: rows out of time order are counted (``out_of_order``) and each
request keeps its line in the file (``trace_lines``, the ``trace_line`` column of requests.csv), so
outputs join back to the trace. Arrival times are then shifted to start at the window's start and
multiplied by ``time_scale``. Synthetic traffic draws prompt lengths, output lengths and Poisson
gaps, in that order, from ``numpy.random.default_rng(traffic.seed)``.

Requests longer than the cluster's context limit are never dropped silently: :func:`fit_context`
marks them rejected, or truncates them, and both are counted.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim.cluster.scenario import ClusterScenario
from rdu_sim.config import shipped
from rdu_sim.config.cluster import ClassesConfig, TrafficConfig
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.overrides import overridden, setting_origin
from rdu_sim.serving.requests import cut_to_context, draw_lengths
from rdu_sim.serving.traces.published import Blocks, read_table, trace_problem
from rdu_sim.serving.traces.table import TraceTable, out_of_order
from rdu_sim.serving.traces.values import column_text


@dataclass(frozen=True)
class TrafficSummary:
    """Where the requests came from and how many each step kept."""

    source: str  # 'synthetic' or the trace format
    rows: int  # requests in the trace (or drawn)
    skipped: int = 0  # trace rows that were failed requests (zero tokens)
    filtered_out: int = 0
    outside_window: int = 0
    beyond_limit: int = 0  # cut by traffic.requests
    # kept rows that arrive before a row above them in the file: requests are numbered by
    # arrival, so request i is then not the trace's i-th row (``trace_line`` says which)
    out_of_order: int = 0

    def to_dict(self) -> dict[str, Any]:
        """For the run's JSON (``out_of_order_rows`` only when some row is: the JSON of a
        sorted trace, every published one, is unchanged by its addition)."""
        out: dict[str, Any] = {
            "source": self.source,
            "rows": self.rows,
            "skipped_failed_rows": self.skipped,
            "filtered_out": self.filtered_out,
            "outside_window": self.outside_window,
            "beyond_limit": self.beyond_limit,
        }
        if self.out_of_order:
            out["out_of_order_rows"] = self.out_of_order
        return out


@dataclass(frozen=True)
class ClusterRequests:
    """Requests by id (= arrival order): arrival times, lengths, block hashes, class labels."""

    arrival_s: NDArray[np.float64]
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    hash_offsets: NDArray[np.int64] | None = None
    hash_values: NDArray[np.int64] | None = None
    columns: dict[str, NDArray[np.object_]] = field(default_factory=dict)
    summary: TrafficSummary = field(default_factory=lambda: TrafficSummary("synthetic", 0))
    trace_lines: NDArray[np.int64] | None = None  # each request's line in its trace file

    def __len__(self) -> int:
        return int(self.prompt_tokens.shape[0])

    @property
    def has_hashes(self) -> bool:
        """Whether requests carry block hashes (a prefix cache needs them)."""
        return self.hash_offsets is not None

    def hashes(self, request: int) -> Sequence[int]:
        """The block hashes of a request's prompt (empty without hashes)."""
        if self.hash_offsets is None or self.hash_values is None:
            return ()
        start, stop = self.hash_offsets[request], self.hash_offsets[request + 1]
        return self.hash_values[start:stop].tolist()  # type: ignore[no-any-return]


def _select(
    table: TraceTable, keep: NDArray[np.int64], arrival: NDArray[np.float64]
) -> ClusterRequests:
    offsets = values = None
    if table.hash_offsets is not None and table.hash_values is not None:
        starts, stops = table.hash_offsets[keep], table.hash_offsets[keep + 1]
        lengths = stops - starts
        offsets = np.zeros(len(keep) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        values = table.hash_values[index]
    return ClusterRequests(
        arrival_s=arrival,
        prompt_tokens=table.prompt_tokens[keep],
        output_tokens=table.output_tokens[keep],
        hash_offsets=offsets,
        hash_values=values,
        columns={name: column[keep] for name, column in table.columns.items()},
        trace_lines=table.lines[keep] if table.lines is not None else None,
    )


def replay(table: TraceTable, traffic: TrafficConfig, file: str) -> ClusterRequests:
    """Filter, window, limit and scale a trace (see the module docstring for the order)."""
    keep = np.ones(len(table), dtype=np.bool_)
    for column, value in traffic.filter.items():
        if column not in table.columns:
            valid = ", ".join(sorted(table.columns)) or "none"
            raise ConfigError.single(
                file,
                f"traffic.filter.{column}",
                f"the {table.format} trace has no column {column!r} to filter on (columns "
                f"besides arrival and lengths: {valid})",
            )
        keep &= table.columns[column] == column_text(value)  # as the reader keeps it
    filtered_out = int(len(table) - keep.sum())
    arrival = table.arrival_s
    in_window = np.ones_like(keep)
    if traffic.start is not None:
        in_window &= arrival >= traffic.start
    if traffic.end is not None:
        in_window &= arrival < traffic.end
    outside = int((keep & ~in_window).sum())
    keep &= in_window
    index = np.flatnonzero(keep)
    in_file_order = arrival[index]
    unordered = out_of_order(in_file_order)
    index = index[np.argsort(in_file_order, kind="stable")]
    limit = traffic.requests if traffic.requests is not None else len(index)
    beyond = max(0, len(index) - limit)
    index = index[:limit].astype(np.int64)
    if len(index) == 0:
        raise ConfigError.single(
            file,
            "traffic",
            "no request of the trace is left after filter and window",
            blame=("traffic.trace", "traffic.filter", "traffic.start", "traffic.end"),
        )
    scaled = (arrival[index] - (traffic.start or 0.0)) * traffic.time_scale
    requests = _select(table, index, scaled)
    summary = TrafficSummary(
        table.format, len(table), table.skipped, filtered_out, outside, beyond, unordered
    )
    return replace(requests, summary=summary)


def synthetic(traffic: TrafficConfig) -> ClusterRequests:
    """Poisson arrivals at ``traffic.rate`` with lengths drawn from the two distributions."""
    assert traffic.prompt_tokens is not None and traffic.output_tokens is not None
    assert traffic.rate is not None and traffic.requests is not None
    rng = np.random.default_rng(traffic.seed)
    n = traffic.requests
    prompt = draw_lengths(traffic.prompt_tokens, n, rng)
    output = draw_lengths(traffic.output_tokens, n, rng)
    arrival = np.cumsum(rng.exponential(1.0 / traffic.rate, size=n))
    return ClusterRequests(arrival, prompt, output, summary=TrafficSummary("synthetic", n))


def _setting(cluster: ClusterScenario, field: str) -> str:
    """Where a cluster field's value came from, for a message about it:
    ``prefix_cache.block_tokens of cluster.yaml`` or ``..., from --set ...``."""
    return setting_origin(field, cluster.file, cluster.overrides)


def load_traffic(cluster: ClusterScenario) -> ClusterRequests:
    """The requests a cluster file describes (a trace path is relative to the file). A trace
    that is no readable file is refused at ``traffic.trace`` (what is wrong, and ``(from
    --set traffic.trace)`` when an override named it); with a prefix cache, each row's
    ``hash_ids`` must fit ``prefix_cache.block_tokens`` (``traces.reader.blocks_problem``).
    A filter or window that leaves nothing, or names no column, says the override that set
    it, as every overridden field does."""
    traffic, file = cluster.config.traffic, cluster.file
    if traffic.trace is None:
        return synthetic(traffic)
    path = shipped.trace_path(cluster.base_dir, traffic.trace)
    problem = trace_problem(path)
    if problem is not None:
        error = cluster.issue("traffic.trace", f"trace file {str(path)!r}: {problem}")
        raise overridden(error, file, cluster.overrides)
    prefix = cluster.config.prefix_cache
    blocks = None
    if prefix is not None:
        blocks = Blocks(prefix.block_tokens, _setting(cluster, "prefix_cache.block_tokens"))
    named_by = _setting(cluster, "traffic.format")
    table = read_table(path, traffic.format, blocks=blocks, named_by=named_by)
    try:
        return replay(table, traffic, file)
    except ConfigError as exc:  # a filter or window an override set: say which
        raise overridden(exc, file, cluster.overrides) from None


@dataclass(frozen=True)
class ContextFit:
    """Requests after the context limit: which were rejected and which truncated, and the
    prompt and output tokens the truncation took."""

    requests: ClusterRequests
    rejected: NDArray[np.bool_]
    truncated: NDArray[np.bool_]
    prompt_tokens_cut: int = 0
    output_tokens_cut: int = 0


def fit_context(requests: ClusterRequests, max_context: int, mode: str) -> ContextFit:
    """Requests whose prompt plus output exceed ``max_context`` (a slot holds the whole
    sequence) are rejected, or truncated as a lone workload would (``cut_to_context``)."""
    prompt, output = requests.prompt_tokens, requests.output_tokens
    over = prompt + output > max_context
    none = np.zeros_like(over)
    if mode == "reject" or not over.any():
        return ContextFit(requests, over if mode == "reject" else none, none)
    cut = cut_to_context(prompt, output, max_context)
    fitted = replace(requests, prompt_tokens=cut.prompt_tokens, output_tokens=cut.output_tokens)
    return ContextFit(fitted, none, cut.over, cut.prompt_tokens_cut, cut.output_tokens_cut)


@dataclass(frozen=True)
class ClassLabels:
    """Each request's class, and the classes in report order (length buckets by length,
    column values alphabetically)."""

    values: NDArray[np.object_]
    names: tuple[str, ...]


def class_labels(
    requests: ClusterRequests, classes: ClassesConfig | None, file: str
) -> ClassLabels | None:
    """Each request's class (None without classes): a length bucket such as
    ``prompt_tokens<1024`` / ``1024<=prompt_tokens<8192`` / ``prompt_tokens>=8192``, or the
    value of a trace column."""
    if classes is None:
        return None
    if classes.by == "column":
        assert classes.column is not None
        if classes.column not in requests.columns:
            valid = ", ".join(sorted(requests.columns)) or "none"
            raise ConfigError.single(
                file,
                "classes.column",
                f"the trace has no column {classes.column!r} (columns besides arrival and "
                f"lengths: {valid})",
            )
        column = requests.columns[classes.column]
        return ClassLabels(column, tuple(sorted({str(v) for v in column.tolist()})))
    values = requests.prompt_tokens if classes.by == "prompt_tokens" else requests.output_tokens
    edges = classes.edges
    names = [f"{classes.by}<{edges[0]}"]
    names += [f"{low}<={classes.by}<{high}" for low, high in itertools.pairwise(edges)]
    names.append(f"{classes.by}>={edges[-1]}")
    bucket = np.searchsorted(np.asarray(edges), values, side="right")
    return ClassLabels(np.asarray(names, dtype=np.object_)[bucket], tuple(names))
