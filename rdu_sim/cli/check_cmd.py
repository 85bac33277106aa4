"""`rdu-sim check FILE...`: validate hardware files, workloads and sweep specs.

The kind of each file is read off its top-level keys, so one command checks a whole folder:
`socket`/`system` is hardware, `runs_on` a serving stack, `hardware`/`model` a workload
(checked with its hardware file and serving stack, cross-file rules included, and the rows
of its trace file a run would use, and the capacity and memory plan its run makes before
simulating, ``serving.run.plan_capacity``: a Composition of Experts' its own), `base`/`axes`
a sweep spec (checked by `rdu_sim.sweep.check_spec`, imported only for a spec), `pools` a
cluster (with every pool's workload, its traffic and each pool's batch capacity and memory
plan as its run makes them, ``api_cluster.plan_cluster``), `search` a plan spec (the rule:
``rdu_sim.config.kinds``). A CSV whose header names a column only a measurement file has
(``measurement_file.MARKS``: ``metric``, ``measured``, ``hardware``, ``tp``, ``stack``) is a
measurement file (``rdu_sim.validate.measurement_file``, docs/calibration.md: every row
read and resolved as ``validate --suite deployment`` and ``calibrate`` resolve it, its
model, tp, hardware and stack files checked, every bad row named); any other file with a
trace suffix (`.csv`, `.jsonl`) is checked as a request trace. Every file is checked and
every error printed before the exit status (2 if any failed) is decided.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from rdu_sim import human
from rdu_sim.cli.errors import (
    EXIT_INPUT_ERROR,
    boundary_errors,
    message_of,
    print_error,
)
from rdu_sim.cli.options import GivenPath
from rdu_sim.config import shipped
from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.config.hardware_file import (
    Hardware,
    device_noun,
    read_hardware,
    validate_hardware,
)
from rdu_sim.config.kinds import KIND_WORDS, KINDS_HELP, file_kind, misspelt_kind_key
from rdu_sim.config.loader import LineMap, read_yaml
from rdu_sim.config.origins import hardware_origins, predicted_words
from rdu_sim.config.overrides import in_context
from rdu_sim.config.parallelism import describe_layout
from rdu_sim.config.stack_file import (
    read_stack,
    runs_on_problem,
    stack_data,
    stack_path,
    unknown_stack,
    validate_stack,
)
from rdu_sim.interrupts import Interrupted
from rdu_sim.scenario import build_scenario

if TYPE_CHECKING:
    from rdu_sim.validate.deployment_suite import Row

# The trace formats' suffixes, known without importing rdu_sim.serving (it is slow to import
# and `check` on config files does not need it); tests keep this equal to the registry's.
TRACE_SUFFIXES = shipped.KIND_SUFFIXES["trace"]


def _read_trace(
    path: Path, workload_file: str = "", format: str = "auto", experts: int | None = None
) -> Any:
    """Every row of the trace, checked as a run checks the rows it reads: a run reads only
    its ``serving.requests`` first rows (its time and memory follow its requests), so a
    damaged row below them, or a file cut short, is found here or by no run."""
    from rdu_sim.serving.traces import read_trace
    from rdu_sim.serving.traces.reader import EVERY_ROW

    return read_trace(path, workload_file, EVERY_ROW, format, None, experts)


def _check_plan(scenario: Any, trace: Any) -> Any:
    """A workload as its run begins (``serving.run.plan_capacity``, what the run's plan
    calls): its batch capacity and memory plan (a separate draft's too), or a Composition of
    Experts' own plan (the router and an expert in HBM, every expert in DDR) and its
    popularity's trace column; a paged KV pool that holds every request (``check_pool``);
    its decode step at its batch slots and longest context compiled (a kernel's stages and
    buffers against the socket's PCUs, PMUs and SRAM, ``compiler.errors.at_hardware``);
    refused in the run's words, nothing simulated; a large share of its requests cut to the
    context said as its run's warning (``_warn_truncated``). Returns the requests its run
    makes (``serving.requests.RequestSet``)."""
    from rdu_sim.serving.backend import EngineBackend
    from rdu_sim.serving.run import plan_capacity

    if scenario.workload.coe is not None:
        from rdu_sim.serving.coe import check_popularity

        check_popularity(scenario, None if trace is None else trace.expert)
    backend = EngineBackend()
    _, slots, placement, _, _ = plan_capacity(scenario, backend)
    if scenario.workload.coe is None:  # the run's decode step, compiled: what the socket holds
        from rdu_sim.compiler.placement import slot_tokens
        from rdu_sim.shapes import StepShape
        from rdu_sim.speculation import verify_tokens

        decode = StepShape("decode", slots, verify_tokens(scenario), slot_tokens(scenario))
        backend.compiler(scenario).program(decode)
    from rdu_sim.serving.run import scenario_requests

    requests = scenario_requests(scenario, slots)  # the requests its run makes
    if placement.kv_pool is not None:  # against its pool
        from rdu_sim.serving.limits import check_pool

        check_pool(scenario, placement.kv_pool, requests.prompt_tokens, requests.output_tokens)
    _warn_truncated(scenario, requests)
    return requests


def _warn_truncated(scenario: Any, requests: Any) -> None:
    """Say, as the workload's run will (``serving.requests.truncation_words``), when a large
    share of its requests do not fit ``serving.max_context`` and would be cut: a warning,
    not an error (the run serves them, cut; a sweep over the context cuts some by design)."""
    from rdu_sim.serving.requests import TruncatedRequestsWarning, truncation_words
    from rdu_sim.sim_warnings import warn

    words = truncation_words(requests, scenario.workload.serving.max_context)
    if words is not None:
        warn(TruncatedRequestsWarning(f"{scenario.workload_file}: {words}"))


def _late_words(unordered: int) -> str:
    """``N out of time order (...)`` for trace rows that arrive before a row above them
    (``traces.table.out_of_order``: accepted, a run replays them by arrival, as a cluster
    counts them), "" when none do."""
    if not unordered:
        return ""
    return (
        f"{unordered:,} out of time order (arriving before a row above them; a run replays "
        "them by arrival)"
    )


def _default_stack(hardware: Hardware, file: str, lines: LineMap) -> str:
    """The name of the stack a hardware file runs by default, checked as a workload would
    read it (the file exists, is a valid stack, runs on this kind of hardware)."""
    named = hardware.default_stack
    path = stack_path(named, file)
    unknown = unknown_stack(named, path)
    if unknown is not None:  # at the field, as a run says it
        raise ConfigError.single(file, "default_stack", unknown, lines.get(("default_stack",)))
    try:
        data, stack_lines, stack_file = stack_data(path)
        stack = validate_stack(data, stack_file, stack_lines)
    except ConfigError as exc:
        at = ConfigIssue(file, "default_stack", "", lines.get(("default_stack",)))
        raise in_context(exc, at, "", {}) from None
    problem = runs_on_problem(stack, hardware.kind)
    if problem is not None:
        raise ConfigError.single(file, "default_stack", problem, lines.get(("default_stack",)))
    return repr(stack.name)


def _check_data(path: Path, data: Any, lines: LineMap) -> str:
    """Validate one parsed file; return its OK description."""
    file = str(path)
    kind = file_kind(data)
    if kind == "workload":
        from rdu_sim.serving.named_policies import check_named, field_line  # (no numpy)

        scenario = build_scenario(data, workload_file=file, lines=lines)
        workload = scenario.workload
        serving = workload.serving
        check_named(serving, file, field_line(lines.get))
        trace = None
        if serving.trace is not None:  # every row, checked as a run checks those it reads
            from rdu_sim.serving.requests import trace_experts

            path = shipped.trace_path(scenario.base_dir, serving.trace)
            bound = trace_experts(workload.coe)
            trace = _read_trace(path, file, serving.trace_format, bound)
        requests = _check_plan(scenario, trace)  # what its run refuses before simulating
        predicted = predicted_words(scenario.hardware_file)  # as its run will say it
        late = _late_words(requests.out_of_order)  # of the rows its run replays by arrival
        return (
            f"workload {workload.name!r}: {scenario.model.name} on "
            f"{scenario.hardware.name} ({describe_layout(workload.parallelism.layout())}, "
            f"kv={workload.kv.policy})"
            + (f"\n    trace {serving.trace}: of the rows its run uses, {late}" if late else "")
            + ("" if predicted is None else f"\n    {scenario.hardware.name}: {predicted}")
        )
    if kind == "hardware":
        data, lines = read_hardware(path)  # with the file it extends, if any
        hardware = validate_hardware(data, file, lines)
        stack = _default_stack(hardware, file, lines)
        origins = hardware_origins(path, hardware)  # what it takes without stating it
        return "\n    ".join(
            (
                f"hardware {hardware.name!r}: "
                f"{human.count(hardware.system.sockets, device_noun(hardware))}, "
                f"default stack {stack}{origins.stack}",
                *filter(None, [predicted_words(path)]),
                *origins.notes,
            )
        )
    if kind == "stack":
        data, lines = read_stack(path)
        served = validate_stack(data, file, lines)
        return f"serving stack {served.name!r}: runs on {served.runs_on} hardware"
    if kind == "cluster":
        from rdu_sim.api_cluster import plan_cluster
        from rdu_sim.cluster import build_cluster

        cluster = build_cluster(data, file=file, lines=lines)
        fit, _, _ = plan_cluster(cluster)  # its traffic and pools' plans, as a run makes them
        requests = fit.requests
        pools = ", ".join(
            f"{p.name}: {human.count(p.replicas, 'replica')} of "
            f"{describe_layout(p.scenario.workload.parallelism.layout())}"
            for p in cluster.pools
        )
        return (
            f"cluster {cluster.config.name!r}: {human.count(cluster.sockets, cluster.device)} "
            f"({pools}), {human.count(len(requests), 'request')}"
        )
    if kind == "plan":
        from rdu_sim.plan import check_plan

        return f"plan spec: {check_plan(path)}"
    if kind == "calibration":
        from rdu_sim.validate.calibration_problem import check_spec as check_calibration

        return f"calibration spec: {check_calibration(path)}"
    if kind == "sweep":
        from rdu_sim.sweep import check_spec  # pandas and the sweep machinery: only for specs

        result = check_spec(path)
        return f"sweep spec{': ' + str(result) if result else ''}"
    if data is None:
        raise ConfigError.single(file, "", "the file is empty")
    if not isinstance(data, Mapping):
        raise ConfigError.single(
            file, "", f"expected a mapping of fields at the top level, got a {type(data).__name__}"
        )
    misspelt = misspelt_kind_key(data)
    if misspelt is not None:
        key, meant, kind = misspelt
        raise ConfigError.single(
            file,
            key,
            f"cannot tell what this file is; did you mean {meant!r} (a {KIND_WORDS[kind]} "
            f"has it)? {KINDS_HELP}",
            lines.get((key,), 1),
        )
    raise ConfigError.single(
        file,
        "",
        f"cannot tell what this file is: {KINDS_HELP}",
        1,
    )


def check_file(path: Path, measured: list[Row] | None = None) -> str:
    """Check one file (or a shipped one by name); raise an expected error if it is bad (see
    rdu_sim.cli.errors). ``measured``: the measured rows of the files checked before, which
    a measurement file's rows must not repeat (its own are added)."""
    path = shipped.locate(path)
    if path.suffix.lower() == ".csv":
        from rdu_sim.validate.measurement_file import check_points, is_measurement_file

        if path.is_file() and path.stat().st_size == 0:  # no header: either kind of CSV
            raise ConfigError.single(
                str(path),
                "",
                "is empty: a CSV `rdu-sim check` reads is a request trace (a header, then a "
                "row per request) or a measurement file (a header naming its columns: metric, "
                "measured, hardware, tp, stack, ...; then a row per measured point)",
            )

        if is_measurement_file(path):  # a header naming a measurement column: measured points
            # every row resolved as the suite and calibrate do
            points = check_points(path, measured)
            metrics = ", ".join(sorted({point.metric for point in points}))
            return f"measurement file: {human.count(len(points), 'measured row')} ({metrics})"
    if path.suffix.lower() in TRACE_SUFFIXES:  # any format, through the one trace reader
        from rdu_sim.serving.traces.table import out_of_order

        trace = _read_trace(path)
        late = _late_words(0 if trace.arrival_s is None else out_of_order(trace.arrival_s))
        late = f", {late}" if late else ""
        if trace.format not in ("csv", "jsonl"):  # Azure, Mooncake, BurstGPT
            skipped = f", {trace.skipped:,} failed rows skipped" if trace.skipped else ""
            return f"{trace.format} trace: {human.count(len(trace), 'request')}{skipped}{late}"
        arrivals = "with" if trace.arrival_s is not None else "without"
        return f"request trace: {human.count(len(trace), 'row')} {arrivals} arrival_s{late}"
    data, lines = read_yaml(path)
    return _check_data(path, data, lines)


def _namesakes_words(text: str) -> str:
    """For a shipped name that several kinds of file have (``deepseek-r1-h100``, a workload
    and a plan), which file was checked and how to check each other one; "" otherwise."""
    found = shipped.namesakes(text)
    if len(found) < 2:
        return ""
    (_, taken), *others = found
    rest = "; ".join(
        f"the {KIND_WORDS[kind]} of the same name: rdu-sim check {shipped.shipped_path(path)}"
        for kind, path in others
    )
    return f"checked {shipped.shipped_path(taken)}; {rest}"


@click.command("check")
@click.argument("files", nargs=-1, required=True, type=GivenPath())
def command(files: tuple[Path, ...]) -> None:
    """Validate hardware files, workloads, sweep specs, request traces and measurement files
    (all of them, then exit 2 if any failed). Example: rdu-sim check hw_configs/*.yaml
    workloads/*.yaml"""
    out = Console(soft_wrap=True, highlight=False)
    failed = checked = 0
    measured: list[Row] = []  # a row repeated in another file is refused, as validate does
    for path in files:
        try:
            description = check_file(path, measured)
        except Interrupted as stop:
            done = f"{checked} of {human.count(len(files), 'file')} checked (above), the rest not"
            raise Interrupted(stop.signum, stop.kept or done) from None
        except boundary_errors() as exc:
            failed += 1
            # Every line names the checked file, even when its hardware file is at fault.
            lines = message_of(exc).splitlines() or [""]
            namesakes = _namesakes_words(str(path))
            if namesakes:  # which file failed, when its name is another kind's too
                lines.append(namesakes)
            print_error(
                "\n".join(line if str(path) in line else f"{path}: {line}" for line in lines)
            )
            checked += 1
            continue
        out.print(f"[green]OK[/green]  {path}: ", end="")
        namesakes = _namesakes_words(str(path))
        out.print(description + (f" ({namesakes})" if namesakes else ""), markup=False)
        checked += 1
    if failed:
        print_error(f"{failed} of {len(files)} file(s) failed the check")
        raise SystemExit(EXIT_INPUT_ERROR)
