"""Numbers as people read them (rdu_sim.human), and the run report that uses them: a header
saying what was simulated, one definition of each utilization in every command, and a plain
sentence when the offered load, not the machine, sets the throughput."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from rdu_sim import api, human
from rdu_sim.cli.main import cli
from rdu_sim.report.bound import RESOURCES
from rdu_sim.report.console import UTILIZATION_LABELS, render
from rdu_sim.report.percentiles import Percentiles
from rdu_sim.report.summary import (
    OCCUPANCY_FULL,
    Utilization,
    queue_grew,
    throughput_bound,
    why_bound,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "value, text",
    [
        (0, "0"),
        (12.34, "12.3"),
        (99.96, "100"),
        (999.6, "1,000"),
        (1374.2, "1,374"),
        (0.1158, "0.116"),
        (-3.2, "-3.2"),
        (None, "-"),
        (math.nan, "-"),
    ],
)
def test_number(value: float | None, text: str) -> None:
    assert human.number(value) == text


def test_units_never_show_an_exponent_or_a_wrong_plural() -> None:
    assert human.size(1010 * 2**20) == "1,010 MiB"  # was 1.01e+03 MiB
    assert human.size(520 * 2**20) == "520 MiB"
    assert human.size(1.5 * 2**40) == "1.5 TiB"
    assert human.size(0) == "0 B"
    assert human.duration(3.46) == "3.46 s"  # was 3.46e+03 ms
    assert human.duration(3509) == "58.5 min"
    assert human.duration(26.3 * 3600) == "26.3 h"
    assert human.duration(5 * 86400) == "5 days"
    assert human.duration(8.12e-7) == "812 ns"
    assert human.bandwidth(1.8e12) == "1.8 TB/s"
    assert human.flops(6.1346e14) == "613 TFLOP/s"
    assert human.count(1, "socket") == "1 socket"  # was "1 sockets"
    assert human.count(16, "socket") == "16 sockets"
    assert human.percent(0.621) == "62.1%"
    assert human.tokens(131072) == "128k"
    assert human.in_unit(0.035, "fraction") == "3.5%"
    assert human.in_unit(4.3, "x") == "4.3x"
    assert human.in_unit(1832, "tokens/s") == "1,832 tokens/s"


@given(st.floats(min_value=1e-12, max_value=1e18))
def test_no_exponent_from_a_picosecond_to_an_exabyte(value: float) -> None:
    """Durations down to a picosecond, sizes and rates down to a thousandth of their unit."""
    texts = [human.duration(value)]
    if value >= 1e-3:
        texts += [human.size(value), human.bandwidth(value), human.flops(value)]
    for text in texts:
        assert "e+" not in text and "e-" not in text, text


def _formatting_calls(path: Path) -> list[str]:
    """f-string format specs that format a number for people (.3g, ,.1f, .2f ...)."""
    tree = ast.parse(path.read_text())
    specs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FormattedValue) and isinstance(node.format_spec, ast.JoinedStr):
            spec = "".join(
                part.value for part in node.format_spec.values if isinstance(part, ast.Constant)
            )
            if re.fullmatch(r",?\.?\d*[gf]|,", spec):
                specs.append(spec)
    return specs


@pytest.mark.parametrize(
    "module",
    [
        "report/console.py",
        "report/cluster_console.py",
        "cli/run_cmd.py",
        "cli/step_cmd.py",
        "cli/inspect_cmd.py",
        "cli/validate_cmd.py",
        "cli/plan_cmd.py",
        "cli/compare_cmd.py",
        "report/plots_calibration.py",
        "report/plots_compare.py",
        "report/plots_serving.py",
        "report/plots_perf.py",
        "report/plots_sweep.py",
        "report/sweep_table.py",
        "cli/sweep_cmd.py",
        "graph/export.py",
        "compiler/placement.py",
    ],
)
def test_reports_format_through_the_one_module(module: str) -> None:
    """The places that formatted numbers themselves now ask rdu_sim.human (signed relative
    errors and plain integer counts aside)."""
    specs = [s for s in _formatting_calls(ROOT / "rdu_sim" / module) if s not in (",", "+.1f")]
    assert specs == [], f"{module} formats numbers itself: {specs}"


SMALL = {"serving.requests": 24, "serving.output_tokens": 64, "serving.prompt_tokens": 512}


def text_of(overrides: dict[str, object]) -> tuple[str, dict[str, object]]:
    from rich.console import Console

    result = api.run("llama3.1-8b-1socket", {**SMALL, **overrides})
    console = Console(width=120, record=True)
    console.print(render(result.summary()))
    return console.export_text(), result.to_dict()


def test_the_header_says_what_was_simulated_and_the_load_note_when_slots_idle() -> None:
    text, data = text_of({"serving.arrival": {"process": "poisson", "rate": 2.0}})
    assert "llama-3.1-8b on sn40l served by sambastack-2025 (1 socket)" in text
    assert data["stack"] == "sambastack-2025"
    assert "weights bf16, KV cache bf16, activations bf16; KV policy full" in text
    assert "load: 24 requests, Poisson arrivals at 2 req/s" in text
    assert "prompts fixed 512 tokens (mean 512), outputs fixed 64 tokens (mean 64)" in text
    assert data["throughput_bound"] == "offered_load"
    assert data["occupancy"] < OCCUPANCY_FULL
    assert "set by the offered load (2 req/s x 64 output tokens = 128 tokens/s asked)" in text
    assert data["load"]["rate_per_s"] == 2.0 and data["dtypes"]["weights"] == "bf16"


def test_a_closed_loop_measures_the_machine() -> None:
    text, data = text_of({"serving.arrival.process": "closed_loop", "serving.batch_slots": 8})
    assert data["throughput_bound"] == "machine"
    assert "closed loop: 8 users" in text
    assert "offered load" not in text
    assert data["load"]["concurrency"] == 8


def test_a_closed_loop_of_fewer_requests_than_slots_is_set_by_its_requests() -> None:
    """8 requests in a closed loop on 16 slots: 8 users (not 16), and the throughput is the
    8 users', said in a sentence, not the machine's."""
    overrides = {"serving.arrival.process": "closed_loop", "serving.requests": 8}
    text, data = text_of(overrides)
    assert data["batch_slots"] == 16 and data["load"]["concurrency"] == 8
    assert "closed loop: 8 users" in text
    assert data["throughput_bound"] == "offered_load"
    said = " ".join(text.split())
    assert (
        "The throughput above is set by the closed loop's 8 users (its requests, or "
        "serving.arrival.concurrency), not by the machine: 8 cannot fill its 16 batch slots "
        f"(occupied {human.percent(data['occupancy'])} of the time)."
    ) in said
    assert why_bound(True, 0.9, False, 8, 16) == "few_users"
    assert why_bound(True, 0.9, False, 16, 16) == "closed_loop"


def _mean(value: float) -> Percentiles:
    return Percentiles(p50=value, p90=value, p99=value, mean=value)


@pytest.mark.parametrize(
    ("waited", "e2e", "grew"),
    [
        (3.0, 4.0, True),  # waited 3 s, served in 1 s
        (1.0, 4.0, False),  # served in 3 s after 1 s of waiting
        (2.0, 4.0, False),  # waited exactly as long as it was served
    ],
)
def test_a_queue_grew_when_requests_waited_longer_than_served(
    waited: float, e2e: float, grew: bool
) -> None:
    assert queue_grew(_mean(waited), _mean(e2e)) is grew
    # whatever the occupancy, a queue that grew makes the machine the bound of an open loop
    assert throughput_bound(False, 0.1, grew) == ("machine" if grew else "offered_load")
    assert why_bound(False, 0.1, grew) == ("queue_grew" if grew else "slots_idle")
    # a closed loop and busy slots are the machine's anyway
    assert why_bound(True, 0.1, grew) == "closed_loop"
    assert why_bound(False, OCCUPANCY_FULL, grew) == "slots_busy"


BURST = {
    "serving.requests": 40,
    "serving.arrival": {"process": "poisson", "rate": 1000.0},
    "serving.prompt_tokens": {"dist": "uniform", "low": 256, "high": 2048},
    "serving.output_tokens": {"dist": "uniform", "low": 16, "high": 128},
}


def test_a_burst_beyond_the_slots_is_bound_by_the_machine_though_its_drain_empties_them() -> None:
    """40 requests at 1,000 req/s on 16 slots: they queue behind one another's prefills
    (slots stand empty while a request waits), then drain, so the slots are held 77% of
    the time and the queue is less than half the end-to-end time; still the machine, not
    the load, set the throughput (trial Q's verdict told it to raise the rate)."""
    text, data = text_of(BURST)
    assert data["batch_slots"] == 16 and data["occupancy"] < OCCUPANCY_FULL
    waited, e2e = data["queue_delay_s"]["mean"], data["e2e_s"]["mean"]
    assert 0 < waited < e2e - waited  # not queue_grew: saturated
    assert data["throughput_bound"] == "machine"
    said = " ".join(text.split())
    assert "offered load (" not in said and "raise serving.arrival.rate" not in said
    assert (
        f"Requests waited {human.duration(waited)} on average to be admitted, and the machine "
        "served " in said
    )
    assert "for at least 90.0% of the time until the last was admitted, a request was " in said
    # the same rate, fewer requests than slots: they cannot hold them all, the load is the bound
    _, few = text_of({**BURST, "serving.requests": 8})
    assert few["throughput_bound"] == "offered_load"
    assert why_bound(False, 0.5, False, None, 16, saturated=True) == "saturated"
    assert why_bound(False, 0.5, False, None, 16, saturated=False) == "slots_idle"
    assert throughput_bound(False, 0.5, False, None, 16, saturated=True) == "machine"


def test_requests_all_at_once_are_never_told_to_raise_a_rate() -> None:
    """``all_at_once`` has no rate: as many requests as slots or more keep the machine
    busy as a closed loop does (the machine), fewer cannot fill the slots and the sentence
    says to offer more requests."""
    text, data = text_of({"serving.arrival": {"process": "all_at_once"}})  # 24 on 16 slots
    assert data["occupancy"] < OCCUPANCY_FULL and data["throughput_bound"] == "machine"
    assert "serving.arrival.rate" not in text
    text, data = text_of({"serving.arrival": {"process": "all_at_once"}, "serving.requests": 8})
    assert data["throughput_bound"] == "offered_load"
    said = " ".join(text.split())
    assert "serving.arrival.rate" not in said
    assert (
        "The throughput above is set by the 8 requests offered all at once, not by the "
        "machine: 8 cannot fill its 16 batch slots (occupied "
        f"{human.percent(data['occupancy'])} of the time). To measure what the machine can "
        "do, offer at least 16 (serving.requests)."
    ) in said


@pytest.mark.parametrize("bound", list(RESOURCES))
def test_the_run_report_names_the_decode_steps_bound_in_words(bound: str) -> None:
    """The run report names the binding resource as every other report does (RESOURCES:
    "the socket-to-socket links"), not as its key in capitals ("LINK")."""
    from dataclasses import replace

    from rich.console import Console

    summary = api.run("llama3.1-8b-1socket", SMALL).summary()
    assert summary.decode_step is not None
    step = replace(summary.decode_step, bound=bound, **{f"{bound}_s": 0.004})
    console = Console(width=160, record=True)
    console.print(render(replace(summary, decode_step=step)))
    text = console.export_text()
    assert f"{RESOURCES[bound]} (4 ms of " in text, text
    assert bound.upper() + " (" not in text


def test_one_definition_of_utilization_in_run_run_step_and_step() -> None:
    step = api.step("llama3.1-8b-1socket", batch=4)
    expected = Utilization.of_step(step)
    lines = {
        args[0]: CliRunner().invoke(cli, args).output
        for args in (
            ["run", "--step", "llama3.1-8b-1socket", "--set", "serving.batch_slots=4"],
            ["step", "llama3.1-8b-1socket", "--batch", "4"],
        )
    }
    for name, label in UTILIZATION_LABELS.items():
        shown = f"{label} {human.percent(getattr(expected, name))}"
        for command, output in lines.items():
            assert shown in output, (command, shown)
    text, _ = text_of({})
    for label in UTILIZATION_LABELS.values():
        assert label in text


def test_a_target_share_is_written_to_its_last_digit() -> None:
    """An SLO's attainment: '95%', not '95.000%'; '99.95%', not rounded up to '100.0%'."""
    assert human.target_percent(0.95) == "95%"
    assert human.target_percent(0.999) == "99.9%"
    assert human.target_percent(0.9995) == "99.95%"
    assert human.target_percent(1.0) == "100%"
    assert human.target_percent(0.9999995) == "99.99995%"  # not cut to 6 digits
