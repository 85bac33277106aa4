"""Why a configuration meets its SLO or not: which half binds, and what would move it.

An SLO has two halves, TTFT and TPOT; a request meets it when it meets both, and the cluster
when a share ``attainment`` of all requests does. For each half this reads two views of one
configuration, both stored with every plan evaluation (``half_metrics``):

- the **run** at some replica count: the share of requests within the half's target and
  the half's value at the attainment quantile (the tightest target the run would meet);
- the **floors** (``plan.floors``): the same for each request served alone, which no
  replica count lowers.

The **stop rule** (``stop_rule``): when the floors already miss the SLO, more replicas of
the configuration cannot meet it, so its search stops there. The half that binds is the one
whose floors miss (both when each does, or when neither does alone but together they do).
Where the floors pass, the binding half of a run is the one nearer its target (``binding``).

What would move a half depends on why it binds (``Verdict.moves``): a floor is one step,
moved by a faster step (more tp, unless the links bind it; more of the resource that binds
it: ``report.bound``),
a smaller one (fewer batch slots, a KV policy that keeps fewer tokens, shorter prompts) or
a looser target; a run above its floors waits (queueing, prefills holding decode steps),
moved by more replicas, disaggregation and, for a TPOT, chunked prefill only where the stack
carries decode rows in its prefill steps (``stack.mixed_batching``: a stack that runs
prefill steps alone makes its decoding sequences wait for every chunk, so chunking cuts
one wait into several, no shorter in sum); where attention ranks step in lockstep and
other ranks' prefills hold at least half of the TPOT above its floor, disaggregation
first; where prefill and decode are already apart, more replicas of the side that waits
and, for the TPOT, a faster KV link (for the TTFT, the decode side first when most of the
prefill queueing waited behind prefilled requests holding their slots until a decode slot
freed: ``prefill_queue_decode_share``, ``report.cluster.prefill_queueing``). A run's TPOT
whose floor (one decode step) is over half of its value (``step_most``: the step is then
the larger part of each token's time, more than all the waiting together) is moved first
by a shorter step: fewer batch slots or more tp, said with both numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rdu_sim import human
from rdu_sim.config.cluster import SLOConfig
from rdu_sim.report.bound import RESOURCES, remedy_words, resource_words

HALVES = ("ttft", "tpot")
NAMES = {"ttft": "TTFT", "tpot": "TPOT"}


def value_at(values: NDArray[np.float64], attainment: float) -> float:
    """The smallest target that a share ``attainment`` of ``values`` meets (``<=``), as the
    cluster's goodput counts it: ``met / total >= attainment``."""
    n = len(values)
    if n == 0:
        return 0.0
    k = max(1, math.ceil(attainment * n))
    while k > 1 and (k - 1) / n >= attainment:  # ceil of a float product can be one high
        k -= 1
    return float(np.partition(values, k - 1)[k - 1])


