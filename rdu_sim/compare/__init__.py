"""One workload under several variants, side by side (``rdu-sim compare``).

A variant is a hardware file (``--hardware``), a value of each varied field (``--vary
PATH=A,B``), or one of each: the variants are every combination, hardware first, in the
order given. For each the workload is loaded with ``hardware`` pointing at its hardware file
and the varied fields set (every other field as written, ``--set`` overrides applied to
all), compiled for that hardware (its fusion level: ``auto`` is full on SN40L and partial
on a GPU) and timed by its engine: one
decode step of ``batch`` slots at the decode bucket of ``context`` cached tokens (defaults:
the workload's batch slots, or each system's own batch capacity when they say ``auto``; the
longest cache the KV policy keeps), and the prefill of the workload's typical prompt, the
same prompt in every column (``serving.step_shape.typical_prefill``), as a server runs it:
padded up to its compiled prompt bucket or cut into chunks (``serving.run.prefill_seconds``,
what a run's ``prefill_s`` times; a compressing policy's prompts past its budget are timed
too, at their median, with their share of the requests, ``long_prompts``; the
target's alone: a draft's part is not compared, and the lines say so of each column with a
draft, and of a varied field compare does not time, ``why.not_compared``). A Composition of
Experts' column times one expert as its run does (``_coe_expert``: the batch capacity of the
CoE memory plan, not its turns, switches or router, which the lines say). A system the model
does not fit (weights, KV cache and activations beyond its memory, or a ``batch`` of
sequences more than a paged stack's KV pool holds: ``rdu-sim step``'s warning,
``serving.backend.over_pool_words``) is a column saying so, with the reason, not an error;
so is a system that refuses the workload by a rule across the files (``CombinationError``:
``tp=16`` on an 8-GPU system) while another system runs it, a column not run
(``unsupported``) with the rule's sentence; and so is a combination of varied values the
workload refuses while each value runs in another combination (``dp_attention=16`` with
``ep=64``), with the refusal's reason. A value no combination accepts, a hardware file wrong
in itself, or a workload every variant refuses is an error, one line, before anything is
simulated; a comparison no column of which ran (the model fits none) is returned as it is,
and ``nothing_runs`` gives the error the CLI exits 2 with.

Each column names the serving stack it ran under and reports the step time, decode-step
tokens/s per user (one token per step) and in total (the batch's tokens per step, for one
model instance, a replica of the workload's layout over ``tp x dp_attention x pp`` devices
with every attention rank's batch, and for every instance the system holds), the served
tokens/s with prefill included (``served_rate``: each request's prefill beside its output
tokens' decode steps), the system's power and tokens per joule (``report.energy``'s rule),
its dtypes, and the share of its peak HBM bandwidth and FLOP/s (the peak named with its
type) the step achieved, and what binds the decode step. It says what its figures rest on:
what its file's power is (``power.figure``, an average or a datasheet's maximum), whether
its batch capacity is memory's or its stack's cap (``StackConfig.batch_limit``, with what
memory holds), whether its hardware is predicted from another machine's fit
(``config.origins.predicted_words``), and the run's warnings its memory plan and its
requests' prompts earn
(``report.bound``); ``rdu_sim.compare.why`` says in words what differs and why one variant
wins. ``compare_batches`` repeats the comparison over batch sizes (the notebook's curves,
the ``compare`` plot's lines).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from os import PathLike
from pathlib import Path
from typing import Any

from rdu_sim import human
from rdu_sim.api import EngineBackend, default_step_shape, load
from rdu_sim.compare.column import Column, Comparison
from rdu_sim.compare.why import column_lines, not_compared, scope, stacks_differ, verdicts
from rdu_sim.compiler import CapacityError
from rdu_sim.compiler.fusion import fusion_level
from rdu_sim.compiler.placement import placement_warnings
from rdu_sim.config import shipped
from rdu_sim.config.errors import CombinationError, ConfigError
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.loader import did_you_mean
from rdu_sim.config.origins import predicted_words
from rdu_sim.config.overrides import (
    API,
    GivenOverrides,
    SetSource,
    normalize_overrides,
    origin_of,
    parse_override,
    source_of,
)
from rdu_sim.config.parallelism import replica_batch, replica_devices
from rdu_sim.config.yaml_io import checked_file
from rdu_sim.engine.for_hardware import peak_matrix_flops, peak_matrix_type
from rdu_sim.engine.timing import StepTiming
from rdu_sim.input_errors import InputError
from rdu_sim.report.bound import step_bound
from rdu_sim.report.energy import machine_watts
from rdu_sim.scenario import Scenario
from rdu_sim.serving.backend import over_pool_words, step_batch
from rdu_sim.serving.coe import (
    coe_capacity,
    coe_room,
    expert_step_scenario,
    region_experts,
    router_scenario,
)
from rdu_sim.serving.limits import unchunked_words
from rdu_sim.serving.run import prefill_seconds, scenario_requests, served_prefill_steps
from rdu_sim.serving.step_cache import StepCache
from rdu_sim.serving.step_shape import long_prompts, typical_prefill
from rdu_sim.shapes import StepShape

__all__ = [
    "Column",
    "Comparison",
    "NothingRunsError",
    "Variant",
    "compare",
    "compare_batches",
    "nothing_runs",
    "parse_vary",
    "served_rate",
    "variants",
]

MAX_VARIANTS = 64
"""Most columns one comparison runs: a table and a bar chart read side by side (a grid of
any size is a sweep)."""

Overrides = Iterable[str] | Mapping[str, Any] | None


@dataclass(frozen=True)
class Variant:
    """What one variant sets beyond the overrides shared by all: field path -> value as the
    user wrote it (``hardware``: a file or a shipped name)."""

    settings: dict[str, Any]

    def label(self, hardware_name: str) -> str:
        """What differs, in a few words: the hardware's name (when it varies), then
        PATH=VALUE of each varied field."""
        parts = [
            hardware_name if path == "hardware" else f"{path}={_shown(value)}"
            for path, value in self.settings.items()
        ]
        return ", ".join(parts) or hardware_name


def _shown(value: Any) -> str:
    """A varied value as ``--vary`` takes it: YAML's words and flow form (``null``,
    ``true``, ``{tp: 16, pp: 4}``), not Python's repr (``None``, ``True``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return str(value)


