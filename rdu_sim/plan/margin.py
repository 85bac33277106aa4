"""How far a run met or missed its SLO, in requests, and whether a miss is conclusive.

A run's attainment is a share of ``n`` requests, so a replica count whose attainment lands
near the target can fall either side of it for reasons that have nothing to do with its
capacity (which requests happen to meet a discrete batch boundary): the plan has seen 3
replicas meet 0.99 of 400 requests, 4 miss it by one request, 5 meet it. The search
(``plan.search``) therefore trusts a miss to exclude every smaller count only when it is
**conclusive**: its shortfall in requests exceeds two binomial standard errors of an
attainment at the target over the run's ``n`` requests, ``2 sqrt(a (1 - a) n)`` (``a`` the
target attainment), and never less than one request (``MIN_NOISE``): the two-standard-error
rule with a floor of one request. A smaller shortfall is within sampling noise:
*inconclusive*, so the search keeps the count just below it open. The floor keeps the rule
from degenerating where the error vanishes: at ``a = 1`` it is 0, at ``n = 10`` and
``a = 0.99`` 0.63 requests, so missing by the one request a discrete batch boundary can
move would otherwise be conclusive (3 replicas meeting 1.0 of 400, 4 missing it by one).

Counts in requests: ``needed`` is the fewest requests meeting the SLO for the run to meet it
(``met / n >= a``, as the cluster's goodput counts it), ``met`` those that did.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rdu_sim.config.cluster import SLOConfig

STANDARD_ERRORS = 2.0
"""A miss is conclusive when it falls short by more than this many standard errors."""

MIN_NOISE = 1.0
"""A conclusive miss also falls short by more than this many requests: one by a single
request never is."""


def needed(attainment: float, requests: int) -> int:
    """The fewest requests meeting both targets for ``met / requests >= attainment``."""
    k = math.ceil(attainment * requests)
    while k > 0 and (k - 1) / requests >= attainment:  # ceil of a float product can be high
        k -= 1
    while k < requests and k / requests < attainment:
        k += 1
    return k


def noise(attainment: float, requests: int) -> float:
    """The sampling noise of an attainment at the target, in requests: ``STANDARD_ERRORS``
    binomial standard errors, ``2 sqrt(a (1 - a) n)``, at least ``MIN_NOISE``."""
    spread = STANDARD_ERRORS * math.sqrt(attainment * (1.0 - attainment) * requests)
    return max(spread, MIN_NOISE)


@dataclass(frozen=True)
class Margin:
    """One run against the SLO in requests: ``by`` is met minus needed (negative: missed)."""

    requests: int
    met: int
    needed: int
    noise: float  # requests

    @property
    def by(self) -> int:
        return self.met - self.needed

    @property
    def conclusive(self) -> bool | None:
        """Whether a miss is by more than its sampling noise; None for a met run (no miss
        to judge: its JSON says null)."""
        return None if self.by >= 0 else -self.by > self.noise

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "met": self.met,
            "needed": self.needed,
            "by": self.by,
            "noise_requests": self.noise,
            "conclusive": self.conclusive,
            "words": self.words(),
        }

    def words(self) -> str:
        """``met with 4 of 400 requests to spare`` or ``missed by 1 of 400 requests, inconclusive
        (within 2 standard errors of the attainment or one request, 4.0 requests)``."""
        if self.by >= 0:
            counts = f"{self.met:,} met, {self.needed:,} needed"
            return f"met with {self.by} of {self.requests:,} requests to spare ({counts})"
        verdict = "conclusive" if self.conclusive else "inconclusive"
        within = "beyond" if self.conclusive else "within"
        return (
            f"missed by {-self.by} of {self.requests:,} requests, {verdict} ({within} "
            f"{STANDARD_ERRORS:g} standard errors of the attainment or one request, "
            f"{self.noise:.1f} requests)"
        )


def margin(metrics: Mapping[str, Any], slo: SLOConfig) -> Margin | None:
    """A run's margin; None for an evaluation that stored no request counts (a database
    written before they were kept: its misses count as conclusive, the former rule)."""
    requests, met = metrics.get("requests"), metrics.get("goodput_requests")
    if requests is None or met is None or int(requests) <= 0:
        return None
    n = int(requests)
    return Margin(n, int(met), needed(slo.attainment, n), noise(slo.attainment, n))


def conclusive_miss(metrics: Mapping[str, Any], slo: SLOConfig) -> bool:
    """Whether a run that missed the SLO excludes every smaller replica count."""
    found = margin(metrics, slo)
    return found is None or found.conclusive is True