def half_metrics(
    ttft_s: NDArray[np.float64], tpot_s: NDArray[np.float64], slo: SLOConfig, prefix: str = ""
) -> dict[str, float | None]:
    """Per half, the share of requests within target and the value at the attainment
    quantile (None when that request was never served); and the share meeting both.
    Requests: ``inf`` for one never served, TPOT ``0`` (or NaN) where a request has no TPOT
    (one output token)."""
    tpot = np.nan_to_num(tpot_s, nan=0.0)
    n = max(1, len(ttft_s))
    ttft_ok, tpot_ok = ttft_s <= slo.ttft, tpot <= slo.tpot
    return {
        f"{prefix}ttft_attainment": float(np.count_nonzero(ttft_ok)) / n,
        f"{prefix}tpot_attainment": float(np.count_nonzero(tpot_ok)) / n,
        f"{prefix}attainment": float(np.count_nonzero(ttft_ok & tpot_ok)) / n,
        f"{prefix}ttft_at_attainment_s": _finite(value_at(ttft_s, slo.attainment)),
        f"{prefix}tpot_at_attainment_s": _finite(value_at(tpot, slo.attainment)),
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class Verdict:
    """One binding half: its value at the attainment quantile against its target, the share
    of requests within it, whether it binds alone (a floor: replicas cannot help), and what
    would move it, most direct first."""

    half: str  # ttft | tpot
    alone: bool
    value_s: float
    target_s: float
    share: float
    attainment: float
    moves: tuple[str, ...]

    @property
    def name(self) -> str:
        return NAMES[self.half]

    @property
    def quantile(self) -> str:
        """The attainment as a percentile's name (p95)."""
        return f"p{human.number(self.attainment * 100)}"

    def value(self) -> str:
        """The value at the quantile in words ("never served": requests rejected for their
        length miss every target)."""
        return human.duration(self.value_s) if math.isfinite(self.value_s) else "never served"

    def short(self) -> str:
        """A table cell: the binding metric and its value."""
        where = " alone" if self.alone else ""
        relation = ">" if self.value_s > self.target_s else "<="
        return (
            f"{self.name} binds: {self.quantile}{where} {self.value()} "
            f"{relation} {human.duration(self.target_s)}"
        )

    def sentence(self) -> str:
        """The verdict in words, with what would move it."""
        if self.alone:
            head = (
                f"{self.name} binds: {human.percent(1 - self.share)} of requests miss "
                f"{human.duration(self.target_s)} even served alone ({self.quantile} "
                f"{self.value()}), so no number of replicas meets it"
            )
        else:
            head = (
                f"{self.name} binds: {human.percent(self.share)} of requests within "
                f"{human.duration(self.target_s)} ({self.quantile} {self.value()})"
            )
        return f"{head}. What would move it: {'; '.join(self.moves)}" if self.moves else head

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the fields (``value_s`` None when never served) and the sentence."""
        value = self.value_s if math.isfinite(self.value_s) else None
        return {
            **asdict(self),
            "value_s": value,
            "moves": list(self.moves),
            "sentence": self.sentence(),
        }


def _step(metrics: Mapping[str, Any], half: str) -> str:
    """The floor step of a half at the attainment quantile, with what binds it, in
    parentheses (nothing when the evaluation has none)."""
    words = _step_words(metrics, half)
    return f" ({words})" if words else ""


def _step_words(metrics: Mapping[str, Any], half: str) -> str:
    """``a decode step of 32 slots at 2,048 cached tokens takes 30.8 ms, bound by ...``."""
    seconds = metrics.get(f"{half}_step_s")
    if seconds is None:
        return ""
    bound = metrics.get(f"{half}_step_bound")
    if half == "ttft":
        tokens, bucket = metrics.get("ttft_step_tokens", 0), metrics.get("ttft_step_bucket")
        padded = f" (run at its {bucket:,}-token bucket)" if bucket and bucket != tokens else ""
        what = f"a prefill of {tokens:,} tokens{padded} alone takes"
    else:
        what = (
            f"a decode step of {metrics.get('tpot_step_batch', 0):,} slots at "
            f"{metrics.get('tpot_step_context', 0):,} cached tokens takes"
        )
    label = metrics.get(f"{half}_step_label", "bound by")  # report.bound.bound_label
    link = str(metrics.get(f"{half}_step_link", ""))
    term = str(metrics.get(f"{half}_step_link_term", ""))
    by = f", {label} {resource_words(bound, link, term)}" if bound in RESOURCES else ""
    return f"{what} {human.duration(float(seconds))}{by}"


def step_most(metrics: Mapping[str, Any]) -> tuple[float, float] | None:
    """A run's TPOT floor and value at the attainment quantile when the floor (one decode
    step) is over half of the value: the step is the larger part of each token's time, so
    a shorter step moves the TPOT more than any end to waiting could. None otherwise, or
    without floors."""
    value = metrics.get("tpot_at_attainment_s")
    floor = metrics.get("floor_tpot_at_attainment_s")
    if not value or floor is None or not float(floor) > float(value) / 2:
        return None
    return float(floor), float(value)


def _mixes(metrics: Mapping[str, Any]) -> bool | None:
    """Whether the decoding pool's prefill steps carry its decode rows (the stack's
    ``mixed_batching``); None for an evaluation stored before it was kept."""
    mixed = metrics.get("mixed_batching")
    return None if mixed is None else bool(mixed)


def _chunked(because: str, mixes: bool | None) -> tuple[str, ...]:
    """Chunked prefill as a TPOT lever: only where prefill steps carry the decode rows."""
    if mixes is False:  # prefill steps run alone: every chunk holds the decoding sequences
        return ()
    where = "" if mixes else ", if the stack mixes prefill and decode (stack.mixed_batching)"
    return (f"chunked prefill (serving.prefill_chunk_tokens: {because}{where})",)


def moves(
    metrics: Mapping[str, Any], half: str, alone: bool, attainment: float | None = None
) -> tuple[str, ...]:
    """What would move a binding half (module docstring), most direct first; ``attainment``
    names the quantile a run's TPOT is read at (``p95``)."""
    bound = str(metrics.get(f"{half}_step_bound"))
    faster = remedy_words(
        bound,
        str(metrics.get(f"{half}_step_link", "")),
        str(metrics.get(f"{half}_step_link_term", "")),
    )
    step = _step(metrics, half)
    # A step the links bind sends about as many bytes a socket at any tp (an all-reduce's
    # 2 (p - 1) / p of its message): more tp does not shorten it.
    more_tp = bound != "link"
    if alone and half == "ttft":
        first = (
            (f"more tp{step}", f"a faster prefill ({faster})")
            if more_tp
            else (f"a faster prefill ({faster}){step}",)
        )
        return (
            *first,
            "shorter prompts (speculative prefill, a prefix cache)",
            _looser(metrics, half),
        )
    if alone:
        return (
            f"fewer batch slots or more tp{step}" if more_tp else f"fewer batch slots{step}",
            f"a faster decode step ({faster})",
            "fewer bytes a step (a KV policy keeping fewer tokens, smaller dtypes)",
            _looser(metrics, half),
        )
    if metrics.get("disaggregated"):  # (prefill replicas never wait on decode steps)
        if half == "ttft":
            prefill = (
                "more prefill replicas (a larger P in the P:D split: prompts queue for one)",
                "chunked prefill (serving.prefill_chunk_tokens: a long prompt stops holding "
                "the queue)",
            )
            held = metrics.get("prefill_queue_decode_share")
            if held is None or float(held) <= 0.5:
                return prefill
            return (  # prefill slots held by prefilled requests the decode pool cannot take
                "more decode replicas or decode batch slots (a larger D in the P:D split: "
                f"{human.percent(float(held))} of the prefill queueing waited behind "
                "prefilled requests holding their prefill slots until a decode slot freed)",
                *prefill,
            )
        return (
            *_shorter_step(metrics, more_tp, attainment),
            "more decode replicas (a larger D in the P:D split: a prefilled request waits "
            "for a decode slot, inside its TPOT)",
            "a faster KV link (kv_transfer: the cache's transfer is inside the TPOT)",
        )
    if half == "ttft":
        return (
            "more replicas (requests queue for a slot)",
            "chunked prefill (serving.prefill_chunk_tokens: a long prompt stops holding the queue)",
            "disaggregated prefill (prefill replicas never wait on decode steps)",
        )
    mixes = _mixes(metrics)
    shorter = _shorter_step(metrics, more_tp, attainment)
    held = _lockstep_hold(metrics)
    if held is not None:  # ranks in lockstep: every rank's prefill holds every rank's decode
        return (
            *shorter,
            f"disaggregation (decode replicas never prefill: here {human.percent(held)} of "
            "the attention ranks' decoding time waits in joint steps holding another rank's "
            "prefill)",
            *_chunked("shorter holds, as many", mixes),
            "more replicas (fewer prefills per replica)",
        )
    return (
        *shorter,
        *_chunked("decode steps ride along with prefill chunks", mixes),
        "disaggregation (decode replicas never prefill)",
        "more replicas (fewer prefills per replica)",
    )


