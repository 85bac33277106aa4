"""Speculation on the real compiler and engine: the issue's must-show runs.

- ``rdu-sim run <70B speculative workload> --json`` reports ``accepted_tokens_per_step``,
  and at batch 1 a higher per-user rate than the same workload without speculation;
- speculative prefill of DeepSeek-R1 by a cross-family draft: TTFT and target compute saved
  against the draft's own cost, and SnapStream with fewer tokens to compress;
- at a large batch the verify step's k + 1 tokens per slot cost more than speculation
  saves (the crossover, plotted by ``rdu-sim plot speculation``).
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from rdu_sim import api, human
from rdu_sim.cli.main import cli
from rdu_sim.report.console import render
from rdu_sim.report.run_result import RunResult
from rdu_sim.report.speculation import SpeculativeDecoding
from rdu_sim.serving.acceptance import expected_tokens_per_round, tokens_variance
from rdu_sim.shapes import StepShape
from rdu_sim.speculation import DRAFT_CATCH_UP

REPO = Path(__file__).resolve().parents[1]
SPECDEC = REPO / "workloads" / "speculative" / "llama3.1-70b-16socket-specdec.yaml"
SPECDEC_405B = REPO / "workloads" / "speculative" / "llama3.1-405b-16socket-specdec.yaml"
MTP = REPO / "workloads" / "speculative" / "deepseek-r1-16socket-mtp.yaml"
PREFILL = REPO / "workloads" / "speculative" / "deepseek-r1-128k-snapstream-specprefill.yaml"
FEW = ["serving.requests=2"]
ANY_BATCH = "stack.batch_programs=any"
"""Every batch runnable: capacities are memory's, which the draft pays in."""


def _run_json(*overrides: str) -> dict[str, object]:
    args = ["run", str(SPECDEC), "--json"]
    for override in overrides:
        args += ["--set", override]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data: dict[str, object] = json.loads(result.output)
    return data


def test_speculation_beats_plain_decoding_at_batch_one() -> None:
    spec = _run_json(*FEW, ANY_BATCH)
    plain = _run_json(*FEW, ANY_BATCH, "speculation=null")
    assert plain["accepted_tokens_per_step"] is None and plain["speculation"] is None
    accepted = spec["accepted_tokens_per_step"]
    assert isinstance(accepted, float)
    section = spec["speculation"]
    assert isinstance(section, dict)
    decoding = section["decoding"]
    rounds = decoding["rounds"]
    expected = expected_tokens_per_round(0.8, 4)
    assert decoding["expected_tokens_per_step"] == pytest.approx(expected, rel=1e-9)
    # the drawn tokens per round (uncapped) within 4 standard errors of the formula
    drawn = decoding["accepted_drafts_per_step"] + 1
    assert abs(drawn - expected) < 4 * math.sqrt(tokens_variance(0.8, 4) / rounds)
    assert 1 < accepted <= drawn
    # one slot, busy in every round: the static graph is never padding (a round's several
    # tokens are not several slots)
    assert spec["decode_slot_fill"] == 1.0 and plain["decode_slot_fill"] == 1.0
    spec_rate = spec["user_tokens_per_s"]["p50"]  # type: ignore[index]
    plain_rate = plain["user_tokens_per_s"]["p50"]  # type: ignore[index]
    # a round costs at least a plain step, so its tokens bound the gain; the draft's steps
    # and the verify step's extra rows keep it short of that bound
    assert 1.5 * plain_rate < spec_rate < accepted * plain_rate
    # the draft pays in memory and capacity, and takes a share of each round
    assert spec["batch_capacity"] < plain["batch_capacity"]  # type: ignore[operator]
    assert 0 < decoding["draft_share_of_round"] < 0.5
    assert section["draft_memory"]["weights_bytes"] > 0


