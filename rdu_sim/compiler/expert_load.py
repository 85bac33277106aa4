"""The load on whole experts per device: which device holds which expert (and its copies), and
the busiest device's share of a MoE layer's token-expert pairs, which the layer waits for.

From the workload's ``experts`` section (``config.experts``): each expert's share of the
pairs (``popularity``), a placement of the experts and their redundant copies on the ``ep``
devices (``place``: in order, or a load balancer's: copies to the experts with the most
tokens per copy, then the heaviest copy first onto the least loaded device with a free slot,
never two copies of an expert on one device while another has room), and for a step's tokens
the busiest device's expected pairs and the expected largest number of copies the tokens
touch on one device, whose weights it reads (``ExpertLoadModel.load``). A copy takes an
equal share of its expert's tokens. The balance (busiest over mean) is in the step's JSON
(``expert_balance``).
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass
from statistics import NormalDist

from rdu_sim.config.experts import CountsLoad, ExpertsConfig, ZipfLoad


@dataclass(frozen=True)
class ExpertLoad:
    """The busiest device's share of a MoE layer's routed work: its token-expert pairs and
    the most copies the tokens touch on one device (whose weights it reads; every copy read
    takes at least one of its pairs)."""

    pairs: float  # token-expert pairs on the busiest device
    mean_pairs: float  # on an average device
    distinct: float  # the most copies the pairs touch on one device (weights it reads)

    @property
    def imbalance(self) -> float:
        """Busiest over mean: how much longer than balanced the layer's experts take."""
        return self.pairs / self.mean_pairs if self.mean_pairs else 1.0

    def to_dict(self) -> dict[str, float]:
        """JSON-safe dict (the step JSON's ``expert_balance``)."""
        return {
            "busiest_pairs": self.pairs,
            "mean_pairs": self.mean_pairs,
            "imbalance": self.imbalance,
            "busiest_experts_read": self.distinct,
        }


def expected_max_normal(draws: int) -> float:
    """The expected largest of ``draws`` standard normal draws (Blom's approximation:
    Phi^-1((n - 0.375) / (n + 0.25)); 0 for one draw)."""
    if draws <= 1:
        return 0.0
    return NormalDist().inv_cdf((draws - 0.375) / (draws + 0.25))


def popularity(config: ExpertsConfig, experts: int) -> tuple[float, ...]:
    """Each expert's share of the token-expert pairs (summing to 1)."""
    load = config.load
    if isinstance(load, ZipfLoad):
        ranks = list(range(experts))
        random.Random(load.seed).shuffle(ranks)  # which expert gets which rank
        weights = [1.0 / (rank + 1) ** load.exponent for rank in ranks]
    elif isinstance(load, CountsLoad):
        assert load.counts is not None  # a file is read into counts when the workload loads
        weights = list(load.counts)
    else:
        weights = [1.0] * experts
    total = sum(weights)
    return tuple(w / total for w in weights)


Device = tuple[tuple[int, float], ...]
"""One device's copies: (expert, its share of all pairs)."""


def place(
    shares: tuple[float, ...], devices: int, redundant: int, balanced: bool
) -> tuple[Device, ...]:
    """The experts and ``redundant`` copies on ``devices`` devices, ``(E + redundant) /
    devices`` each (module docstring)."""
    experts = len(shares)
    slots = (experts + redundant) // devices
    if not balanced:
        return tuple(
            tuple((e, shares[e]) for e in range(d * slots, (d + 1) * slots)) for d in range(devices)
        )
    copies = [1] * experts
    for _ in range(redundant):  # the next copy to the most tokens per copy (ties: lowest id)
        hottest = max(range(experts), key=lambda e: (shares[e] / copies[e], -e))
        copies[hottest] += 1
    items = sorted(
        ((shares[e] / copies[e], e) for e in range(experts) for _ in range(copies[e])),
        key=lambda item: (-item[0], item[1]),
    )
    held: list[list[tuple[int, float]]] = [[] for _ in range(devices)]
    loads = [0.0] * devices
    for share, expert in items:
        free = [d for d in range(devices) if len(held[d]) < slots]
        apart = [d for d in free if all(e != expert for e, _ in held[d])] or free
        target = min(apart, key=lambda d: (loads[d], d))
        held[target].append((expert, share))
        loads[target] += share
    return tuple(tuple(device) for device in held)


