"""The bound words follow one rule (``report.bound.bound_label``): a resource taking under
half the step is its largest part, not what binds it, in step, run and compare alike."""

from __future__ import annotations

from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.report.bound import BINDS_SHARE, bound_label

VLLM = ["llama3.1-70b-decode", "--set", "hardware=dgx-h100-vllm"]


def test_the_rule_at_its_edge() -> None:
    assert bound_label(BINDS_SHARE * 10, 10.0) == "bound by"
    assert bound_label(BINDS_SHARE * 10 - 1e-9, 10.0) == "largest part"


def test_a_step_of_additive_parts_names_its_largest_part_not_a_bound() -> None:
    """vLLM on an H100, Llama 3.1 70B: HBM 9.96 ms of a 25.8 ms step (host 9.05 ms and
    kernel boundaries 5.29 ms add to it): 'largest part', with the step's time."""
    step = CliRunner().invoke(cli, ["step", *VLLM])
    assert step.exit_code == 0, step.output
    assert "bound by" not in step.stdout
    assert "largest part HBM bandwidth (9.96 ms of 25.8 ms; each resource alone: " in step.stdout
    assert "boundaries 5.29 ms" in step.stdout and "host 9.05 ms)" in step.stdout
    compared = CliRunner().invoke(
        cli,
        ["compare", "llama3.1-70b-decode", "--hardware", "dgx-h100-vllm", "--hardware", "sn40l-8"],
    )
    assert compared.exit_code == 0, compared.output
    assert "decode step 25.8 ms largest part HBM bandwidth (9.96 ms of it, " in compared.stdout
    # a step its HBM does bind keeps the words
    sn40l = CliRunner().invoke(cli, ["step", "llama3.1-70b-decode"])
    assert "bound by HBM bandwidth (" in sn40l.stdout
