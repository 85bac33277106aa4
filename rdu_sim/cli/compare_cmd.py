"""`rdu-sim compare WORKLOAD --hardware A --hardware B [--vary PATH=X,Y]`: variants side by side.

Each variant (a hardware file, a value of each varied field, or every combination of both)
runs the workload as written with its `hardware` field replaced and its varied fields set,
compiled and timed for that hardware (rdu_sim/compare.py says what is measured): a table
with one column per variant, a line per variant saying what differs and what binds its decode
step, a line when the columns run different serving stacks (and how to compare alike), why
each wins or loses against the first (rdu_sim/compare/why.py: the host time each stack adds
a factor of its own where they differ), and a line saying
that those are single decode steps at one context, which a serving run (`rdu-sim run`) need
not match; or with `--json` one JSON object (`columns` in the order given, `lines`,
`verdicts`, `scope`). A system the model does
not fit is a column saying so; a system that cannot take the workload (a rule across the
files: `tp=16` on an 8-GPU system) is a column not run with the rule's sentence while the
others run (`unsupported` and `invalid` in the JSON), and so is a combination of varied
values the workload refuses while each value runs in another (`invalid`); the exit status
is then 0, as for any column saying why, whenever one column ran. When none ran (the model
fits no system given, or each refuses it), exit 2 with each column's reason on an error
line (`compare.nothing_runs`), as `run` exits 2 for one; a value no combination accepts or
a hardware file wrong in itself is one error line, exit 2. What
compare does not time is said under the table: a draft's part, for each column with one; a
Composition of Experts' serving (its columns time one expert); and that a `--vary` of a
speculation or coe field moves at most the memory plan (compare/why.py `not_compared`).
`--set` applies to every run (a `hw.` path must exist in every hardware file given).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from rdu_sim import human
from rdu_sim.cli.errors import fail
from rdu_sim.cli.main import STOPS
from rdu_sim.cli.options import (
    GivenPath,
    TokenCount,
    overrides_option,
    step_shape_errors,
    workload_argument,
)
from rdu_sim.compare import Column, Comparison, compare, nothing_runs
from rdu_sim.config.economics import figure_words
from rdu_sim.config.parallelism import describe_layout
from rdu_sim.config.stack import NONE
from rdu_sim.interrupts import keeps_on_stop
from rdu_sim.report.bound import LABELS, bound_label


def _count(value: int | None) -> str:
    return human.MISSING if value is None else f"{value:,}"


def _devices(column: Column) -> str:
    """``64 (4 x tp=16)``: the system's devices, and the model instances on them, each a
    replica of the layout (``describe_layout``)."""
    if not column.layout:  # an invalid combination: nothing was laid out
        return human.MISSING
    return f"{column.devices} ({column.instances} x {describe_layout(column.layout)})"


def _per_rank(column: Column, slots: int | None) -> str:
    """`` (64 a rank)`` after an instance's slots under data-parallel attention."""
    if column.attention_ranks == 1 or slots is None:
        return ""
    return f" ({slots // column.attention_ranks:,} a rank)"


def _cap(column: Column) -> str:
    """`` (the stack's max_batch_slots; memory holds 2,229)`` when the stack bounds the
    batch capacity below what memory holds (``Column.capacity_limit``); nothing when memory
    does."""
    if column.capacity_limit in (None, "memory") or column.memory_capacity is None:
        return ""
    return f" (the stack's {column.capacity_limit}; memory holds {column.memory_capacity:,})"


def _prompt(column: Column) -> str:
    """`` (2,304 tokens, bucket 3,072)``: the typical prompt and the static shape it runs
    at, as a server pads it (`` (20,000 tokens, 3 chunks of 8,192)`` when chunked; the
    tokens alone when the prompt is its bucket; ``, compressed`` when the column's KV policy
    compresses it)."""
    kept = ", compressed" if column.prefill_compressed else ""
    return _shape(column.prefill_tokens, column.prefill_bucket, column.prefill_steps, kept)


def _shape(tokens: int | None, bucket: int | None, steps: int | None, more: str) -> str:
    """A prompt's tokens and the static shape a server runs it at, in parentheses."""
    if tokens is None:
        return ""
    if steps is not None and steps > 1 and bucket is not None:
        return f" ({tokens:,} tokens, {steps} chunks of {bucket:,}{more})"
    if bucket is not None and bucket != tokens:
        return f" ({tokens:,} tokens, bucket {bucket:,}{more})"
    return f" ({tokens:,} tokens{more})"


def _long_prompt(column: Column) -> str:
    """A compressing policy's prompts past its budget: the prefill of their median and their
    share of the requests (`` (39,717 tokens, bucket 40,960; 0.5% of requests)``)."""
    if column.long_prefill_s is None or column.long_prefill_share is None:
        return human.MISSING
    share = f"; {column.long_prefill_share:.1%} of requests"
    return human.duration(column.long_prefill_s) + _shape(
        column.long_prefill_tokens, column.long_prefill_bucket, None, share
    )


