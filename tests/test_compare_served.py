"""`rdu-sim compare`'s headline is honest about what it counts (trial R): decode-step tokens/s
named so, served tokens/s with prefill included beside them (what a run serves), power and
tokens per joule from the run's power rule, the dtypes and the peak a share of FLOP/s is of,
and an error naming the flag that gave a bad value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim import api, human
from rdu_sim.cli.compare_cmd import ROWS
from rdu_sim.cli.main import cli
from rdu_sim.compare import Comparison, compare, served_rate
from rdu_sim.compare.why import PREFILL_MATTERS, prefill_bound_words, prefill_matters
from rdu_sim.report.energy import machine_watts

REPO = Path(__file__).resolve().parents[1]
EIGHT_B = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
SEVENTY_B = REPO / "workloads" / "llama3.1-70b-decode.yaml"
LONG_PROMPTS = {
    "dtypes": {"weights": "fp8", "kv": "fp8", "activations": "bf16"},
    "serving.batch_slots": "auto",
    "serving.prompt_tokens": 2048,
    "serving.output_tokens": 128,
    "serving.max_context": 2176,
    "serving.arrival": {"process": "all_at_once"},
}
"""Trial R's prefill-heavy shape: Llama 3.1 8B FP8 at tp=1, 2,048-token prompts, 128 outputs."""


@pytest.fixture(scope="module")
def long_prompts() -> Comparison:
    return compare(EIGHT_B, ["sn40l-8", "dgx-h100"], LONG_PROMPTS)


def test_served_tokens_per_s_is_what_a_run_serves(long_prompts: Comparison) -> None:
    """2,048-token prompts with 128 outputs: prefill is most of the time, so the decode
    step's tokens/s (15,132 an H100 instance) is ~4x what a run serves (3,580); the served
    figure, each request's prefill (its share of the step the stack packs it in) beside its
    output tokens' decode steps, is within 3% of the run's on both systems, and so is its
    tokens per joule (the run's power rule)."""
    for column in long_prompts.columns:
        assert column.fits and column.batch == column.batch_capacity
        served = api.run(
            EIGHT_B,
            {
                **LONG_PROMPTS,
                "hardware": column.hardware,
                "stack": None,
                "serving.requests": 4 * column.batch,
            },
        ).to_dict()
        per_instance = column.system_served_tokens_per_s / column.instances
        assert per_instance == pytest.approx(served["decode_tokens_per_s"], rel=0.03)
        assert column.tokens_per_s > 3.5 * served["decode_tokens_per_s"]  # decode alone
        assert column.served_tokens_per_joule == pytest.approx(
            served["energy"]["output_tokens_per_joule"], rel=0.03
        )
    sn40l, gpu = long_prompts.columns
    assert (sn40l.prefill_packed, gpu.prefill_packed) == (1, 4)  # TensorRT-LLM packs 8,192 tokens


def test_served_rate_is_prefill_and_decode_in_turn(long_prompts: Comparison) -> None:
    """The served figure is the formula its docstring states, from the column's own steps."""
    for column in long_prompts.columns:
        per_request = column.prefill_packed_s / column.prefill_packed
        rate, share = served_rate(
            column.batch, column.attention_ranks, column.step_s, per_request, column.output_tokens
        )
        slots, out = column.batch, column.output_tokens
        assert rate == pytest.approx(slots * out / (slots * per_request + out * column.step_s))
        assert share == pytest.approx(
            slots * per_request / (slots * per_request + out * column.step_s)
        )
        assert column.served_tokens_per_s == rate and column.prefill_share == share
        assert column.system_served_tokens_per_s == rate * column.instances
        assert column.output_tokens == 128
    # data-parallel attention: each rank's slots share its prefills, the ranks run alongside
    assert served_rate(8, 2, 1.0, 1.0, 4) == (8 * 4 / (4 * 1.0 + 4 * 1.0), 0.5)


