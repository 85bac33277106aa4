"""How many distinct routed experts a batch touches: the expected value and a seeded sampler.

A MoE layer reads the weights of every expert at least one token of the step is routed to.
With `tokens` tokens each choosing `k` distinct experts out of `E`, and routing modelled as
uniform (each token's k experts a uniformly random k-subset, tokens independent), an expert
is missed by one token with probability 1 - k/E, so

    expected distinct = E * (1 - (1 - k/E) ** tokens).

One token touches exactly k experts; a large batch touches all E. DeepSeek-V3's
group-limited routing (each token's experts come from `groups_per_token` of the
`expert_groups` groups) is ignored: it changes which experts one token picks, not the
uniform marginal k/E of each expert, and across tokens the chosen groups vary, so the
union over a batch is close to the uniform model. Real routers are skewed (popular
experts), which lowers the distinct count at mid-size batches; the uniform model is the
upper bound, so weight traffic is not under-estimated.

How many experts a step *streams* is a property of the compiled graph
(`moe_expert_loading` in the workload, `experts_loaded`):
- routed: the graph gathers exactly the touched experts (a data-dependent trip count), the
  expected value above;
- static: a static graph fixes its loop bounds at compile time, and the number of distinct
  experts is data-dependent, so a static compiler has two schedules: gather the worst case,
  min(E, tokens * k) expert slots, after the router (``static``), or stream every expert
  (``all``). While tokens * k < E the compiler compiles the step both ways, times both
  on the scenario's engine and keeps the faster, a tie the gather
  (`compiler.expert_schedule`: no threshold); from tokens * k = E on they are the same
  (every expert once a decode batch has E / k = 32 slots for DeepSeek-V3).

While a step streams fewer than all experts, *which* ones is known only once the router has
run (`experts_data_dependent`): those weight loads cannot be prefetched across the routing
point (the engine holds them until the router's layer is done). A step that streams every
expert knows its addresses at compile time and prefetches them like any weight, behind the
layer's work before the router. So the gather reads fewer bytes and the full stream hides
them: at batch 1 the gather wins (8 of 256 experts); near tokens * k = E the full stream
does (DeepSeek-R1 on SN40L-16 at 31 slots: 248 gathered after the router 50.5 ms a step,
256 prefetched 38.0 ms).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np

ExpertLoading = Literal["routed", "static", "all"]
"""How a graph streams its routed experts: ``routed`` and ``static`` as a workload's
``moe_expert_loading`` says (``static``: the gather of min(E, tokens * k) slots), ``all`` the
static schedule that streams every expert, which the compiler may choose for ``static``
(`static_schedule`)."""

DEFAULT_EXPERT_LOADING: ExpertLoading = "routed"
"""The graph builders' expert loading when a caller gives none (a workload always gives
its ``moe_expert_loading``, whose default is the same: tests/test_graph_moe.py checks it)."""


def expected_distinct_experts(tokens: int, experts: int, per_token: int) -> float:
    """E * (1 - (1 - k/E)^tokens): the expected number of experts `tokens` tokens touch."""
    if tokens < 0 or experts < 1 or not 1 <= per_token <= experts:
        raise ValueError(
            f"need tokens >= 0 and 1 <= per_token <= experts; got tokens={tokens}, "
            f"experts={experts}, per_token={per_token}"
        )
    if tokens == 0:
        return 0.0
    if per_token == experts:
        return float(experts)
    return experts * -math.expm1(tokens * math.log1p(-per_token / experts))


def static_schedule(loading: ExpertLoading, every: bool) -> ExpertLoading:
    """The graphs' expert loading for a workload's ``loading`` when the compiler streams
    every expert (``every``: ``all`` in place of the static gather) or not; routed loading
    has no such choice."""
    return "all" if every and loading == "static" else loading


def experts_loaded(tokens: int, experts: int, per_token: int, loading: ExpertLoading) -> float:
    """Experts whose weights a step streams: the expected touched ones (routed), the static
    worst case min(E, tokens * k) (static) or every one (all)."""
    touched = expected_distinct_experts(tokens, experts, per_token)
    if loading == "routed":
        return touched
    if loading == "static":
        return float(min(experts, tokens * per_token))
    if loading == "all":
        return float(experts)
    raise ValueError(f"moe_expert_loading must be 'routed' or 'static', got {loading!r}")


def experts_data_dependent(
    tokens: int, experts: int, per_token: int, loading: ExpertLoading
) -> bool:
    """Whether which experts a step streams depends on the routing (fewer than all of them),
    so that their weight loads must wait for the router: always when routed (unless every
    token takes every expert), with the static gather while ``tokens * k < E``, never when
    streaming all."""
    return experts_loaded(tokens, experts, per_token, loading) < experts


def sample_distinct_experts(
    rng: np.random.Generator, tokens: int, experts: int, per_token: int, chunk: int = 4096
) -> int:
    """Distinct experts touched when each of `tokens` tokens routes to `per_token` random ones.

    Each token draws a uniformly random `per_token`-subset of the `experts` (the `per_token`
    smallest of i.i.d. uniform keys). Tokens are drawn `chunk` at a time and the sampling
    stops once every expert is touched, so huge prefill batches cost little. Deterministic
    for a given generator state.
    """
    import numpy as np  # here: building a graph needs no numpy (the CLI's start)

    expected_distinct_experts(tokens, experts, per_token)  # validates the arguments
    touched = np.zeros(experts, dtype=bool)
    remaining = tokens
    while remaining > 0 and not touched.all():
        n = min(chunk, remaining)
        keys = rng.random((n, experts))
        chosen = np.argpartition(keys, per_token - 1, axis=1)[:, :per_token]
        touched[chosen.ravel()] = True
        remaining -= n
    return int(touched.sum())


def expected_busiest_socket_experts(selected: int, experts: int, sockets: int) -> float:
    """Expected selected experts on the socket holding the most of them, with whole experts
    placed E/sockets per socket (expert parallelism) and the selected set a uniformly random
    `selected`-subset of the `experts`: E[max] = sum over c of P(max > c), where P(max <= c)
    counts the subsets with at most c on every socket, the coefficient of x^selected in
    (sum_{j<=c} C(E/sockets, j) x^j)^sockets over C(E, selected). Exact (integer counts)."""
    if sockets < 1 or experts % sockets or not 0 <= selected <= experts:
        raise ValueError(
            f"need experts divisible by sockets and 0 <= selected <= experts; got "
            f"selected={selected}, experts={experts}, sockets={sockets}"
        )
    per_socket = experts // sockets
    subsets = math.comb(experts, selected)
    expected = 0.0
    for cap in range(per_socket):
        factor = [math.comb(per_socket, j) for j in range(min(cap, selected) + 1)]
        ways = [1]  # coefficients of the product over the sockets so far, up to x^selected
        for _ in range(sockets):
            ways = [
                sum(ways[i - j] * factor[j] for j in range(len(factor)) if 0 <= i - j < len(ways))
                for i in range(min(len(ways) + len(factor) - 1, selected + 1))
            ]
        within = ways[selected] if selected < len(ways) else 0
        expected += 1 - within / subsets
    return expected


def token_hit_probability(
    block: int, experts: int, per_token: int, groups: int = 1, groups_per_token: int = 1
) -> float:
    """The probability that one token's ``per_token`` experts include at least one of a
    block of ``block`` consecutive experts (those on a device, or on a node, experts
    numbered device by device).

    Routing is uniform within DeepSeek's group limit: a token picks ``groups_per_token`` of
    the ``groups`` groups (``experts / groups`` consecutive experts each) at random, then its
    experts as a random ``per_token``-subset of the picked groups' experts. A block inside one
    group is hit when its group is picked and a pick lands in it; a block of whole groups
    when some of its groups are picked (hypergeometric) and a pick lands in them. A block
    aligned with neither is taken as uniform over all experts (the group limit ignored)."""
    if not 1 <= per_token <= experts or not 0 <= block <= experts:
        raise ValueError(
            f"need 1 <= per_token <= experts and 0 <= block <= experts; got block={block}, "
            f"experts={experts}, per_token={per_token}"
        )
    if block == 0:
        return 0.0
    size = experts // groups if groups > 1 and experts % groups == 0 else experts
    picked = groups_per_token * size  # experts a token chooses among
    if size == experts or per_token > picked:
        return 1 - math.comb(experts - block, per_token) / math.comb(experts, per_token)
    if size % block == 0:  # the block inside one group
        miss = math.comb(picked - block, per_token) / math.comb(picked, per_token)
        return groups_per_token / groups * (1 - miss)
    if block % size == 0:  # whole groups
        mine = block // size
        total = math.comb(groups, groups_per_token)
        missed = 0.0
        for chosen in range(min(mine, groups_per_token) + 1):
            ways = math.comb(mine, chosen) * math.comb(groups - mine, groups_per_token - chosen)
            if ways:
                missed += (
                    ways
                    / total
                    * (math.comb(picked - chosen * size, per_token) / math.comb(picked, per_token))
                )
        return 1 - missed
    return 1 - math.comb(experts - block, per_token) / math.comb(experts, per_token)
