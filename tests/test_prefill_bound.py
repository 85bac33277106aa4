"""What binds prefill, in a run's report and in compare's columns and verdicts: the prefill
step's bound by the decode step's rule (``report.bound.step_bound``), and prefill's share
of the time. Llama 3.1 70B on 8 SN40L sockets spends half its run's step time in prefill,
bound by the links within a node, while its decode steps are HBM-bound."""

from __future__ import annotations

import pytest

from rdu_sim import api, human
from rdu_sim.cli.compare_cmd import print_comparison
from rdu_sim.compare import compare
from rdu_sim.report.console import serving_table
from rdu_sim.report.terminal import wide_console

WORKLOAD = "llama3.1-70b-decode"


def test_a_run_names_what_binds_its_prefill_and_prefill_s_share() -> None:
    result = api.run(WORKLOAD, {"serving.requests": 40})
    summary = result.summary()
    step = summary.prefill_step
    assert step is not None and summary.decode_step is not None
    assert summary.decode_step.bound == "hbm"
    assert (step.bound, step.link, step.binds) == ("link", "intra_node_link", True)
    # the step the run spent the most time in, and the share from every step run
    shapes = result.step_shapes()
    time = [(s["step_s"] * s["steps"], s) for s in shapes]
    prefills = [(t, s) for t, s in time if s["phase"] == "prefill"]
    longest = max(prefills, key=lambda item: item[0])[1]
    assert (step.batch, step.tokens) == (longest["batch"], longest["tokens"])
    share = sum(t for t, _ in prefills) / sum(t for t, _ in time)
    assert step.busy_share == pytest.approx(share, rel=1e-12) and 0.3 < share < 0.7
    # the same bound `rdu-sim step --phase prefill` gives that step
    alone = api.step_report(WORKLOAD, phase="prefill", tokens=step.tokens).to_dict()
    assert (alone["bound"]["resource"], alone["step_s"]) == (step.bound, step.step_s)
    assert result.to_dict()["prefill_step"]["bound"] == "link"
    console = wide_console()
    with console.capture() as out:
        console.print(serving_table(summary))
    assert "prefill step bound by" in out.get()
    assert f"the {step.tokens:,}-token step)" in out.get()
    # the decode row states its step's shape too (the one run most often), in the words of
    # `rdu-sim run --step`: the trial read "decode step bound by" with no batch or context
    decode = summary.decode_step
    assert f"decode step (batch {decode.batch}, {decode.context:,} cached tokens) bound by" in (
        out.get()
    )
    shown = " ".join(out.get().split())
    share = human.percent(step.busy_share)
    assert f"prefill steps' share of the run's step time │ {share}" in shown


def test_compare_says_what_binds_each_prefill_where_prefill_drives_the_served_rate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = compare(WORKLOAD, ["sn40l-8", "dgx-h100"])
    sn40l, h100 = result.columns
    assert (sn40l.prefill_bound, sn40l.prefill_bound_link) == ("link", "intra_node_link")
    assert sn40l.prefill_step_s == pytest.approx(sn40l.prefill_packed_s)  # one prompt a step
    assert h100.prefill_bound == "compute"
    assert h100.prefill_packed and h100.prefill_packed > 1
    assert h100.prefill_step_s == pytest.approx(h100.prefill_packed_s)  # packed, as served
    assert result.to_dict()["columns"][0]["prefill_bound"] == "link"
    (verdict,) = result.verdicts
    assert "prefill included" in verdict  # prefill drives the served figure
    assert "; its step bound by compute (PCUs or SMs), " in verdict
    assert ", vs bound by intra_node_link, the links within a node, 420 ms of 423 ms)" in verdict
    print_comparison(result)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "prefill step bound by" in line)
    assert "link, 420 ms of 423 ms" in row and "compute, 210 ms of 333" in row
    assert f"({h100.prefill_packed} prompts)" in out  # the packed step, wrapped in the cell