def test_the_verdict_leads_with_served_tokens_when_prefill_matters(
    long_prompts: Comparison,
) -> None:
    """Trial R F2: the verdict said "1.65x the tokens/s" (decode steps) where a run serves
    2.2x; it now leads with the served ratio, names the decode-step one as such, and gives
    the prefill as a reason of its own before the decode step's."""
    sn40l, gpu = long_prompts.columns
    assert prefill_matters(gpu, sn40l) and min(sn40l.prefill_share, gpu.prefill_share) > 0.7
    (said,) = long_prompts.verdicts
    served = gpu.system_served_tokens_per_s / sn40l.system_served_tokens_per_s
    decode = gpu.system_tokens_per_s / sn40l.system_tokens_per_s
    assert 2.0 < served < 2.3 and decode < 1.7
    assert said.startswith(
        f"dgx-h100 serves {human.ratio(served)} the output tokens/s of sn40l-8 on the whole "
        f"system with prefill included ({human.number(gpu.system_served_tokens_per_s)} vs "
        f"{human.number(sn40l.system_served_tokens_per_s)}; prefill "
        f"{human.percent(gpu.prefill_share)} vs {human.percent(sn40l.prefill_share)} of the "
        f"time), {human.ratio(decode)} the decode-step tokens/s ("
    )
    per_request = gpu.prefill_packed_s / 4
    assert (
        "Why: each request's share of a prefill step (its 2,048-token typical prompt, 4 to a "
        f"{human.duration(gpu.prefill_packed_s)} step vs alone) takes "
        f"{human.ratio(per_request / sn40l.prefill_s)} as long ({human.duration(per_request)} vs "
        f"{human.duration(sn40l.prefill_s)}; its step {prefill_bound_words(gpu)}, vs "
        f"{prefill_bound_words(sn40l)}) beside its 128 output tokens' decode steps; in "
        "decode, it runs 1.91x the batch (488 vs 256 slots"
    ) in said


def test_the_verdict_names_decode_step_tokens_when_prefill_is_small() -> None:
    """Long outputs beside short prompts: prefill under PREFILL_MATTERS of both columns'
    time, so the verdict is the decode step's, named so."""
    result = compare(
        EIGHT_B,
        ["sn40l-8", "dgx-h100"],
        {**LONG_PROMPTS, "serving.prompt_tokens": 128, "serving.output_tokens": 2048},
    )
    sn40l, gpu = result.columns
    assert max(sn40l.prefill_share, gpu.prefill_share) < PREFILL_MATTERS
    (said,) = result.verdicts
    ratio = gpu.system_tokens_per_s / sn40l.system_tokens_per_s
    assert said.startswith(
        f"dgx-h100 serves {human.ratio(ratio)} the decode-step tokens/s of sn40l-8 on the "
        "whole system ("
    )
    assert "prefill included" not in said and "Why: it runs" in said