def parse_vary(text: str) -> tuple[str, list[Any]]:
    """``kv.policy=full,snapstream`` -> ('kv.policy', ['full', 'snapstream']): two values or
    more, split at the commas outside brackets and quotes, each read as ``--set`` reads its
    value (``config.overrides.parse_override``)."""
    if "=" not in text:
        raise ConfigError.single("--vary", text, "give a field and its values, as PATH=A,B[,C]")
    path, _, raw = text.partition("=")
    pieces = _split_top_level(raw)
    if len(pieces) < 2 or any(not piece.strip() for piece in pieces):
        raise ConfigError.single(
            "--vary", path.strip(), f"give two values or more, as PATH=A,B[,C]; got {raw!r}"
        )
    parsed = [parse_override(f"{path}={piece}", "--vary") for piece in pieces]
    values = [value for _, value in parsed]
    if len({repr(v) for v in values}) != len(values):
        raise ConfigError.single("--vary", parsed[0][0], f"a value is given twice in {raw!r}")
    return parsed[0][0], values


def _split_top_level(raw: str) -> list[str]:
    """``raw`` split at its commas outside [], {} and quotes."""
    pieces, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(raw):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            pieces.append(raw[start:i])
            start = i + 1
    pieces.append(raw[start:])
    return pieces


def variants(hardware_files: Sequence[str | Path], vary: Sequence[str] = ()) -> list[Variant]:
    """Every combination of the hardware files and the varied fields' values (hardware
    first, then each ``--vary`` in the order given); one empty variant when nothing varies."""
    axes: list[list[tuple[str, Any]]] = []
    if hardware_files:
        axes.append([("hardware", str(h)) for h in hardware_files])
    seen = {"hardware"} if hardware_files else set()
    for text in vary:
        path, values = parse_vary(text)
        if path in seen:
            other = "--hardware" if path == "hardware" else f"--vary {path}=..."
            raise ConfigError.single("--vary", path, f"already varied by {other}; give it once")
        seen.add(path)
        axes.append([(path, v) for v in values])
    count = math.prod(len(axis) for axis in axes)
    if count > MAX_VARIANTS:
        raise ConfigError.single(
            "--vary",
            " x ".join(axis[0][0] for axis in axes),
            f"{count:,} variants; a comparison shows at most {MAX_VARIANTS} side by side"
            " (`rdu-sim sweep` runs a grid of any size)",
        )
    return [Variant(dict(combination)) for combination in itertools.product(*axes)]