@dataclass(frozen=True)
class ExpertLoadModel:
    """A stage's whole experts: their placement on its devices, the routing, the tokens."""

    devices: tuple[Device, ...]
    experts: int
    per_token: int
    ranks: int  # attention ranks whose tokens the experts serve together (dp_attention)
    loading: str  # graph.moe's ExpertLoading: routed | static | all

    def load(self, rows: int, joint_tokens: int = 0) -> ExpertLoad:
        """The busiest device's pairs when every rank runs ``rows`` tokens (or, given
        ``joint_tokens``, when the ranks send that many together: ranks running different
        shapes, ``StepShape.joint_tokens``): the larger of the hottest device's expected
        pairs and an average device's plus the expected largest of its random spread over
        the devices (a sum of the tokens' hypergeometric counts, its maximum over ``D``
        devices by Blom's normal approximation); at least one pair once there is one, at
        most every pair a device's copies can take. Remembered (`_load`): a step's
        compile asks for one shape's load ~6 times, each from a model of equal fields."""
        return _load(self, rows, joint_tokens)

    def _compute_load(self, rows: int, joint_tokens: int) -> ExpertLoad:
        """`load`, computed."""
        tokens = joint_tokens or rows * self.ranks
        count = len(self.devices)
        pairs = tokens * self.per_token
        mean = pairs / count
        expected = [pairs * sum(share for _, share in device) for device in self.devices]
        per = self.experts / count
        share = per / self.experts
        variance = (self.per_token * share * (1 - share) * (self.experts - self.per_token)) / max(
            1, self.experts - 1
        )
        spread = mean + math.sqrt(tokens * variance) * expected_max_normal(count)
        hottest = max(range(count), key=lambda d: (expected[d], -d))
        held = len(self.devices[hottest])
        touched = self._touched(tokens)
        routed = touched if self.loading == "routed" else 0.0  # each read copy has a pair
        busiest = min(
            max(expected[hottest], spread, min(1.0, pairs), routed),
            tokens * min(self.per_token, held),
        )
        return ExpertLoad(busiest, mean, touched)

    def _touched(self, tokens: int) -> float:
        """The copies the busiest device reads: every one it holds (a static program
        streaming all), all a static gather may touch (its slots, at most the tokens'
        pairs), or routed, the expected largest count of copies touched over the devices
        (``busiest_touched``): the layer waits for the device reading the most expert
        weights, not for an average one."""
        held = max(len(d) for d in self.devices)
        if self.loading == "all":
            return float(held)
        if self.loading == "static":
            return float(min(held, tokens * self.per_token))
        return busiest_touched(self.devices, self.per_token, tokens)


@functools.lru_cache(maxsize=4096)
def _load(model: ExpertLoadModel, rows: int, joint_tokens: int) -> ExpertLoad:
    """``model.load(rows, joint_tokens)``: a function of its (frozen, hashable) arguments,
    so kept per process (a DeepSeek-R1 model's ~6 asks a step cost ~0.3 ms each)."""
    return model._compute_load(rows, joint_tokens)


def hit_probability(per_token_share: float, tokens: int) -> float:
    """The chance that ``tokens`` tokens touch a copy one token picks with probability
    ``per_token_share`` (k x its share): 1 - (1 - p)^tokens; certain when p reaches 1 (a
    copy so popular that every token picks it)."""
    if per_token_share >= 1.0:
        return 1.0 if tokens > 0 else 0.0
    return -math.expm1(tokens * math.log1p(-per_token_share))


def touched_distribution(device: Device, per_token: int, tokens: int) -> tuple[float, ...]:
    """P(the tokens touch exactly c of ``device``'s copies), c = 0..len(device): each copy
    missed by a token with probability 1 - k x its share (``graph.moe``'s expected distinct
    experts, copy by copy), copies taken as independent (a Poisson-binomial count)."""
    counts = [1.0]
    for _, share in device:
        hit = hit_probability(per_token * share, tokens)
        counts = [
            (counts[c] if c < len(counts) else 0.0) * (1 - hit)
            + (counts[c - 1] * hit if c >= 1 else 0.0)
            for c in range(len(counts) + 1)
        ]
    return tuple(counts)


def busiest_touched(devices: tuple[Device, ...], per_token: int, tokens: int) -> float:
    """The expected largest number of copies ``tokens`` tokens touch on any one device:
    sum over c of P(max > c), with P(max <= c) the product of the devices' own
    probabilities (devices taken as independent). DeepSeek's group-limited routing, which
    crowds one token's experts into few groups, is not in it: at a handful of tokens the
    busiest device reads a little more than this (tests/test_expert_load.py)."""
    if tokens <= 0:
        return 0.0
    at_most: dict[tuple[float, ...], list[float]] = {}
    for device in devices:  # devices of equal shares share one distribution
        shares = tuple(share for _, share in device)
        if shares not in at_most:
            probabilities = touched_distribution(device, per_token, tokens)
            at_most[shares] = [sum(probabilities[: c + 1]) for c in range(len(probabilities))]
    products = [1.0] * (max(len(d) for d in devices) + 1)
    for device in devices:
        cumulative = at_most[tuple(share for _, share in device)]
        for c in range(len(products)):
            products[c] *= cumulative[min(c, len(cumulative) - 1)]
    return sum(1.0 - product for product in products[:-1])


def expert_load_model(
    config: ExpertsConfig, experts: int, per_token: int, devices: int, ranks: int, loading: str
) -> ExpertLoadModel:
    """The placement and load model of ``experts`` whole over ``devices`` devices (one
    object for equal models, `_interned`)."""
    shares = popularity(config, experts)
    placed = place(shares, devices, config.redundant, config.placement == "balanced")
    return _interned(ExpertLoadModel(placed, experts, per_token, ranks, loading))


@functools.lru_cache(maxsize=64)
def _interned(model: ExpertLoadModel) -> ExpertLoadModel:
    """The first of the models equal to ``model`` still kept: `_load` keeps a model in each
    key, so one object, not one per step compiled (each ~300 placed copies, ~15 MiB over
    cluster-h100-lockstep's 1,560 steps)."""
    return model