def test_the_table_names_decode_step_rows_power_dtypes_and_the_peak() -> None:
    """Trial R F2-F4: the table's tokens/s rows say decode-step; a served row, power and
    tokens per joule (the run's power rule, ``machine_watts``: every device and its share of
    the hosts); a dtypes row; the FLOP/s share names its peak and type (H100 FP8 with fp8
    weights, SN40L BF16); per-device tokens/s only when the systems' sizes differ."""
    labels = [label for label, _ in ROWS]
    assert "tokens/s (whole system)" not in labels
    for label in (
        "decode-step tokens/s per user",
        "decode-step tokens/s (whole system)",
        "served tokens/s, prefill included (whole system)",
        "power (whole system)",
        "tokens per joule (served / decode-step)",
        "dtypes (weights / KV / activations)",
    ):
        assert label in labels
    args = ["compare", str(SEVENTY_B), "--hardware", "sn40l-8", "--hardware", "dgx-h100"]
    args += ["--set", "dtypes.weights=fp8"]
    shown = CliRunner().invoke(cli, [*args, "--json"])
    assert shown.exit_code == 0, shown.output
    sn40l, gpu = json.loads(shown.stdout)["columns"]
    assert (sn40l["power_w"], gpu["power_w"]) == (8 * 530 + 1500, 8 * 700 + 4600)
    assert gpu["power_w"] == machine_watts(
        api.load(SEVENTY_B, {"hardware": "dgx-h100"}).hardware.power, 8, 8
    )
    for column in (sn40l, gpu):
        assert column["tokens_per_joule"] == column["system_tokens_per_s"] / column["power_w"]
        assert column["served_tokens_per_joule"] == pytest.approx(
            column["system_served_tokens_per_s"] / column["power_w"], rel=1e-12
        )
        assert column["dtypes"] == {"weights": "fp8", "kv": "bf16", "activations": "bf16"}
    assert (sn40l["peak_flops_type"], gpu["peak_flops_type"]) == ("bf16", "fp8")
    cells = dict(ROWS)
    columns = compare(SEVENTY_B, ["sn40l-8", "dgx-h100"], {"dtypes.weights": "fp8"}).columns
    share = [cells["share of peak FLOP/s"](c) for c in columns]
    assert share == [
        f"{human.percent(sn40l['flops_fraction'])} of 638 TFLOP/s bf16 peak",
        f"{human.percent(gpu['flops_fraction'])} of 1.98 PFLOP/s fp8 peak",
    ]
    assert [cells["dtypes (weights / KV / activations)"](c) for c in columns] == [
        "fp8 / bf16 / bf16"
    ] * 2
    assert [cells["power (whole system)"](c) for c in columns] == [
        "5.74 kW, an average",
        "10.2 kW, a maximum, an upper bound",
    ]
    (unpowered,) = compare(EIGHT_B, ["sn40l"], {"hw.power": None}, batch=2).columns
    assert unpowered.power_w is None and unpowered.served_tokens_per_joule is None
    assert cells["power (whole system)"](unpowered) == "not given (hw.power)"
    table = CliRunner().invoke(cli, args)
    assert table.exit_code == 0 and "10.2 kW" in table.stdout
    assert "tokens/s per device" not in table.stdout  # both 8 devices
    sized = CliRunner().invoke(
        cli, ["compare", str(EIGHT_B), "--hardware", "sn40l", "--hardware", "dgx-h100"]
    )
    assert sized.exit_code == 0, sized.output
    assert "tokens/s per device" in sized.stdout


def test_a_bad_varied_value_names_its_flag_and_a_close_hardware_name() -> None:
    """Trial R F8: a value --vary gave is named as from --vary, one --hardware gave as from
    --hardware (not --set), and an unknown hardware name gets run's "did you mean"."""
    runner = CliRunner()
    stack = runner.invoke(cli, ["compare", str(EIGHT_B), "--vary", "stack=tensorrt-llm,foo"])
    assert stack.exit_code == 2
    assert stack.stderr.endswith("(from --vary stack)\n") and stack.stderr.count("error:") == 1
    shared = runner.invoke(
        cli, ["compare", str(EIGHT_B), "--hardware", "sn40l", "--set", "stack=foo"]
    )
    assert shared.exit_code == 2 and shared.stderr.endswith("(from --set stack)\n")
    workload = runner.invoke(cli, ["compare", str(EIGHT_B), "--hardware", str(EIGHT_B)])
    assert workload.exit_code == 2 and workload.stderr.endswith("(from --hardware)\n")
    missing = runner.invoke(cli, ["compare", str(EIGHT_B), "--hardware", "dgx-h300"])
    assert missing.exit_code == 2
    assert missing.stderr.startswith(
        "error: dgx-h300: file not found, and no shipped hardware file of that name; did you "
        "mean 'dgx-h200'? (shipped hardware files: "
    )
    far = runner.invoke(cli, ["compare", str(EIGHT_B), "--hardware", "zzzzq"])
    assert far.exit_code == 2 and "did you mean" not in far.stderr