def compare(
    workload: str | Path,
    hardware_files: Sequence[str | Path],
    overrides: Overrides = None,
    *,
    vary: Sequence[str] = (),
    batch: int | None = None,
    context: int | None = None,
    flags: bool = False,
) -> Comparison:
    """The workload under each variant: each of ``hardware_files`` x each value of each
    ``vary`` (``PATH=A,B``; module docstring). ``flags``: an error at a varied field names
    the command line's flag (``--vary``, ``--hardware``), as ``rdu-sim compare`` asks; else
    this function's argument (``vary``, ``hardware_files``). One str (or Path) given for
    either list is a TypeError naming it, not a column per character."""
    for name, given in (("hardware_files", hardware_files), ("vary", vary)):
        if isinstance(given, str | bytes | PathLike):  # one str was read a character at a time
            raise TypeError(
                f"{name} must be a list (one entry per column axis), not one "
                f"{type(given).__name__} {str(given)!r}: give [{str(given)!r}]"
            )
    if not hardware_files and not vary:
        raise ValueError("give at least one hardware file or varied field")
    sides = variants(hardware_files, vary)
    shared = normalize_overrides(overrides)
    for path in (p for p in sides[0].settings if p in shared):
        raise ConfigError.single("--vary", path, "also given by --set; give it once")
    # every variant is validated before any is simulated: a bad one costs no simulation
    given = _origins(sides, bool(hardware_files), flags, origin_of(overrides, API))
    loaded = [_load(workload, GivenOverrides(shared, given), side) for side in sides]
    _refuse_values_never_valid(sides, loaded)
    first = next(found for found in loaded if isinstance(found, Scenario))
    refusing = _refusing_systems(sides, loaded)
    columns = tuple(
        _invalid_column(side, found, first, side.settings.get("hardware") in refusing)
        if isinstance(found, ConfigError)
        else _column(found, side, batch, context)
        for found, side in zip(loaded, sides, strict=True)
    )
    varied = list(sides[0].settings)
    lines = [
        *column_lines(columns),
        *stacks_differ(columns, varied),
        *not_compared(columns, varied),
    ]
    return Comparison(
        first.workload.name,
        first.model.name,
        columns,
        tuple(lines),
        tuple(verdicts(columns)),
        scope(columns, context_given=context is not None),
    )


class NothingRunsError(InputError):
    """No variant given runs the workload (the model fits none, each refuses it): a
    comparison of nothing, bad input as a run of it is (``rdu-sim compare`` exits 2). Its
    message is each column's reason, a line each, led by its label when there are several."""


def nothing_runs(result: Comparison) -> NothingRunsError | None:
    """The error of a comparison no column of which ran (:class:`NothingRunsError`), None
    when one did: what ``rdu-sim compare`` raises, where ``compare`` returns the columns
    (``compare_batches`` at a batch none holds: each column says why)."""
    if any(column.fits for column in result.columns):
        return None
    if len(result.columns) == 1:
        return NothingRunsError(result.columns[0].reason)
    return NothingRunsError(
        "\n".join(f"{column.label}: {column.reason}" for column in result.columns)
    )


def _origins(
    sides: Sequence[Variant], hardware_files: bool, flags: bool, shared: str
) -> SetSource | str:
    """Where the overrides each variant is loaded with were given: the shared ones where
    ``shared`` says (``config.overrides.origin_of``), a varied field by the flag that varied
    it, ``(from --vary stack)``, ``(from --hardware)`` (``flags``), else by this module's
    argument, ``vary: stack``, ``hardware_files``."""
    origins = dict(shared.origins) if isinstance(shared, SetSource) else {}
    vary = "--vary " if flags else "vary: "
    origins.update({path: vary + path for path in sides[0].settings if path != "hardware"})
    if "hardware" in sides[0].settings:
        if hardware_files:
            origins["hardware"] = "--hardware" if flags else "hardware_files"
        else:
            origins["hardware"] = vary + "hardware"
    return SetSource(str(shared), origins) if origins else shared


def _load(workload: str | Path, shared: Mapping[str, Any], side: Variant) -> Scenario | ConfigError:
    """The variant's scenario, or the ConfigError that refuses it."""
    try:
        return load(workload, _with_settings(shared, side))
    except ConfigError as exc:
        return exc