def _shorter_step(
    metrics: Mapping[str, Any], more_tp: bool, attainment: float | None
) -> tuple[str, ...]:
    """A run's TPOT lever when one decode step is over half of it (``step_most``): a
    shorter step, with the step's time and the run's TPOT."""
    most = step_most(metrics)
    if most is None:
        return ()
    floor, value = most
    at = "" if attainment is None else f"p{human.number(attainment * 100)} "
    words = _step_words(metrics, "tpot") or f"one decode step takes {human.duration(floor)}"
    return (
        f"{'fewer batch slots or more tp' if more_tp else 'fewer batch slots'} (one decode "
        f"step is over half of the TPOT: {words}, of the run's {at}{human.duration(value)})",
    )


def _lockstep_hold(metrics: Mapping[str, Any]) -> float | None:
    """The share of decoding time held by other ranks' prefills (attention ranks in
    lockstep), when it accounts for at least half of the run's TPOT above its floor."""
    held = metrics.get("lockstep_prefill_held_share")
    value = metrics.get("tpot_at_attainment_s")
    floor = metrics.get("floor_tpot_at_attainment_s")
    if not held or not value or floor is None:
        return None
    above = 1.0 - float(floor) / float(value)  # the share of the TPOT above its floor
    return float(held) if above > 0 and held >= above / 2 else None


