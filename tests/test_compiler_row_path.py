"""A row's longest path through a kernel's stages, and the PCU spread that minimises it."""

from __future__ import annotations

import math
import random

import pytest

from rdu_sim.compiler.allocation import (
    StageWork,
    allocate,
    chain_time,
    path_spread,
    water_fill,
)
from rdu_sim.compiler.row_path import RowGraph

# 0 a norm (holds its row); 1 a GEMM fed whole (streams); 2 a norm streaming beside 1 (holds);
# 3 after 2's row: one row takes t0 + max(t1, t2) + t3, series-parallel.
BRANCHED = RowGraph(((), (0,), (1,), (2,)), (True, False, True, True))


def _paths(graph: RowGraph) -> list[frozenset[int]]:
    """Every path's stages, by walking the event graph (start and finish of each stage:
    s_i -> f_i carries t_i; a holding producer's f_p -> s_i, a streaming one's s_p -> s_i
    and f_p -> f_i), from any start to any finish."""
    n = len(graph.holds)
    succ: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for i in range(n):
        succ.setdefault(("s", i), []).append(("f", i))
        for p in graph.inputs[i]:
            if graph.holds[p]:
                succ.setdefault(("f", p), []).append(("s", i))
            else:
                succ.setdefault(("s", p), []).append(("s", i))
                succ.setdefault(("f", p), []).append(("f", i))
    found: set[frozenset[int]] = set()

    def walk(node: tuple[str, int], stages: frozenset[int]) -> None:
        if node[0] == "f":
            found.add(stages)
        for nxt in succ.get(node, []):
            walk(nxt, stages | {node[1]} if node[0] == "s" and nxt[0] == "f" else stages)

    for i in range(n):
        walk(("s", i), frozenset())
    return sorted(found, key=sorted)


def _random_graph(rng: random.Random, n: int) -> RowGraph:
    inputs = tuple(
        tuple(sorted(rng.sample(range(i), rng.randint(1 if i else 0, min(i, 2))))) for i in range(n)
    )
    return RowGraph(inputs, tuple(rng.random() < 0.5 for _ in range(n)))


def _numeric_optimum(
    compute: list[float], graph: RowGraph, budget: int, floors: list[int], rows: int
) -> float:
    """min of chain_time over real PCUs, by SLSQP on the convex form: stage times t_i, each
    term of chain_time (a path's times over ``rows`` plus the rest times one stage's) at
    most T, sum c_i / t_i <= budget, t_i <= c_i / floor_i."""
    from scipy.optimize import minimize

    n = len(compute)
    scale = sum(compute) / budget  # times near 1, so that SLSQP's tolerances mean something
    compute = [c / scale for c in compute]
    terms = [
        [(1.0 / rows if i in path else 0.0) + (1.0 - 1.0 / rows) * (i == j) for i in range(n)]
        for path in _paths(graph)
        for j in range(n)
    ]
    times = [c / p for c, p in zip(compute, water_fill(compute, budget, floors), strict=True)]
    start = [*times, max(sum(a * t for a, t in zip(term, times, strict=True)) for term in terms)]
    result = minimize(
        lambda x: x[-1],
        start,
        method="SLSQP",
        bounds=[*((1e-12, c / f) for c, f in zip(compute, floors, strict=True)), (0.0, None)],
        constraints=[
            {
                "type": "ineq",
                "fun": lambda x: budget - sum(c / t for c, t in zip(compute, x[:-1], strict=True)),
            },
            *(
                {
                    "type": "ineq",
                    "fun": lambda x, a=a: (
                        x[-1] - sum(w * t for w, t in zip(a, x[:-1], strict=True))
                    ),
                }
                for a in terms
            ),
        ],
        options={"ftol": 1e-10, "maxiter": 1000},
    )
    # what its times cost, made feasible (scaled to spend at most the budget; SLSQP may stop
    # a little outside, or report a line search it could not finish at the optimum)
    times = [max(t, c / budget) for t, c in zip(result.x[:-1], compute, strict=True)]
    over = max(1.0, sum(c / t for c, t in zip(compute, times, strict=True)) / budget)
    times = [t * over for t in times]
    return scale * max(sum(a * t for a, t in zip(term, times, strict=True)) for term in terms)


def test_a_chain_adds_and_streams_overlap() -> None:
    chain = RowGraph(((), (0,), (1,)), (True, True, True))
    assert chain.path([1.0, 2.0, 4.0]) == 7.0
    assert BRANCHED.path([1.0, 2.0, 3.0, 4.0]) == 1.0 + 3.0 + 4.0
    assert BRANCHED.longest([1.0, 5.0, 3.0, 4.0]) == (10.0, [True, True, False, True])
    # every stage streaming: one row takes the slowest stage's time
    assert RowGraph(((), (0,), (1,)), (False,) * 3).path([1.0, 3.0, 2.0]) == 3.0
    with pytest.raises(ValueError, match="not earlier stages"):
        RowGraph(((1,), ()), (True, True))