def _refusing_systems(
    sides: Sequence[Variant], loaded: Sequence[Scenario | ConfigError]
) -> set[object]:
    """The hardware values (``--hardware``) that refuse the workload in every combination,
    each by a rule across the files (``CombinationError``: its tp beyond the system's
    devices, a layout its wiring cannot run): systems the workload does not run on, each a
    column not run with the rule's sentence, as one the model does not fit is a column."""
    if not sides or "hardware" not in sides[0].settings:
        return set()
    outcomes: dict[object, list[Scenario | ConfigError]] = {}
    for side, found in zip(sides, loaded, strict=True):
        outcomes.setdefault(side.settings["hardware"], []).append(found)
    return {
        system
        for system, found in outcomes.items()
        if all(isinstance(f, CombinationError) for f in found)
    }


def _refuse_values_never_valid(
    sides: Sequence[Variant], loaded: Sequence[Scenario | ConfigError]
) -> None:
    """Raise the error of a varied value no combination accepts (a typo, ``tp=16`` on every
    8-GPU system given, a hardware file that is itself wrong, or, when every variant is
    refused, the first one's): that is a bad input, one error line. A combination refused
    while each of its values runs in another (``dp_attention=16`` with ``ep=64``, beside
    ``dp_attention=16, ep=16`` and ``dp_attention=64, ep=64``) is a column saying why
    instead (``_invalid_column``), and so is each column of a system that refuses the
    workload by a rule across the files while another system runs it
    (:func:`_refusing_systems`: ``tp=16`` on an 8-GPU system beside a 16-socket one)."""
    refusing = _refusing_systems(sides, loaded)
    for path in sides[0].settings:
        by_value: dict[str, list[Scenario | ConfigError]] = {}
        for side, found in zip(sides, loaded, strict=True):
            if path == "hardware" and side.settings[path] in refusing:
                continue
            by_value.setdefault(repr(side.settings[path]), []).append(found)
        for outcomes in by_value.values():
            if all(isinstance(found, ConfigError) for found in outcomes):
                error = outcomes[0]
                assert isinstance(error, ConfigError)
                raise error
    if all(isinstance(found, ConfigError) for found in loaded):  # nothing varies: one variant
        error = loaded[0]
        assert isinstance(error, ConfigError)
        raise error


def _invalid_column(
    side: Variant, error: ConfigError, valid: Scenario, unsupported: bool = False
) -> Column:
    """A combination of varied values the workload refuses (each value runs in another
    combination), or (``unsupported``) any combination on a system that refuses the
    workload (:func:`_refusing_systems`): a column saying why, with nothing timed. Its
    hardware is the one it names, or when the hardware is not varied the one every column
    shares (``valid``'s)."""
    hardware = side.settings.get("hardware")
    kind: str
    if hardware is None:
        name, file, kind = valid.hardware.name, valid.hardware_file, valid.hardware.kind
    else:
        name, file, kind = Path(str(hardware)).stem, str(hardware), human.MISSING
    return Column(
        hardware=name,
        hardware_file=file,
        kind=kind,
        devices=0,
        tp=0,
        instances=0,
        fusion=human.MISSING,
        fits=False,
        invalid=True,
        unsupported=unsupported,
        reason=str(error),
        label=side.label(name),
        settings=dict(side.settings),
    )


def compare_batches(
    workload: str | Path,
    hardware_files: Sequence[str | Path],
    batches: Sequence[int],
    overrides: Overrides = None,
    *,
    vary: Sequence[str] = (),
    context: int | None = None,
) -> list[Comparison]:
    """``compare`` at each batch size (one Comparison per batch, in order)."""
    return [
        compare(workload, hardware_files, overrides, vary=vary, batch=b, context=context)
        for b in batches
    ]


def _with_settings(shared: Mapping[str, Any], side: Variant) -> GivenOverrides:
    """The shared overrides with the variant's settings; its hardware (a path, or a shipped
    hardware file by name) made absolute, so it does not depend on where the workload is,
    and served by that hardware's default stack unless a setting names one (``stack=``): a
    comparison of machines compares each as it is deployed. They keep where the shared ones
    were given (``config.overrides.source_of``)."""
    source = source_of(shared)
    merged = GivenOverrides({**shared, **side.settings}, source)
    hardware = side.settings.get("hardware")
    if hardware is not None:
        merged["hardware"] = str(checked_file(_hardware_file(str(hardware))).resolve())
        if "stack" not in merged:  # an error it causes says so, not "(from --set stack)"
            merged["stack"] = None
            origins = dict(source.origins) if isinstance(source, SetSource) else {}
            flag = origins.get("hardware", "hardware")
            origins["stack"] = f"{flag} {hardware}: its default stack"
            merged.source = SetSource(str(source), origins)
    return merged


