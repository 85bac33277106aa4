"""Capacity planning: the fewest sockets that serve a traffic under an SLO (`rdu-sim plan`).

    from rdu_sim.plan import run_plan, plan_summary
    result = run_plan("workloads/plans/llama3.1-8b-chat.yaml", workers=2)
    plan_summary(result)["cheapest"]

A plan spec (``config.plan.PlanSpec``) names a cluster file (traffic, SLO, router; one pool
as template) and the axes to search; ``search.run_plan`` searches replica counts per
configuration on the sweep machinery (SQLite store, resume, process pool or Dask).
"""

from pathlib import Path

from rdu_sim.plan.evaluate import early_verdict
from rdu_sim.plan.frontier import frontier_rows, plan_summary
from rdu_sim.plan.search import PlanResult, run_plan
from rdu_sim.plan.spec import LoadedPlan, load_plan


def check_plan(path: str | Path) -> str:
    """Validate a plan spec and its base cluster; a one-line description (rdu-sim check),
    with the SLO the plan holds every configuration to and, when it searches disaggregation,
    the KV link. Every configuration is resolved as the plan's first run of it would be
    (``evaluate.early_verdict``: its layout, and its pools' memory plans): those that cannot
    run are counted, with the first one's reason, as the plan marks them infeasible (rows of
    its table, not errors)."""
    from rdu_sim.api import share_steps  # the simulator's memory plans, shared

    loaded = load_plan(path)
    configurations = loaded.configurations()
    disaggregated = any(c.ratio is not None for c in configurations)
    link = f"; disaggregated: {loaded.link_words()}" if disaggregated else ""
    with share_steps():
        verdicts = [(c, early_verdict(loaded, c)) for c in configurations]
    infeasible = [(c, why) for c, why in verdicts if why is not None]
    found = "all can run"
    if infeasible:
        first, why = infeasible[0]
        found = (
            f"{len(infeasible)} of them cannot run, which plan marks infeasible when it "
            f"reaches them (first: {first.label()}: {why})"
        )
    notes = {c.batch_slots: loaded.batch_note(c) for c in configurations}
    programs = "".join(f"; slots={n}: {note}" for n, note in notes.items() if note)
    return (
        f"{loaded.name!r}: {len(configurations)} configuration(s) over cluster "
        f"{loaded.base.config.name!r}, up to {loaded.spec.search.max_replicas} replicas each; "
        f"SLO {loaded.slo_words()}{link}; {found}{programs}"
    )


__all__ = [
    "LoadedPlan",
    "PlanResult",
    "check_plan",
    "frontier_rows",
    "load_plan",
    "plan_summary",
    "run_plan",
]