def _stack(column: Column) -> str:
    """The serving stack's name, or ``none (the device alone)`` (``served_by``'s words)."""
    if not column.stack:  # an invalid combination: nothing was loaded
        return human.MISSING
    return f"{NONE} (the device alone)" if column.stack == NONE else column.stack


def _dtypes(column: Column) -> str:
    """``fp8 / fp8 / bf16``: the stored types of the weights (``bf16, experts mxfp4`` when
    the routed experts' differ), the KV cache and the activations."""
    stored = column.dtypes
    if not stored:  # an invalid combination: nothing was loaded
        return human.MISSING
    weights = stored["weights"]
    if "experts" in stored:
        weights += f", experts {stored['experts']}"
    return f"{weights} / {stored['kv']} / {stored['activations']}"


def _served(column: Column) -> str:
    """``3,453 (prefill 77.2% of the time)``: the whole system's served output tokens/s,
    prefill included, and prefill's share of that time."""
    if column.system_served_tokens_per_s is None:
        return human.MISSING
    share = human.percent(column.prefill_share)
    return f"{human.number(column.system_served_tokens_per_s)} (prefill {share} of the time)"


def _prefill_bound(column: Column) -> str:
    """``link, 420 ms of 423 ms``: what binds the typical prompt's prefill step as it runs
    (``compute, 210 ms of 333 ms (3 prompts)`` when the stack packs them), that resource's
    time and the step's (the verdict names a link's class,
    ``prefill_bound_words``; ``(largest part)`` when it takes under half the step)."""
    if column.prefill_bound is None or column.prefill_step_s is None:
        return human.MISSING
    limit = column.prefill_bound_s or 0.0
    part = bound_label(limit, column.prefill_step_s) != "bound by"
    packed = column.prefill_packed or 1
    return (
        f"{LABELS[column.prefill_bound]}{' (largest part)' if part else ''}, "
        f"{human.duration(limit)} of {human.duration(column.prefill_step_s)}"
        + (f" ({packed} prompts)" if packed > 1 else "")
    )


def _per_device(column: Column) -> str:
    """``1,728 / 9,146``: served and decode-step tokens/s per device of the whole system."""
    if column.system_served_tokens_per_s is None or column.system_tokens_per_s is None:
        return human.MISSING
    served = column.system_served_tokens_per_s / column.devices
    return f"{human.number(served)} / {human.number(column.system_tokens_per_s / column.devices)}"


def _power(column: Column) -> str:
    """The whole system's draw while serving and what the file's figure is (``10.2 kW, a
    maximum, an upper bound``; ``5.74 kW, an average``: tokens per joule side by side lean
    towards the average), or that its hardware file gives none."""
    if column.power_w is None:
        return human.MISSING if column.invalid else NO_POWER
    figure = "" if column.power_figure is None else f", {figure_words(column.power_figure)}"
    return human.si(column.power_w, "W") + figure


NO_POWER = "not given (hw.power)"
"""The power cell of a hardware file without ``power``."""


def _per_joule(column: Column) -> str:
    """``0.301 / 1.59``: served and decode-step tokens per joule of the whole system."""
    if column.served_tokens_per_joule is None or column.tokens_per_joule is None:
        return human.MISSING
    served, decode = column.served_tokens_per_joule, column.tokens_per_joule
    return f"{human.number(served)} / {human.number(decode)}"


def _flops_share(column: Column) -> str:
    """``12.3% of 1,979 TFLOP/s fp8``: the decode step's share of peak FLOP/s, naming the
    peak (its type: a GPU's tensor rate at its weights' type, SN40L's bf16)."""
    if column.flops_fraction is None:
        return human.MISSING
    peak = f"{human.flops(column.peak_flops)} {column.peak_flops_type}".rstrip()
    return f"{human.percent(column.flops_fraction)} of {peak} peak"


