"""`rdu-sim kv-demo`: the quality proxy of SnapStream vs StreamingLLM vs full attention.

Runs the NumPy reference (rdu_sim.kv.reference) on synthetic attention with planted
"needle" tokens and prints, per cache budget, each policy's attention-output error and the
fraction of needles it kept: what a budget costs in quality, beside the memory it saves.
"""

from __future__ import annotations

import json

import click

from rdu_sim.cli.errors import fail

MAX_TOKEN_STEPS = 2**20
"""Prompt tokens x decode steps the demo runs per budget at most: the NumPy reference
attends over the whole cache at every decode step of every policy (~15 s a budget here at
the bound; 65,536 tokens x 64 steps took 5 minutes)."""
MAX_BUDGETS = 8

OPTIONS = {"budgets": "--budget", "n_needles": "--needles", "decode_steps": "--decode-steps"}
"""The option of each argument of ``quality_curve`` a ``DemoInputError`` can name."""


@click.command("kv-demo")
@click.option(
    "--prompt-tokens",
    type=click.IntRange(64, 65536),
    default=1024,
    show_default=True,
    help="Prompt length of the synthetic example.",
)
@click.option(
    "--budget",
    "budgets",
    type=click.IntRange(1, 1_000_000),
    multiple=True,
    help="Cache budget in tokens (repeatable; at least SnapStream's sinks + ring, which the "
    "output's settings give); default: 1/16 .. 1/2 of the prompt (none below that) and one "
    "that keeps everything.",
)
@click.option(
    "--needles",
    type=click.IntRange(1, 1024),
    default=8,
    show_default=True,
    help="Planted tokens the decode queries attend to strongly.",
)
@click.option("--decode-steps", type=click.IntRange(1, 10_000), default=8, show_default=True)
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the rows as one JSON list.")
def command(
    prompt_tokens: int,
    budgets: tuple[int, ...],
    needles: int,
    decode_steps: int,
    seed: int,
    as_json: bool,
) -> None:
    """Attention-output error and needle recall of each KV policy as the budget shrinks."""
    from rdu_sim.kv.quality import DemoInputError, format_table, quality_curve, settings_lines

    budgets = tuple(dict.fromkeys(budgets))
    if len(budgets) > MAX_BUDGETS:
        fail(f"--budget given {len(budgets)} values; the demo runs at most {MAX_BUDGETS}")
    if prompt_tokens * decode_steps > MAX_TOKEN_STEPS:
        fail(
            f"--prompt-tokens {prompt_tokens:,} x --decode-steps {decode_steps:,} = "
            f"{prompt_tokens * decode_steps:,} token-steps a budget; the demo runs at most "
            f"{MAX_TOKEN_STEPS:,} (minutes): fewer decode steps or a shorter prompt"
        )

    try:
        rows = quality_curve(
            prompt_len=prompt_tokens,
            budgets=list(budgets) or None,
            seed=seed,
            n_needles=needles,
            decode_steps=decode_steps,
        )
    except DemoInputError as exc:
        fail(f"{OPTIONS[exc.parameter]}: {exc}")
    if as_json:
        click.echo(json.dumps(rows, sort_keys=True))
        return
    for line in settings_lines(prompt_tokens, needles, decode_steps, seed):
        click.echo(line)
    click.echo()
    click.echo(format_table(rows))
    click.echo(
        "\nrelative error: |out - full| / |full| of the attention output over the decode "
        "steps;\nneedle recall: planted tokens still in the cache. Full attention is the "
        "reference (0, 1)."
    )