def _hardware_file(given: str) -> Path:
    """The hardware file a variant names (a path, or a shipped file by name:
    ``shipped.locate``); a name that is neither is refused with the shipped name it is
    close to, as a workload's ``hardware:`` is (``config.loader.did_you_mean``):
    ``dgx-h300: file not found, and no shipped hardware file of that name; did you mean
    'dgx-h200'? ...``."""
    path = Path(given).expanduser()
    try:
        return shipped.locate(path, ("hardware",))
    except ConfigError as exc:
        meant = did_you_mean(path.name.removesuffix(".yaml"), shipped.names("hardware"))
        if not meant or len(exc.issues) != 1:
            raise
        issue = exc.issues[0]
        said = issue.message.replace(" of that name", f" of that name{meant}", 1)
        raise ConfigError([dataclasses.replace(issue, message=said)]) from None


def _coe_expert(scenario: Scenario, batch: int | None) -> tuple[Scenario, int, int, int]:
    """A Composition of Experts' columns time one expert as its run does
    (``serving.coe``): the scenario its steps run (the embedding table read from DDR), the
    batch capacity of its memory plan (of the slots that leave HBM room for the router and
    one cached expert, not the whole HBM, the most the stack runs), those slots (what
    memory holds, ``coe_room``: a run's ``room for``), and the decode batch (``batch``,
    else ``serving.batch_slots``, a number for a CoE); CapacityError when that batch leaves
    no expert room, as the run says it."""
    coe = scenario.workload.coe
    assert coe is not None
    router = router_scenario(scenario, coe)
    holds = coe_room(scenario, router)
    capacity = coe_capacity(scenario, router)
    slots = batch if batch is not None else scenario.workload.serving.slots_for(lambda: capacity)
    region_experts(scenario, router, slots)  # raises when not one expert fits beside them
    return expert_step_scenario(scenario), capacity, holds, slots