def test_405b_drafted_by_8b_pays_capacity_for_a_faster_user() -> None:
    spec = api.run(SPECDEC_405B, [*FEW, ANY_BATCH]).summary()
    plain = api.run(SPECDEC_405B, [*FEW, ANY_BATCH, "speculation=null"]).summary()
    assert spec.speculation is not None and spec.speculation.draft == "llama-3.1-8b"
    # each socket holds the 8B's share that the 8B alone on the 16 sockets would (its
    # sharded layers, its replicated embedding) beside the 405B's
    alone = api.run(SPECDEC_405B, [*FEW, "speculation=null", "model=llama-3.1-8b"]).summary()
    draft_weights = spec.speculation.draft_memory.weights_bytes
    assert draft_weights == alone.memory["hbm"].weights_bytes
    assert spec.memory["hbm"].weights_bytes == plain.memory["hbm"].weights_bytes + draft_weights
    assert spec.batch_capacity is not None and plain.batch_capacity is not None
    assert spec.batch_capacity < plain.batch_capacity
    assert spec.user_tokens_per_s.p50 is not None and plain.user_tokens_per_s.p50 is not None
    assert spec.user_tokens_per_s.p50 > 2 * plain.user_tokens_per_s.p50


def test_deepseek_drafted_by_its_mtp_module() -> None:
    """k = 1 at a = 0.85: 1.85 tokens per round; the verify step's second token touches
    experts of its own (static expert loading streams min(256, tokens x 8)), so the gain is
    well below 1.85x."""
    spec = api.run(MTP, FEW).summary()
    plain = api.run(MTP, [*FEW, "speculation=null"]).summary()
    assert spec.speculation is not None and spec.speculation.decoding is not None
    decoding = spec.speculation.decoding
    assert decoding.draft_tokens == 1
    assert decoding.accepted_drafts_per_step is not None
    drawn = decoding.accepted_drafts_per_step + 1
    expected = expected_tokens_per_round(0.85, 1)
    assert abs(drawn - expected) < 4 * math.sqrt(tokens_variance(0.85, 1) / decoding.rounds)
    assert spec.user_tokens_per_s.p50 is not None and plain.user_tokens_per_s.p50 is not None
    # a real gain, well below the tokens a round: 1.42x with the shipped files, SambaStack
    # running a round as one program (1.08x with every step of it paying the host's time:
    # stack.speculative_rounds=step_by_step)
    assert 1.05 < spec.user_tokens_per_s.p50 / plain.user_tokens_per_s.p50 < expected


def test_speculative_prefill_saves_ttft_and_compression() -> None:
    plain = api.run(PREFILL, [*FEW, "serving.batch_slots=1", "speculation=null"]).summary()
    spec = api.run(PREFILL, [*FEW, "serving.batch_slots=1"]).summary()
    assert spec.speculation is not None
    saving = spec.speculation.prefill
    assert saving is not None
    assert saving.kept_tokens < 0.31 * saving.prompt_tokens
    # the whole prompt compressed by SnapStream; the kept tokens fit its budget untouched
    assert saving.compresses_full and not saving.compresses_kept
    assert saving.target_s + saving.draft_s + saving.mapping_s < saving.full_s
    assert saving.draft_flops < 0.1 * saving.full_flops
    assert saving.target_flops < 0.3 * saving.full_flops
    # the report's typical prompt is the same prompt, served the same way
    assert spec.prefill_s == pytest.approx(
        saving.draft_s + saving.mapping_s + saving.target_s, rel=1e-9
    )
    assert plain.prefill_s == pytest.approx(saving.full_s, rel=1e-9)
    assert spec.ttft_s.p50 is not None and plain.ttft_s.p50 is not None
    assert spec.ttft_s.p50 < plain.ttft_s.p50


def test_speculation_hurts_at_a_large_batch() -> None:
    overrides = ["serving.batch_slots=64", "serving.requests=64"]
    spec = api.run(SPECDEC, overrides).summary()
    plain = api.run(SPECDEC, [*overrides, "speculation=null"]).summary()
    assert spec.decode_tokens_per_s is not None and plain.decode_tokens_per_s is not None
    assert spec.decode_tokens_per_s < plain.decode_tokens_per_s