def _looser(metrics: Mapping[str, Any], half: str) -> str:
    """The loosest target the floors would meet for this half."""
    value = metrics.get(f"floor_{half}_at_attainment_s")
    if value is None:
        return "fewer requests rejected for their length (a longer serving.max_context)"
    return f"a {NAMES[half]} target of at least {human.duration(float(value))}"


def _has_floors(metrics: Mapping[str, Any]) -> bool:
    return metrics.get("floor_attainment") is not None


def stop_rule(metrics: Mapping[str, Any], slo: SLOConfig) -> list[Verdict]:
    """The halves no replica count can meet, from one evaluation's floors; empty when more
    replicas might still meet the SLO (or the evaluation has no floors)."""
    if not _has_floors(metrics) or float(metrics["floor_attainment"]) >= slo.attainment:
        return []
    missing = [h for h in HALVES if float(metrics[f"floor_{h}_attainment"]) < slo.attainment]
    halves = missing or list(HALVES)  # each half alone passes, both together do not
    return [_verdict(metrics, slo, h, alone=True) for h in halves]


def binding(metrics: Mapping[str, Any], slo: SLOConfig, *, advise: bool = True) -> list[Verdict]:
    """The binding half (or halves) of one evaluation: the floors' when they miss; else the
    halves whose share is below the attainment, or, when both meet it, the one nearer its
    target. ``advise=False``: no moves (a lone run measures no floors, and without them
    whether more replicas would help is not known)."""
    stopped = stop_rule(metrics, slo)
    if stopped:
        return stopped
    if metrics.get("ttft_attainment") is None:
        return []
    missing = [h for h in HALVES if float(metrics[f"{h}_attainment"]) < slo.attainment]
    if missing:
        return [_verdict(metrics, slo, h, alone=False, advise=advise) for h in missing]
    targets = {"ttft": slo.ttft, "tpot": slo.tpot}
    nearest = max(HALVES, key=lambda h: _seconds(metrics[f"{h}_at_attainment_s"]) / targets[h])
    return [_verdict(metrics, slo, nearest, alone=False, advise=advise)]


def _verdict(
    metrics: Mapping[str, Any], slo: SLOConfig, half: str, *, alone: bool, advise: bool = True
) -> Verdict:
    prefix = "floor_" if alone else ""
    return Verdict(
        half=half,
        alone=alone,
        value_s=_seconds(metrics.get(f"{prefix}{half}_at_attainment_s")),
        target_s=slo.ttft if half == "ttft" else slo.tpot,
        share=float(metrics[f"{prefix}{half}_attainment"]),
        attainment=slo.attainment,
        moves=moves(metrics, half, alone, slo.attainment) if advise else (),
    )


def _seconds(value: Any) -> float:
    return math.inf if value is None else float(value)


def short(verdicts: Sequence[Verdict]) -> str:
    """The verdicts as one table cell."""
    return "; ".join(v.short() for v in verdicts)