ROWS: tuple[tuple[str, Callable[[Column], str]], ...] = (
    ("hardware", lambda c: c.hardware),
    ("kind", lambda c: c.kind),
    ("devices (instances x layout)", _devices),
    ("serving stack", lambda c: _stack(c)),
    ("fusion", lambda c: c.fusion),
    ("dtypes (weights / KV / activations)", _dtypes),
    (
        "batch capacity",
        lambda c: _count(c.batch_capacity) + _per_rank(c, c.batch_capacity) + _cap(c),
    ),
    (
        "batch / cached tokens",
        lambda c: "-" if c.batch is None else f"{c.batch:,}{_per_rank(c, c.batch)} / {c.context:,}",
    ),
    ("decode step", lambda c: human.duration(c.step_s)),
    ("decode-step tokens/s per user", lambda c: human.number(c.tokens_per_s_per_user)),
    ("decode-step tokens/s (one instance)", lambda c: human.number(c.tokens_per_s)),
    ("decode-step tokens/s (whole system)", lambda c: human.number(c.system_tokens_per_s)),
    ("served tokens/s, prefill included (whole system)", _served),
    ("tokens/s per device (served / decode-step)", _per_device),
    ("power (whole system)", _power),
    ("tokens per joule (served / decode-step)", _per_joule),
    ("peak HBM bandwidth / device", lambda c: human.bandwidth(c.peak_hbm_bandwidth or None)),
    ("share of peak HBM bandwidth", lambda c: human.percent(c.hbm_bandwidth_fraction)),
    ("share of peak FLOP/s", _flops_share),
    ("kernel calls per step", lambda c: _count(c.kernel_calls)),
    ("prefill, typical prompt alone in a step", lambda c: human.duration(c.prefill_s) + _prompt(c)),
    ("prefill step bound by", _prefill_bound),
    ("prefill, median prompt past the KV budget", _long_prompt),
)
LONG_ROW = ROWS[-1][0]
"""Printed only when some column's policy compresses a prompt the workload sends."""
PER_DEVICE_ROW = "tokens/s per device (served / decode-step)"
"""Printed only when the columns that ran hold different numbers of devices (the whole
systems' tokens/s then compare systems of different sizes)."""


def print_comparison(result: Comparison) -> None:
    """The comparison as one rich table, a column per variant; under it a line per variant
    (what differs, what binds it; or why it does not fit) and each verdict."""
    table = Table(title=f"{result.workload}: {result.model}", title_justify="left")
    table.add_column("")
    for column in result.columns:
        table.add_column(column.label, justify="right")
    long = any(c.long_prefill_s is not None for c in result.columns)
    sizes = {c.devices for c in result.columns if c.fits}
    for label, cell in ROWS:
        if (label == LONG_ROW and not long) or (label == PER_DEVICE_ROW and len(sizes) < 2):
            continue
        table.add_row(label, *(cell(c) for c in result.columns))
    console = Console(soft_wrap=True)
    console.print(table)
    for line in [*result.lines, *result.verdicts, *filter(None, [result.scope])]:
        console.print(line, markup=False)


STOPPED = STOPS["compare"]
"""What a stop of the command says was kept."""


@click.command("compare")
@workload_argument
@click.option(
    "--hardware",
    "hardware_files",
    multiple=True,
    type=GivenPath(),
    help="A hardware file, or a shipped one by name (sn40l-8, dgx-h100), to run the workload "
    "on (repeat for each column).",
)
@click.option(
    "--vary",
    multiple=True,
    metavar="PATH=A,B[,C]",
    help="A field to vary, with its values, as --set paths and values (kv.policy=full,"
    "snapstream; parallelism.tp=8,16): a column per value, every combination with --hardware "
    "and other --vary. Repeatable. A section's values as mappings vary several fields "
    "together: --vary 'parallelism={tp: 16, dp_attention: 1, ep: 1},{tp: 1, dp_attention: "
    "64, ep: 64}'. A combination the workload refuses is a column saying why (a value no "
    "combination accepts is an error).",
)
@click.option(
    "--batch",
    type=click.IntRange(1, 1_000_000),
    default=None,
    help="Batch slots of the decode step, an attention rank's under parallelism.dp_attention "
    "(as `rdu-sim step --batch` and serving.batch_slots count them; the table shows the whole "
    "instance's) (default: the workload's serving.batch_slots; when that is 'auto', each "
    "system's own batch capacity).",
)
@click.option(
    "--context",
    type=TokenCount(0),
    default=None,
    help="Tokens of the decode step's longest sequence (default: serving.max_context); the "
    "step attends to what the KV policy keeps of them, rounded up to its decode bucket.",
)
@overrides_option
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as one JSON object.")
@keeps_on_stop(STOPPED)
def command(
    workload: Path,
    hardware_files: tuple[Path, ...],
    vary: tuple[str, ...],
    batch: int | None,
    context: int | None,
    overrides: tuple[str, ...],
    as_json: bool,
) -> None:
    """Run WORKLOAD on each --hardware and each value of each --vary and show step time,
    tokens/s, share of peak, what binds each and why one wins."""
    if not hardware_files and not vary:
        fail(
            "compare: give --hardware (a system per column) or --vary PATH=A,B (a value per column)"
        )
    with step_shape_errors(workload):  # a --context beyond serving.max_context, say
        result = compare(
            workload,
            hardware_files,
            overrides,
            vary=vary,
            batch=batch,
            context=context,
            flags=True,
        )
    refused = nothing_runs(result)
    if refused is not None:  # no system given runs it: bad input, as `run` says (exit 2)
        raise refused
    if as_json:
        click.echo(json.dumps(result.to_dict(), sort_keys=True))
    else:
        print_comparison(result)