@pytest.mark.timeout(600)
def test_drawn_acceptance_is_the_same_bytes_across_processes() -> None:
    """Per-request rates from a Beta and each request's rounds: two processes (different
    hash seeds), the same JSON; another serving.seed draws other rounds."""
    args = ["run", str(SPECDEC), "--json", "--set", "serving.requests=4", "--set"]
    beta = "speculation.decoding.acceptance={dist: beta, mean: 0.7, concentration: 10}"
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "rdu_sim.cli.main", *args, beta],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONHASHSEED=hash_seed),
        )
        for hash_seed in ("1", "2")
    ]
    outputs = []
    for process in processes:  # concurrently: the two cores
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err.decode(errors="replace")[-2000:]
        outputs.append(out)
    assert outputs[0] == outputs[1]
    first = json.loads(outputs[0])
    other = _run_json("serving.requests=4", beta, "serving.seed=1")
    assert first["accepted_tokens_per_step"] != other["accepted_tokens_per_step"]
    assert (
        first["speculation"]["decoding"]["acceptance_rate_mean"]
        != (
            other["speculation"]["decoding"]["acceptance_rate_mean"]  # type: ignore[index]
        )
    )


def test_requests_csv_gives_each_requests_acceptance_rate(tmp_path: Path) -> None:
    """Under speculative decoding ``requests.csv`` gives each request its drawn rate beside
    its rounds, from which the run's tokens per round and the formula's expectation are
    recomputed; without speculation there is no such column."""
    beta = "speculation.decoding.acceptance={dist: beta, mean: 0.7, concentration: 10}"
    out, plain_out = tmp_path / "spec", tmp_path / "plain"
    for folder, extra in ((out, [beta]), (plain_out, ["speculation=null"])):
        args = ["run", str(SPECDEC), "--out", str(folder), "--set", "serving.requests=6"]
        for override in extra:
            args += ["--set", override]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
    with (out / "requests.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    decoding = json.loads((out / "result.json").read_text())["speculation"]["decoding"]
    rates = [float(row["acceptance_rate"]) for row in rows]
    assert len(set(rates)) == len(rows) == 6  # drawn per request
    decoded = [int(row["output_tokens"]) - 1 for row in rows]
    rounds = [int(row["rounds"]) for row in rows]
    assert decoding["accepted_tokens_per_step"] == pytest.approx(
        sum(decoded) / sum(rounds), rel=1e-9
    )
    assert decoding["acceptance_rate_mean"] == pytest.approx(sum(rates) / len(rates), rel=1e-9)
    k = decoding["draft_tokens"]
    expected_rounds = sum(
        n / expected_tokens_per_round(a, k) for n, a in zip(decoded, rates, strict=True)
    )
    assert decoding["expected_tokens_per_step"] == pytest.approx(
        sum(decoded) / expected_rounds, rel=1e-9
    )
    with (plain_out / "requests.csv").open() as handle:
        header = next(csv.reader(handle))
    assert "acceptance_rate" not in header and "rounds" not in header


def _round_and_plain_ps(run: RunResult) -> tuple[int, int, int]:
    """A round's and a plain decode step's total time (integer ps, as the serving level
    advances) over the rounds the run ran, rebuilt from its step caches: per verify shape,
    the draft's k steps (a catch-up step, then single tokens at bucket + k - 1: their device
    time alone when the stack runs a round as one program), the link and the verify step,
    against the plain step (one token a slot) at the same bucket."""
    speculation = run.speculation
    assert speculation is not None and speculation.config.decoding is not None
    k = speculation.config.decoding.draft_tokens
    cache = speculation.draft_cache
    one_program = run.scenario.stack.speculative_rounds == "one_program"
    draft_ps = cache.device_ps if one_program else cache.step_ps
    round_ps = plain_ps = rounds = 0
    for shape, count in run.cache.steps.items():
        if shape.phase != "decode":
            continue
        assert shape.tokens == k + 1  # a verify step
        bucket, n = shape.cache_len, shape.batch
        draft = [StepShape("decode", n, DRAFT_CATCH_UP, bucket)]
        draft += [StepShape("decode", n, 1, bucket + k - 1)] * (k - 1)
        one = sum(draft_ps(s) for s in draft) + run.cache.step_ps(shape)
        round_ps += count * (one + speculation.link_ps(n))
        plain_ps += count * run.cache.times.timed(StepShape("decode", n, 1, bucket)).step_ps
        rounds += count
    return round_ps, plain_ps, rounds


@pytest.mark.parametrize(
    ("overrides", "slower"),
    [
        ([], False),
        (["speculation.decoding.acceptance=0.05"], True),
        (["stack.speculative_rounds=step_by_step", "speculation.decoding.acceptance=0.4"], True),
    ],
    ids=["1b-draft", "rarely-right", "step-by-step"],
)
def test_the_report_says_what_speculation_did_to_decoding(
    overrides: list[str], slower: bool
) -> None:
    """The speedup is tokens a round x the plain step / the round, over the rounds the run
    ran; a draft that is rarely right (1.05 tokens a round for the draft's steps' time), or
    right 40% of the time in rounds whose every step pays SambaStack's host time, makes
    decoding slower, and the report warns, naming the draft's share of a round."""
    run = api.run(SPECDEC, [*FEW, *overrides])
    summary = run.summary()
    assert summary.speculation is not None and summary.speculation.decoding is not None
    decoding = summary.speculation.decoding
    round_ps, plain_ps, rounds = _round_and_plain_ps(run)
    assert rounds == decoding.rounds
    assert decoding.round_s == pytest.approx(round_ps / rounds / 1e12, rel=1e-12)
    assert decoding.plain_step_s == pytest.approx(plain_ps / rounds / 1e12, rel=1e-12)
    assert decoding.accepted_tokens_per_step is not None
    expected = decoding.accepted_tokens_per_step * plain_ps / round_ps
    assert decoding.speedup == pytest.approx(expected, rel=1e-12)
    assert (decoding.speedup < 1) is slower
    # the plain step was simulated for the comparison, not counted among the run's steps
    assert summary.step_cache.shapes == len(run.cache.steps)
    # one slot: the per-user rate moves as the speedup says (a round's time spread over its
    # tokens is the user's TPOT; prefill is not in it)
    plain = api.run(SPECDEC, [*FEW, *overrides, "speculation=null"]).summary()
    spec_rate, plain_rate = summary.user_tokens_per_s.p50, plain.user_tokens_per_s.p50
    assert spec_rate is not None and plain_rate is not None
    assert (spec_rate < plain_rate) is slower
    warned = [w for w in summary.warnings if w.startswith("speculation makes decoding slower")]
    assert len(warned) == int(slower)
    data = run.to_dict()["speculation"]["decoding"]
    assert data["speedup"] == pytest.approx(expected, rel=1e-9)
    assert set(data) >= {"round_s", "plain_step_s", "speedup"}
    console = Console(width=200, record=True)
    console.print(render(summary))
    text = console.export_text()
    (row,) = [line for line in text.splitlines() if "decode speedup over plain steps" in line]
    assert f"{human.ratio(decoding.speedup)} ({decoding.accepted_tokens_per_step:.3f} tokens" in row
    assert ("warning: speculation makes decoding slower" in text) is slower
    share = decoding.draft_share_of_round
    assert share is not None
    if slower:
        words = f"the draft's steps (llama-3.2-1b) take {human.percent(share)} of a round"
        assert words in " ".join(text.split())


PAGED = [
    "hardware=dgx-h100",
    "parallelism.tp=8",
    "serving.arrival.process=poisson",
    "serving.arrival.rate=0.5",
    "serving.requests=12",
    "serving.output_tokens=64",
]
"""The 70B workload on TensorRT-LLM (a paged KV cache: a decode step batches the live
sequences), a few requests at a time."""


def test_rounds_on_a_paged_stack_run_the_live_sequences_not_the_slots() -> None:
    """A paged stack's round runs the rows its plain decode step would (the live sequences
    up the CUDA-graph ladder, at the bucket of their mean cache), so slots no request holds
    change nothing: 16 slots and 128 serve every request at the same times, and the plain
    step the report measures a round against is the one of the same rows."""
    runs = [api.run(SPECDEC, [*PAGED, f"serving.batch_slots={n}"]) for n in (16, 128)]
    few, many = (run.records for run in runs)
    assert few.finish_ps.tolist() == many.finish_ps.tolist()
    assert few.first_token_ps.tolist() == many.first_token_ps.tolist()
    for run in runs:
        verify = [s for s in run.cache.steps if s.phase == "decode"]
        assert verify and max(s.batch for s in verify) < 16  # the live ones, never the slots
        decoding = _decoding(run)
        round_ps, plain_ps, rounds = _round_and_plain_ps(run)
        assert rounds == decoding.rounds
        assert decoding.plain_step_s == pytest.approx(plain_ps / rounds / 1e12, rel=1e-12)
        assert decoding.round_s == pytest.approx(round_ps / rounds / 1e12, rel=1e-12)
    assert _decoding(runs[0]) == _decoding(runs[1])


def _decoding(run: RunResult) -> SpeculativeDecoding:
    """The run's speculative-decoding summary, every round time known."""
    spec = run.summary().speculation
    assert spec is not None and spec.decoding is not None
    decoding = spec.decoding
    assert decoding.round_s is not None and decoding.draft_share_of_round is not None
    return decoding


def _draft_s(decoding: SpeculativeDecoding) -> float:
    """The draft's steps' mean time in a round."""
    assert decoding.round_s is not None and decoding.draft_share_of_round is not None
    return decoding.draft_share_of_round * decoding.round_s


def test_a_round_run_as_one_program_pays_the_hosts_time_once() -> None:
    """SambaStack runs a round as one program (``speculative_rounds: one_program``): the
    host's time of a step is paid once a round, by the verify step, and the draft's k steps
    take their device time alone, what they take on the bare hardware (stack none). Run
    step by step, each draft step pays SambaStack's serial 1.732 ms too: k of them a round.
    A run without speculation does not read the field."""
    one = api.run(SPECDEC, FEW)
    steps = api.run(SPECDEC, [*FEW, "stack.speculative_rounds=step_by_step"])
    bare = api.run(SPECDEC, [*FEW, "stack=none"])
    stack = one.scenario.stack
    assert stack.speculative_rounds == "one_program" and stack.sampling == "device"
    host = stack.host.serial_per_step
    assert host == pytest.approx(1.732e-3)
    d_one, d_steps, d_bare = _decoding(one), _decoding(steps), _decoding(bare)
    k = d_one.draft_tokens
    # the same rounds drawn, the same verify and plain steps: the rounds k host times apart
    assert d_steps.rounds == d_one.rounds and d_steps.plain_step_s == d_one.plain_step_s
    assert d_one.round_s is not None and d_steps.round_s is not None
    assert d_steps.round_s - d_one.round_s == pytest.approx(k * host, abs=k * 1e-12)
    # the draft's part of a round: its device time, as on the bare hardware
    assert _draft_s(d_one) == pytest.approx(_draft_s(d_bare), abs=k * 1e-12)
    assert _draft_s(d_steps) == pytest.approx(_draft_s(d_one) + k * host, abs=k * 1e-12)
    # the verify step (the run's decode step) pays the host's time
    step = one.summary().decode_step
    assert step is not None and step.runtime_s == pytest.approx(host)
    plain = [
        api.run(SPECDEC, [*FEW, "speculation=null", f"stack.speculative_rounds={value}"])
        for value in ("one_program", "step_by_step")
    ]
    dicts = [run.to_dict() for run in plain]
    for data in dicts:
        data.pop("provenance")
    assert dicts[0] == dicts[1]


def test_the_report_counts_the_drafts_steps_beside_the_targets() -> None:
    """The run's step cache is the target's; the speculation section counts the draft's: a
    prefill step of each prompt (one bucket each here) and k steps a round."""
    run = api.run(SPECDEC, FEW)
    summary = run.summary()
    spec = summary.speculation
    assert spec is not None and spec.decoding is not None and run.speculation is not None
    prefills = summary.steps.prefill
    assert spec.draft_steps == prefills + spec.decoding.draft_tokens * spec.decoding.rounds
    assert spec.draft_shapes == len(run.speculation.draft_cache.shapes) == 3
    assert summary.step_cache.misses + summary.step_cache.hits == prefills + spec.decoding.rounds
    console = Console(width=200, record=True)
    console.print(render(summary))
    text = " ".join(console.export_text().split())
    assert f"target step shapes simulated │ {summary.step_cache.shapes} for " in text
    assert f"draft step shapes simulated │ 3 for {spec.draft_steps:,} steps" in text