def _column(scenario: Scenario, side: Variant, batch: int | None, context: int | None) -> Column:
    """One variant's figures. A model instance is one replica of the workload's layout
    (``replica_devices``: tp x dp_attention x pp devices), and the system holds as many as
    its devices make whole; the instance's batch is every attention rank's
    (``replica_batch``: ``batch`` and ``serving.batch_slots`` count a rank's slots, as
    ``rdu-sim step`` does), so its tokens/s is that batch over the step (a pipeline's step
    is every micro-batch through every stage)."""
    hardware = scenario.hardware
    devices = hardware.system.sockets
    layout = scenario.workload.parallelism.layout()
    per_instance = replica_devices(layout)
    ranks = replica_batch(layout, 1)
    power, sockets_per_node = hardware.power, hardware.system.sockets_per_node
    ddr = hardware.socket.ddr if isinstance(hardware, HardwareConfig) else None
    base = Column(
        hardware=hardware.name,
        hardware_file=scenario.hardware_file,
        kind=hardware.kind,
        devices=devices,
        tp=scenario.tp,
        instances=devices // per_instance,
        layout=layout,
        instance_devices=per_instance,
        attention_ranks=ranks,
        fusion=fusion_level(scenario),
        fits=False,
        model=scenario.model.name,
        stack=scenario.stack.name,
        stack_runs_on=scenario.stack.runs_on,
        predicted=predicted_words(scenario.hardware_file),
        peak_hbm_bandwidth=float(hardware.hbm.bandwidth),
        hbm_capacity=float(hardware.hbm.capacity),
        hbm_efficiency=float(hardware.hbm.efficiency),
        peak_ddr_bandwidth=float(ddr.bandwidth) if ddr is not None else 0.0,
        ddr_efficiency=float(ddr.efficiency) if ddr is not None else 1.0,
        peak_flops=peak_matrix_flops(scenario),
        peak_flops_type=peak_matrix_type(scenario),
        dtypes=_dtypes(scenario),
        power_w=None if power is None else machine_watts(power, devices, sockets_per_node),
        power_figure=None if power is None else power.figure,
        label=side.label(hardware.name),
        settings=dict(side.settings),
        draft=None if scenario.draft is None else scenario.draft.model.name,
        coe_experts=None if scenario.workload.coe is None else scenario.workload.coe.experts,
        kv_policy=scenario.workload.kv.policy,
        paged_kv=scenario.stack.dynamic_batch,
        slot_tokens=scenario.kv_policy.slot_tokens(),
    )
    backend = EngineBackend()
    try:
        if scenario.workload.coe is None:
            timed = scenario
            capacity = backend.batch_capacity(scenario)
            # what memory holds, and what bounds the capacity below it (the stack's cap)
            holds = backend.memory_capacity(scenario)
            limit = scenario.stack.batch_limit(holds)
            # a paged stack's default: the sequences of this context its KV pool holds
            slots = batch if batch is not None else step_batch(scenario, backend, context)
            # a batch its KV pool cannot hold does not fit (step's warning, the same rule)
            over = None if batch is None else over_pool_words(scenario, backend, batch, context)
            if over is not None:
                return replace(base, reason=over)
        else:
            timed, capacity, holds, slots = _coe_expert(scenario, batch)
            limit = scenario.stack.batch_limit(holds)  # as a lone expert's: the stack's cap
        decode = default_step_shape(timed, "decode", batch=slots, context=context)
        cost = backend.step_cost(timed, decode)
        # the typical prompt as a server runs it (its bucket, or chunks): run's prefill_s
        typical = typical_prefill(timed)
        prompt, prefill_shapes = typical.prompt, typical.steps
        cache = StepCache(lambda shape: backend.step_cost(timed, shape))
        prefill_s = prefill_seconds(cache, timed, prompt)
        long = long_prompts(timed)
        long_s = None if long is None else prefill_seconds(cache, timed, long.median)
        long_shapes = [] if long is None else served_prefill_steps(timed, long.median)
        output = typical_output(timed, prompt)
        # the run's words for weights its batch pushes to DDR (a CoE keeps its experts there)
        placement = backend.plan_memory(timed, slots)
        warnings = [] if timed.workload.coe else placement_warnings(timed, placement)
        # and a run's words for prompts past the stack's token budget, of the same requests
        unchunked = unchunked_words(timed, scenario_requests(timed, slots).prompt_tokens)
        warnings += [] if unchunked is None else [unchunked]
    except CapacityError as exc:
        return replace(base, reason=str(exc))
    timing = cost.detail
    assert isinstance(timing, StepTiming)
    step = timing.step_s
    bound = step_bound(timing, hardware)
    instance_batch = replica_batch(layout, decode.batch)
    system_tokens_per_s = instance_batch / step * base.instances
    packed, packed_s = _packed_prefill(timed, cache, prefill_shapes, decode.batch, prefill_s)
    # the typical prompt's (first) prefill step, as many of them as the stack packs
    first = cache.cost(replace(prefill_shapes[0], batch=packed)).detail
    assert isinstance(first, StepTiming)
    prefill_bound = step_bound(first, hardware)
    # the typical request's (the median prompt's, in every column alike: a compressing
    # policy's long prompts are their own row, and the workload sends them to every column)
    per_request = packed_s / packed
    served, prefill_share = served_rate(instance_batch, ranks, step, per_request, output)
    system_served = served * base.instances
    watts = base.power_w
    return replace(
        base,
        fits=True,
        batch_capacity=replica_batch(layout, capacity),
        memory_capacity=replica_batch(layout, holds),
        capacity_limit=limit,
        batch=instance_batch,
        context=decode.cache_len,
        step_s=step,
        tokens_per_s_per_user=1.0 / step,
        tokens_per_s=instance_batch / step,
        system_tokens_per_s=system_tokens_per_s,
        output_tokens=output,
        served_tokens_per_s=served,
        system_served_tokens_per_s=system_served,
        prefill_share=prefill_share,
        prefill_packed=packed,
        prefill_packed_s=packed_s,
        tokens_per_joule=None if watts is None else system_tokens_per_s / watts,
        served_tokens_per_joule=None if watts is None else system_served / watts,
        hbm_bandwidth_fraction=timing.hbm_bandwidth_fraction,
        flops_fraction=timing.flops_fraction,
        kernel_calls=sum(1 if k.looped else k.calls for k in timing.kernels),
        prefill_s=prefill_s,
        prefill_tokens=prompt,
        prefill_bucket=prefill_shapes[0].tokens,
        prefill_steps=len(prefill_shapes),
        prefill_compressed=typical.compressed,
        prefill_step_s=prefill_bound.step_s,
        prefill_bound=prefill_bound.bound,
        prefill_bound_s=prefill_bound.limit_s,
        prefill_bound_link=prefill_bound.link or None,
        long_prefill_s=long_s,
        long_prefill_tokens=None if long is None else long.median,
        long_prefill_bucket=long_shapes[0].tokens if long_shapes else None,
        long_prefill_share=None if long is None else long.share,
        bound=bound.bound,
        bound_s=bound.limit_s,
        bound_link=bound.link or None,
        resource_s=bound.times(),
        hbm_bytes=bound.hbm_bytes,
        ddr_bytes=bound.ddr_bytes,
        warnings=warnings,
        flops=bound.flops,
        runtime_s=bound.runtime_s,
        pipeline_bubble=bound.bubble,
        expert_imbalance=_imbalance(timing),
        prefill_expert_imbalance=_imbalance(first),
    )