def test_series_parallel_spread_is_exact() -> None:
    """Series members split by sqrt(c), parallel ones (1 and 2) in proportion to c: with
    c = 1, (3 | 1), 9 the roots are 1, 2, 3, so 600 PCUs go 100, (150 | 50), 300 and one
    row takes 36 / 600."""
    compute = [1.0, 3.0, 1.0, 9.0]
    spread = path_spread(compute, BRANCHED, 600, [1] * 4)
    assert spread == pytest.approx([100.0, 150.0, 50.0, 300.0], rel=1e-3)
    work = [StageWork(compute=c) for c in compute]
    common = dict(pmus=4, pmu_bytes=1.0, pmu_bandwidth=1.0, memory_time=0.0, chain_rows=1)
    alloc = allocate(work, pcus=600, graph=BRANCHED, **common)  # type: ignore[arg-type]
    assert alloc.pcus == (100, 150, 50, 300)
    assert chain_time(compute, alloc.pcus, 1, BRANCHED) == pytest.approx(0.06)
    # the chain's square-root spread, which counts stage 2 in series, is 7% slower
    chained = allocate(work, pcus=600, **common).pcus  # type: ignore[arg-type]
    assert chained == (89, 154, 89, 268)
    assert chain_time(compute, chained, 1, BRANCHED) > 1.07 * 0.06


def test_path_matches_every_path_enumerated() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 7)
        graph = _random_graph(rng, n)
        times = [rng.choice([0.0, rng.random()]) for _ in range(n)]
        length, on = graph.longest(times)
        assert length == pytest.approx(max(sum(times[i] for i in p) for p in _paths(graph)))
        assert sum(t for t, o in zip(times, on, strict=True) if o) == pytest.approx(length)


@pytest.mark.parametrize("seed", range(12))
def test_path_spread_reaches_the_numeric_optimum(seed: int) -> None:
    """On small random stage graphs (streaming and holding stages, branches, floors) the
    spread's time is within 0.5% of SLSQP's minimum over every path's constraint (Frank-Wolfe
    closes its gap as 1/steps: 0.1% within its 400 steps in 11 of these 12), and
    SLSQP finds nothing 1% better (the comparison means something)."""
    rng = random.Random(seed)
    n = rng.randint(2, 6)
    graph = _random_graph(rng, n)
    compute = [10 ** rng.uniform(-3, 0) for _ in range(n)]
    budget = 400
    floors = [rng.choice([1, 1, 20]) for _ in range(n)]
    rows = rng.choice([1, 1, 3])
    spread = path_spread(compute, graph, budget, floors, rows)
    assert sum(spread) == pytest.approx(budget)
    assert all(p >= f - 1e-9 for p, f in zip(spread, floors, strict=True))
    times = [c / p for c, p in zip(compute, spread, strict=True)]
    ours = graph.path(times) / rows + (1 - 1 / rows) * max(times)
    best = _numeric_optimum(compute, graph, budget, floors, rows)
    assert ours <= best * 1.005
    assert best <= ours * 1.01


@pytest.mark.parametrize("seed", range(40))
def test_allocation_keeps_floors_budget_and_never_estimates_worse(seed: int) -> None:
    """Whole PCUs: every stage at least its chain floor (its compute within the kernel's
    memory time, when those fit), the budget spent, and an estimate no worse than either
    spread the compiler had before (the full pipeline's, the square-root chain's)."""
    rng = random.Random(1000 + seed)
    n = rng.randint(2, 9)
    graph = _random_graph(rng, n)
    compute = [10 ** rng.uniform(-4, 0) for _ in range(n)]
    budget = rng.randint(n, 300)
    memory_time = rng.choice([0.0, 0.01, 0.1])
    rows = rng.randint(1, 7)
    work = [StageWork(compute=c) for c in compute]
    common = dict(pmus=n, pmu_bytes=1.0, pmu_bandwidth=1.0, memory_time=memory_time)
    alloc = allocate(work, pcus=budget, chain_rows=rows, graph=graph, **common).pcus  # type: ignore[arg-type]
    assert sum(alloc) == budget
    floors = [max(1, math.ceil(c / memory_time - 1e-9)) if memory_time else 1 for c in compute]
    if sum(floors) > budget:
        floors = [1] * n
    assert all(p >= f for p, f in zip(alloc, floors, strict=True))
    piped = allocate(work, pcus=budget, **common).pcus  # type: ignore[arg-type]
    roots = water_fill([math.sqrt(c) for c in compute], budget, floors)
    ours = chain_time(compute, alloc, rows, graph)
    assert ours <= chain_time(compute, piped, rows, graph) * (1 + 1e-12)
    assert ours <= chain_time(compute, roots, rows, graph) * (1 + 1e-12)
