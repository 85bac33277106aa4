"""MLA's query choice on a GPU (compiler.query_choice): a GPU runs its kernels one after
another, so the gather's collectives never hide under the HBM time as they do in SN40L's
streaming kernels. The choice composes its estimate as the device composes its step; checked
against the engine itself by forcing each form and timing both."""

from __future__ import annotations

from itertools import pairwise

import pytest

from rdu_sim import api
from rdu_sim.compiler import compile as compile_module
from rdu_sim.compiler import placement as placement_module
from rdu_sim.compiler.fusion import graph_groups
from rdu_sim.compiler.layout import shard_plan
from rdu_sim.compiler.query_choice import step_estimate
from rdu_sim.shapes import StepShape

SNAP = "deepseek-r1-128k-snapstream"
TWO_NODES = {"hardware": "dgx-h100-2nodes", "stack": None}
"""DeepSeek-R1 at tp=16 over two DGX H100s: the gather crosses the 50 GB/s network."""


def _step_s(batch: int, monkeypatch: pytest.MonkeyPatch, force: bool | None = None) -> float:
    """The simulated decode step of ``batch`` slots: the compiler's choice, or with every
    step (and every plan's largest step) forced to replicate (True) or gather (False); a plan
    holds the whole weights only where they fit either way."""
    with monkeypatch.context() as patch:
        if force is not None:
            for module in (compile_module, placement_module):
                patch.setattr(module, "replicates", lambda *args, **kwargs: force)
            patch.setattr(compile_module, "choose_queries", lambda build, timer: build(force))
        return api.step(SNAP, TWO_NODES, batch=batch).step_s


@pytest.mark.parametrize("batch", [8, 64, 80, 96])
def test_the_gpu_choice_is_the_faster_of_the_two_simulated_steps(
    batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The defect: below 96 slots the estimate took the gather's 4.6 + 4.2 ms of collectives
    as hidden under the HBM time (SN40L's rule) and gathered, a step 30% longer than the
    replicating one (46.0 ms against 35.6 ms at 80 slots)."""
    gather = _step_s(batch, monkeypatch, force=False)
    replicate = _step_s(batch, monkeypatch, force=True)
    assert gather != replicate
    assert _step_s(batch, monkeypatch) == min(gather, replicate)


def test_the_gpu_decode_step_grows_with_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """No batch decodes slower than a larger one across where the forms meet."""
    steps = [_step_s(batch, monkeypatch) for batch in (64, 80, 88, 96)]
    assert all(a <= b for a, b in pairwise(steps)), steps


def test_a_gpu_estimate_adds_what_sn40l_overlaps() -> None:
    """A GPU's estimate is its operators' time one after another plus the collectives and
    their kernels' boundaries; SN40L's the busiest resource's."""
    for hardware, serial in (("dgx-h100-2nodes", True), ("sn40l-16", False)):
        scenario = api.load(SNAP, {"hardware": hardware, "stack": None})
        groups = graph_groups(scenario, StepShape("decode", 64, 1, 32768))
        estimate = step_estimate(scenario, groups, shard_plan(scenario), scenario.hardware.system)
        assert estimate.serial == serial
        if serial:
            assert estimate.boundaries_s > 0
            assert estimate.time_s == pytest.approx(
                estimate.operators_s + estimate.link_s + estimate.boundaries_s
            )
            assert estimate.operators_s >= max(estimate.hbm_s, estimate.compute_s)
        else:
            assert estimate.time_s == max(estimate.hbm_s, estimate.link_s, estimate.compute_s)