def _imbalance(timing: StepTiming) -> float | None:
    """The busiest device's routed pairs over the mean in a step (``expert_balance``), None
    without one."""
    balance = timing.expert_balance
    return None if balance is None else balance.imbalance


def _dtypes(scenario: Scenario) -> dict[str, str]:
    """The stored types of the weights (the model's released type unless ``dtypes.weights``
    sets one; its routed experts' too when they differ), the KV cache and the activations."""
    dtypes = scenario.workload.dtypes
    stored = {"weights": scenario.weight_dtype}
    if scenario.expert_dtype != scenario.weight_dtype:
        stored["experts"] = scenario.expert_dtype
    return {**stored, "kv": str(dtypes.kv), "activations": str(dtypes.activations)}


def typical_output(scenario: Scenario, prompt: int) -> int:
    """The typical request's output tokens: the distribution's median (a trace's median
    row), within the context beside the typical ``prompt`` (``serving.requests``' clip), as
    the typical prompt is the distribution's median (``serving.step_shape.typical_prefill``)."""
    import numpy as np

    from rdu_sim.serving.requests import clip_to_context, make_requests, typical_length

    serving = scenario.workload.serving
    if serving.trace is None:
        output = typical_length(serving.output_tokens)
    else:
        requests = make_requests(
            serving, 1, scenario.base_dir, scenario.workload_file, scenario.overrides
        )
        output = int(np.median(requests.output_tokens)) if len(requests.output_tokens) else 1
    _, clipped = clip_to_context(np.asarray([prompt]), np.asarray([output]), serving.max_context)
    return int(clipped[0])


def _packed_prefill(
    scenario: Scenario,
    cache: StepCache,
    steps: Sequence[StepShape],
    slots: int,
    prefill_s: float,
) -> tuple[int, float]:
    """The typical prompts one prefill step runs, and its time: as many as the serving
    stack packs (``prefill_batch_tokens``: whole prompts of one shape, within that many
    padded tokens; ``serving.scheduler``), at most a rank's ``slots``; one, in
    ``prefill_s``, when the stack packs none, the prompt runs in chunks or a draft
    prefills beside it (the scheduler packs neither)."""
    budget = scenario.stack.prefill_batch_tokens
    if budget is None or len(steps) != 1 or scenario.draft is not None:
        return 1, prefill_s
    prompts = min(slots, budget // steps[0].tokens)
    if prompts <= 1:
        return 1, prefill_s
    return prompts, cache.step_s(replace(steps[0], batch=prompts))


def served_rate(
    batch: int, ranks: int, step_s: float, prefill_s: float, output_tokens: int
) -> tuple[float, float]:
    """One instance's served output tokens/s with prefill included, and prefill's share of
    its time, from the steps compare times (no serving run): each of an attention rank's
    ``batch / ranks`` slots serves a request in turn, its prefill (``prefill_s``, one
    request's share of a prefill step: ``_packed_prefill``) then its ``output_tokens`` decode steps,
    which the rank's slots share; prefill and decode take the device in turn, so the rank
    spends ``batch / ranks x prefill_s + output_tokens x step_s`` on ``batch / ranks x
    output_tokens`` tokens: per token, ``prefill_s / output_tokens`` of prefill beside
    ``step_s / (batch / ranks)`` of decode. A steady state of full slots at the timed
    context: no fill or drain, and a pipeline's prefills not overlapped across its stages."""
    slots = batch / ranks
    prefill, decode = slots * prefill_s, output_tokens * step_s
    return batch * output_tokens / (prefill + decode), prefill / (prefill + decode)
