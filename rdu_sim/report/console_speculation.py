"""The speculation table of a run's human report (from its typed summary)."""

from __future__ import annotations

from rich.table import Table

from rdu_sim import human
from rdu_sim.report.speculation import SpeculationSummary, SpeculativeDecoding


def _speedup(decoding: SpeculativeDecoding) -> str:
    """The speedup of a slot's decoding and what it is: tokens a round x the target's plain
    decode step / a round (each a mean over the rounds run)."""
    if decoding.speedup is None or decoding.round_s is None or decoding.plain_step_s is None:
        return human.MISSING
    return (
        f"{human.ratio(decoding.speedup)} ({decoding.accepted_tokens_per_step or 0:.3f} tokens "
        f"a round x {human.duration(decoding.plain_step_s)} plain step / "
        f"{human.duration(decoding.round_s)} round)"
    )


def _draft_share(decoding: SpeculativeDecoding) -> str:
    """The draft's k steps' share of a round (each a mean over the rounds run)."""
    share, round_s = decoding.draft_share_of_round, decoding.round_s
    if share is None or round_s is None:
        return human.MISSING
    return f"{human.percent(share)} ({human.duration(share * round_s)} of the round)"


def speculation_table(spec: SpeculationSummary) -> Table:
    """The draft, its memory, rounds and acceptance, its share of a round, prefill saving."""
    table = Table(title="Speculation", title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    memory = spec.draft_memory
    rows = [
        ("draft", f"{spec.draft} ({spec.placement} sockets, tp={spec.draft_tp})"),
        (
            "draft memory per socket",
            f"{human.size(memory.weights_bytes)} weights, {human.size(memory.kv_bytes)} KV",
        ),
        (
            "draft step shapes simulated",
            f"{spec.draft_shapes:,} for {human.count(spec.draft_steps, 'step')} (each "
            "simulated once)",
        ),
    ]
    decoding = spec.decoding
    if decoding is not None:
        rows += [
            ("draft tokens per round (k)", str(decoding.draft_tokens)),
            ("acceptance rate (mean over requests)", f"{decoding.acceptance_rate_mean:.3g}"),
            (
                "tokens per round: run / expected",
                f"{decoding.accepted_tokens_per_step or 0:.3f} / "
                f"{decoding.expected_tokens_per_step:.3f}",
            ),
            ("rounds (target verify steps)", f"{decoding.rounds:,}"),
            ("draft steps' share of a round", _draft_share(decoding)),
            ("decode speedup over plain steps", _speedup(decoding)),
        ]
    prefill = spec.prefill
    if prefill is not None:
        saved = prefill.full_s - prefill.draft_s - prefill.mapping_s - prefill.target_s
        rows += [
            (
                "typical prompt: kept tokens",
                f"{prefill.kept_tokens:,} of {prefill.prompt_tokens:,}",
            ),
            (
                "prefill: draft + mapping + target",
                f"{human.duration(prefill.draft_s)} + {human.duration(prefill.mapping_s)} + "
                f"{human.duration(prefill.target_s)}",
            ),
            (
                "prefill without speculation",
                f"{human.duration(prefill.full_s)} (saved {human.duration(saved)})",
            ),
            (
                "KV selection (compressing policy)",
                f"whole prompt: {'yes' if prefill.compresses_full else 'no'}, "
                f"kept: {'yes' if prefill.compresses_kept else 'no'}",
            ),
        ]
    for name, value in rows:
        table.add_row(name, value)
    return table
