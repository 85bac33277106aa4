"""`rdu-sim kv-demo`: the quality proxy of SnapStream vs StreamingLLM vs full attention.

Runs the NumPy reference (rdu_sim.kv.reference) on synthetic attention with planted
"needle" tokens and prints, per cache budget, each policy's attention-output error and the
fraction of needles it kept: what a budget costs in quality, beside the memory it saves.
The KV parameters are the demo's (``DEMO_KV``), or a WORKLOAD's ``kv`` section, each with
``--set kv.FIELD=VALUE`` on top: the choices that cost the same and keep different tokens
(pooling, sinks at a fixed budget) show here, where the simulator's cost cannot show them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rdu_sim.cli.errors import fail
from rdu_sim.cli.options import GivenPath, overrides_option
from rdu_sim.config.workload import KVConfig

if TYPE_CHECKING:
    from rdu_sim.scenario import Scenario

MAX_TOKEN_STEPS = 2**20
"""Prompt tokens x decode steps the demo runs per budget at most: the NumPy reference
attends over the whole cache at every decode step of every policy (~15 s a budget here at
the bound; 65,536 tokens x 64 steps took 5 minutes)."""
MAX_BUDGETS = 8

OPTIONS = {
    "budgets": "--budget",
    "n_needles": "--needles",
    "decode_steps": "--decode-steps",
    "prompt_len": "--prompt-tokens",
}
"""The option of each argument of ``quality_curve`` a ``DemoInputError`` can name."""


def demo_kv(workload: Path | None, overrides: tuple[str, ...]) -> tuple[KVConfig, Scenario | None]:
    """The demo's KV parameters: WORKLOAD's ``kv`` (``--set`` applied, the whole workload
    checked as ``run`` checks it) and its scenario (to say an error at its fields), else
    ``DEMO_KV`` with the ``--set kv.*`` given and None."""
    from pydantic import ValidationError

    from rdu_sim.config.loader import issues_from_validation
    from rdu_sim.config.overrides import normalize_overrides, set_path
    from rdu_sim.kv.quality import DEMO_KV

    if workload is not None:
        import warnings

        from rdu_sim import api
        from rdu_sim.kv.policies import UnreadKVFieldWarning

        with warnings.catch_warnings():  # the demo reads every kv field, whatever the policy
            warnings.simplefilter("ignore", UnreadKVFieldWarning)
            scenario = api.load(workload, list(overrides))
        return scenario.workload.kv, scenario
    data: dict[str, Any] = DEMO_KV.model_dump(exclude_unset=True)
    given = normalize_overrides(overrides)
    for path, value in given.items():
        if not path.startswith("kv."):
            fail(f"--set {path}: without a WORKLOAD the demo takes kv.* settings only")
        set_path(data, path.removeprefix("kv."), value, "--set")
    try:
        return KVConfig.model_validate(data), None
    except ValidationError as exc:  # as the loader says them: at the field a rule names
        issues = issues_from_validation(exc, KVConfig, "--set", {}, prefix=("kv",), data=data)
        fail("\n".join(_at_field(issue.field, issue.message, given) for issue in issues))


def _at_field(field: str, message: str, overrides: dict[str, Any]) -> str:
    """``kv.recent: <message> (from --set kv.recent)``: an error at a KV field, ending with
    the override that set it (``config.overrides.override_note``), as ``run`` ends it."""
    from rdu_sim.config.overrides import override_for, override_note

    path = override_for(field, overrides)
    return f"{field}: {message}" + ("" if path is None else f" {override_note(path)}")


@click.command("kv-demo")
@click.argument("workload", type=GivenPath(), required=False)
@overrides_option
@click.option(
    "--prompt-tokens",
    type=click.IntRange(64, 65536),
    default=None,
    help="Prompt length of the synthetic example [default: 1,024, or 4x the smallest "
    "SnapStream layout or the budget the KV parameters give, when larger].",
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
    workload: Path | None,
    overrides: tuple[str, ...],
    prompt_tokens: int | None,
    budgets: tuple[int, ...],
    needles: int,
    decode_steps: int,
    seed: int,
    as_json: bool,
) -> None:
    """Attention-output error and needle recall of each KV policy as the budget shrinks.

    WORKLOAD (optional) and --set kv.FIELD=VALUE give the KV parameters: kv.sinks,
    kv.observation_window, kv.kernel_size, kv.pooling, kv.recent (SnapStream's ring, when
    given; else the observation window), kv.budget or kv.compression_ratio (the one budget
    run, unless --budget is given)."""
    from rdu_sim.config.overrides import normalize_overrides
    from rdu_sim.kv.policies import PolicyError
    from rdu_sim.kv.quality import (
        SYNTHETIC,
        DemoInputError,
        demo_budgets,
        demo_prompt,
        demo_ring,
        format_table,
        quality_curve,
        settings_lines,
    )

    kv, scenario = demo_kv(workload, overrides)
    ring = demo_ring(kv)
    if prompt_tokens is None:
        prompt_tokens = demo_prompt(kv, min(65536, MAX_TOKEN_STEPS // decode_steps))
    budgets = tuple(dict.fromkeys(budgets))
    from_kv = not budgets and demo_budgets(kv, prompt_tokens) is not None
    if from_kv:
        budgets = tuple(demo_budgets(kv, prompt_tokens) or ())
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
            kv=kv,
            ring=ring,
        )
    except DemoInputError as exc:
        option = OPTIONS[exc.parameter]
        if from_kv and exc.parameter == "budgets":
            option = "kv.budget" if kv.budget is not None else "kv.compression_ratio"
        fail(f"{option}: {exc}")
    except PolicyError as exc:  # a rule of the KV fields: blamed as `run` blames it
        if scenario is not None:
            fail(scenario.at_field(exc.blamed(scenario.overrides), str(exc)))
        given = normalize_overrides(overrides)
        fail(_at_field(exc.blamed(given), str(exc), given))
    if as_json:
        click.echo(json.dumps(rows, sort_keys=True))
        return
    for line in settings_lines(prompt_tokens, needles, decode_steps, seed, kv=kv, ring=ring):
        click.echo(line)
    whole = [b for b in budgets if b >= prompt_tokens + decode_steps]  # asked for, either way
    if whole:
        click.echo(
            f"the budget {whole[0]:,} holds the whole sequence: nothing is evicted (a longer "
            "--prompt-tokens compresses)"
        )
    click.echo()
    click.echo(format_table(rows))
    click.echo(
        "\nrelative error: |out - full| / |full| of the attention output over the decode "
        "steps;\nneedle recall: planted tokens still in the cache. Full attention is the "
        "reference (0, 1)."
    )
    click.echo(SYNTHETIC)
