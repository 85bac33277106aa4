"""The requests of a run: prompt and output lengths, and open-loop arrival times.

All randomness comes from one ``numpy.random.default_rng(serving.seed)`` made here, drawn in
a fixed order (prompt lengths, then output lengths, then inter-arrival gaps), so the same
workload gives the same requests in any process, and nothing global is touched.

Lengths are clipped so a request fits one slot (documented in docs/serving.md):
``prompt <= max_context - 1`` (at least 1) and ``output <= max_context - prompt`` (at
least 1), i.e. ``prompt + output <= max_context``; how many were cut, and how many prompt
and output tokens the cut took, is counted (``cut_to_context``: ``requests_truncated`` and
``prompt_tokens_truncated`` and ``output_tokens_truncated`` in the run's report), and a run
that cut a tenth of its requests or more warns (``truncation_words``). The last output
token comes from the last decode step, whose cache holds ``prompt + output - 1`` tokens,
so every cache the run builds fits ``max_context``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim.config import shipped
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.workload import (
    CoEConfig,
    FixedLength,
    LognormalLength,
    ServingConfig,
    UniformLength,
)
from rdu_sim.serving.clock import MAX_ARRIVAL_S
from rdu_sim.serving.traces import read_trace
from rdu_sim.serving.traces.table import out_of_order
from rdu_sim.sim_warnings import RduSimWarning

Length = FixedLength | UniformLength | LognormalLength


@dataclass(frozen=True)
class RequestSet:
    """Requests as parallel arrays, indexed by request id (submission order)."""

    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    arrival_s: NDArray[np.float64] | None  # open-loop arrival times (sorted); None: closed loop
    concurrency: int | None  # closed-loop users; None for open-loop arrivals
    # the trace's acceptance column (speculative decoding), in request order; None: no column
    trace_acceptance: NDArray[np.float64] | None = None
    # the trace's expert column (Composition of Experts), in request order; None: no column
    trace_expert: NDArray[np.int64] | None = None
    # requests whose prompt + output exceeded serving.max_context, cut to fit a slot
    truncated: int = 0
    # the prompt and output tokens those cuts took (asked for, never served)
    prompt_tokens_cut: int = 0
    output_tokens_cut: int = 0
    # the longest prompt + output a cut request asked for (0: none was cut)
    longest_cut: int = 0
    # the replayed trace's rows (those used) that arrive before a row above them: the run
    # replays them by arrival (``traces.table.out_of_order``; 0 without a replay)
    out_of_order: int = 0

    def __len__(self) -> int:
        return int(self.prompt_tokens.shape[0])

    @property
    def closed_loop(self) -> bool:
        """True when each user submits its next request as the previous one completes."""
        return self.arrival_s is None


def draw_lengths(dist: Length, n: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """``n`` lengths from a distribution: fixed, uniform integers on [low, high], or lognormal
    with the given median and log-space sigma, rounded and clipped to [low, high]."""
    if isinstance(dist, FixedLength):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.low, dist.high + 1, size=n, dtype=np.int64)
    draws = dist.median * np.exp(dist.sigma * rng.standard_normal(n))
    return np.clip(np.rint(draws), dist.low, dist.high).astype(np.int64)


def typical_length(dist: Length) -> int:
    """The median of a length distribution (the workload's "typical" length, for prefill_s)."""
    if isinstance(dist, FixedLength):
        return dist.value
    if isinstance(dist, UniformLength):
        return (dist.low + dist.high) // 2
    return int(min(max(round(dist.median), dist.low), dist.high))


def clip_to_context(
    prompt: NDArray[np.int64], output: NDArray[np.int64], max_context: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Clip lengths so ``prompt + output <= max_context`` (both at least 1)."""
    prompt = np.clip(prompt, 1, max(1, max_context - 1))
    output = np.clip(output, 1, None)
    output = np.maximum(1, np.minimum(output, max_context - prompt))
    return prompt.astype(np.int64), output.astype(np.int64)


class ShortTraceWarning(RduSimWarning):
    """``serving.requests`` asks for more requests than the run's trace holds."""


def short_trace_words(serving: ServingConfig, served: int) -> str | None:
    """What to tell a reader when the workload sets ``serving.requests`` above the ``served``
    rows its trace holds (the run serves those: a sweep over the count would repeat one
    run); None when it does not, or leaves the count at its default."""
    if serving.trace is None or "requests" not in serving.model_fields_set:
        return None
    if serving.requests <= served:
        return None
    return (
        f"serving.requests asks for {serving.requests:,} requests; the trace "
        f"{serving.trace} holds {served:,}: the run serves those {served:,}"
    )


@dataclass(frozen=True)
class ContextCut:
    """Lengths cut to fit a slot of ``max_context`` tokens (``clip_to_context``), which
    requests were cut, and the prompt and output tokens the cut took."""

    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    over: NDArray[np.bool_]
    prompt_tokens_cut: int
    output_tokens_cut: int
    longest: int  # the longest prompt + output a cut request asked for (0: none was cut)


def cut_to_context(
    prompt: NDArray[np.int64], output: NDArray[np.int64], max_context: int
) -> ContextCut:
    """The requests whose prompt + output exceed ``max_context``, cut to fit, and what the
    cut took (a lone run and a cluster's ``truncate`` count it the same way)."""
    clipped_prompt, clipped_output = clip_to_context(prompt, output, max_context)
    asked = prompt + output
    over = asked > max_context
    return ContextCut(
        clipped_prompt,
        clipped_output,
        over,
        int(np.maximum(prompt - clipped_prompt, 0).sum()),
        int(np.maximum(output - clipped_output, 0).sum()),
        int(asked[over].max()) if over.any() else 0,
    )


TRUNCATED_SHARE = 0.1
"""The share of a run's requests cut to fit ``serving.max_context`` from which the run
warns (``truncation_words``). Below it the report's ``requests truncated`` row says the cut:
a distribution's tail past the context (a lognormal's) clips a few requests by design, and a
warning on every such run would teach readers to skip warnings; from a tenth on, the traffic
served is no longer the traffic asked for."""


class TruncatedRequestsWarning(RduSimWarning):
    """A large share of a run's requests (``TRUNCATED_SHARE``) longer than
    ``serving.max_context``, cut to fit a slot."""


def truncation_words(requests: RequestSet, max_context: int) -> str | None:
    """What a run whose requests were cut to the context (``TRUNCATED_SHARE`` of them or
    more) is told: how many, from what to what, and what to change; None below the share.
    The one rule for a run's report (``report.summary.run_warnings``) and ``rdu-sim check``,
    which draws the same requests."""
    cut, total = requests.truncated, len(requests)
    if not cut or cut < TRUNCATED_SHARE * total:
        return None
    return (
        f"{cut:,} of {total:,} requests ({cut / total:.0%}) ask for more than "
        f"serving.max_context ({max_context:,} tokens, prompt + output; up to "
        f"{requests.longest_cut:,} asked) and were cut to fit, "
        f"{requests.prompt_tokens_cut:,} prompt and {requests.output_tokens_cut:,} output "
        f"tokens not served: the run measures shorter requests than the workload's; raise "
        f"serving.max_context (to {requests.longest_cut:,} to serve them whole) or shorten "
        "the prompts and outputs"
    )


def trace_experts(coe: CoEConfig | None) -> int | None:
    """The bound a trace's ``expert`` column is read against (``traces.read_trace``):
    ``coe.experts`` when a Composition of Experts' popularity reads it (``{dist: trace}``),
    else None (the column, if any, is then unused)."""
    return coe.experts if coe is not None and coe.popularity.dist == "trace" else None


def make_requests(
    serving: ServingConfig,
    batch_slots: int,
    base_dir: Path | str = ".",
    workload_file: str = "",
    overrides: Mapping[str, Any] | None = None,
    coe: CoEConfig | None = None,
) -> RequestSet:
    """The run's requests from the serving config (distributions or a trace file; a
    Composition of Experts' ``coe`` bounds the trace's expert column: ``trace_experts``).

    With a trace, the first ``serving.requests`` rows are used (all of them if fewer), and
    ``poisson`` arrivals replay the trace's ``arrival_s`` (``arrival.rate`` is then unused);
    closed-loop and all-at-once arrivals ignore ``arrival_s``. Closed-loop users default to
    the batch slots.
    """
    rng = np.random.default_rng(serving.seed)
    process = serving.arrival.process
    arrival: NDArray[np.float64] | None
    acceptance: NDArray[np.float64] | None = None
    experts: NDArray[np.int64] | None = None
    unordered = 0
    if serving.trace is not None:
        path = shipped.trace_path(base_dir, serving.trace)
        trace = read_trace(
            path,
            workload_file,
            serving.requests,
            serving.trace_format,
            overrides,
            trace_experts(coe),
        )
        n = min(serving.requests, len(trace))
        prompt = trace.prompt_tokens[:n]
        output = trace.output_tokens[:n]
        if trace.acceptance is not None:
            acceptance = trace.acceptance[:n]
        if trace.expert is not None:
            experts = trace.expert[:n]
        if process == "poisson":
            if trace.arrival_s is None:
                raise ConfigError.single(
                    workload_file,
                    "serving.arrival.process",
                    f"poisson arrivals with trace {serving.trace!r} need "
                    "an arrival_s column (or use closed_loop)",
                )
            unordered = out_of_order(trace.arrival_s[:n])
            order = np.argsort(trace.arrival_s[:n], kind="stable")
            arrival, prompt, output = trace.arrival_s[:n][order], prompt[order], output[order]
            acceptance = None if acceptance is None else acceptance[order]
            experts = None if experts is None else experts[order]
        else:
            arrival = None
    else:
        n = serving.requests
        prompt = draw_lengths(serving.prompt_tokens, n, rng)
        output = draw_lengths(serving.output_tokens, n, rng)
        arrival = None
        if process == "poisson":
            rate = serving.arrival.rate
            assert rate is not None  # the config validator requires it
            arrival = np.cumsum(rng.exponential(1.0 / rate, size=n))
            if n and not arrival[-1] <= MAX_ARRIVAL_S:
                raise ConfigError.single(
                    workload_file,
                    "serving.arrival.rate",
                    f"{n} requests at {rate:.4g}/s arrive over {arrival[-1]:.4g} s, beyond "
                    f"{MAX_ARRIVAL_S:.4g} s, the latest arrival the serving clock can hold "
                    "(docs/serving.md); raise the rate or lower serving.requests",
                )
    if process == "all_at_once":
        arrival = np.zeros(n, dtype=np.float64)
    cut = cut_to_context(prompt, output, serving.max_context)
    prompt, output = cut.prompt_tokens, cut.output_tokens
    concurrency = None
    if process == "closed_loop":
        concurrency = serving.arrival.concurrency or batch_slots
        arrival = None
    return RequestSet(
        prompt,
        output,
        arrival,
        concurrency,
        acceptance,
        experts,
        int(cut.over.sum()),
        cut.prompt_tokens_cut,
        cut.output_tokens_cut,
        cut.longest,
        unordered,
    )


PROMPT_SAMPLES = 200_000
"""Draws of the prompt distribution used to find its median compressed prompt."""


def typical_compressed_length(
    serving: ServingConfig, slot_tokens: int, base_dir: Path | str = ".", source: str = "workload"
) -> int | None:
    """The workload's typical compressed prompt: the median of its prompt lengths above
    ``slot_tokens`` (a compressing policy's budget), clipped to the context; None when no
    prompt of the distribution is that long (``prompts_past``).

    A prompt no longer than the slot is not compressed, so its prefill is identical with
    and without compression; the cost of compressing shows only on longer ones.
    """
    past = prompts_past(serving, slot_tokens, base_dir, source)
    return None if past is None else past[0]


def prompts_past(
    serving: ServingConfig, slot_tokens: int, base_dir: Path | str = ".", source: str = "workload"
) -> tuple[int, float] | None:
    """The workload's prompts longer than ``slot_tokens``, clipped to the context: (their
    median, their share of all prompts); None when no prompt of the distribution is that
    long. Taken over a large seeded sample of the distribution (or the trace's rows), so a
    short run and a long one measure the same prompts."""
    if serving.trace is not None:
        prompts = make_requests(serving, 1, base_dir, source).prompt_tokens
    else:
        rng = np.random.default_rng(serving.seed)
        prompts = draw_lengths(serving.prompt_tokens, PROMPT_SAMPLES, rng)
    prompts, _ = clip_to_context(prompts, np.ones_like(prompts), serving.max_context)
    long = prompts[prompts > slot_tokens]
    if long.shape[0] == 0:
        return None
    return int(np.median(long)), long.shape[0] / prompts.shape[0]


def typical_prompt(serving: ServingConfig, prompts: NDArray[np.int64]) -> int:
    """The workload's typical prompt, the one the report's ``prefill_s`` times: the
    distribution's median (a trace's median row), clipped to the context."""
    if serving.trace is not None:
        prompt = int(np.median(prompts)) if len(prompts) else 1
    else:
        prompt = typical_length(serving.prompt_tokens)
    clipped, _ = clip_to_context(np.asarray([prompt]), np.asarray([1]), serving.max_context)
    return int(clipped[0])
