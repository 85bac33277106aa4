"""A Scenario: a workload with its hardware and model resolved and cross-checked.

This is what every later stage (compiler, engine, serving, sweeps) takes. Loading is the
only place that reads files; a Scenario is immutable and cheap to pass to worker processes.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rdu_sim import human
from rdu_sim.config import shipped
from rdu_sim.config.architecture import ConfigJsonKeys, ConfigJsonModel
from rdu_sim.config.device_reads import device_words, unread_on_device
from rdu_sim.config.errors import CombinationError, ConfigError, ConfigIssue
from rdu_sim.config.experts import MAX_EXPERTS, CountsLoad
from rdu_sim.config.gpu import GpuHardwareConfig
from rdu_sim.config.hardware_file import Hardware, device_noun, hardware_model, read_hardware
from rdu_sim.config.kinds import kind_problem, refuse_other_kind
from rdu_sim.config.loader import (
    LineMap,
    ModelT,
    did_you_mean,
    file_problem,
    read_yaml,
    validate,
)
from rdu_sim.config.overrides import (
    HW_PREFIX,
    SET,
    STACK_PREFIX,
    GivenOverrides,
    SetSource,
    UnreadFieldWarning,
    blamed_overrides,
    in_context,
    normalize_overrides,
    origin_of,
    overridden,
    override_for,
    override_note,
    override_origin,
    set_fields,
    set_path,
    source_of,
    split_overrides,
    unread_overrides,
    unread_paths,
)
from rdu_sim.config.stack import NO_STACK, NONE, StackConfig
from rdu_sim.config.stack_file import runs_on_problem, stack_data, stack_path, unknown_stack
from rdu_sim.config.wiring import allowed_algorithms, forced_algorithm
from rdu_sim.config.workload import ARRIVAL_READS, DTYPE_BYTES, WEIGHTS_READS, WorkloadConfig
from rdu_sim.config.yaml_io import read_text_file
from rdu_sim.kv.policies import (
    PolicyError,
    UnreadKVFieldWarning,
    budget_determines,
    make_policy,
    policy_reads,
)
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.models.figures import params_total, weight_bytes
from rdu_sim.models.hf_config import architecture_from_config, read_config_json
from rdu_sim.models.layers import Architecture, body_starts, stage_layers_problem
from rdu_sim.models.presets import UnknownModelError, get_model
from rdu_sim.models.storage import storage_dtypes
from rdu_sim.sim_warnings import warn


@dataclass(frozen=True)
class Scenario:
    """Everything one simulation needs, validated; ``kv_policy`` is the workload's KV policy,
    built once from ``kv`` and ``serving.max_context`` (every room asks it, none rebuilds it);
    ``overrides`` are the ``--set`` edits applied to the files, by path (outputs record them:
    ``rdu_sim.provenance``)."""

    workload: WorkloadConfig
    hardware: Hardware
    model: Architecture
    workload_file: str
    hardware_file: str
    kv_policy: KVPolicy = field(compare=False, repr=False)
    # The serving stack the workload runs (``stack:``, else the hardware file's
    # ``default_stack:``; ``none`` is the device alone: ``config.stack.NONE_WORDS``) and its
    # file ("none" for it).
    stack: StackConfig = NO_STACK
    stack_file: str = NONE
    # The draft model of `speculation`, as a scenario of its own (its model and tp; the same
    # hardware, dtypes, KV policy and serving), built once; None without speculation.
    draft: Scenario | None = field(default=None, compare=False, repr=False)
    overrides: Mapping[str, Any] = field(default_factory=dict, compare=False)
    # The workload file's line of each field path, for a rule checked after loading (a lone
    # run's refusal, ``serving.run.plan_run``) to name the line as the loader's rules do.
    lines: LineMap = field(default_factory=dict, compare=False, repr=False)
    # The hardware file's line of each of its field paths (without the ``hw.`` prefix), as
    # read at load, for a refusal at a hardware field after loading (``compiler.errors.
    # at_hardware``: a kernel the socket cannot hold).
    hardware_lines: LineMap = field(default_factory=dict, compare=False, repr=False)
    # The role its servers run (``config.cluster.Role``): a cluster pool's, else mixed (a lone
    # run prefills and decodes its own requests). It decides whether a paged pool gives pages
    # on demand (``kv.paged.gives_on_demand``), and so what batch ``auto`` sizes by.
    role: str = "mixed"

    @property
    def tp(self) -> int:
        return self.workload.parallelism.tp

    @property
    def weight_dtype(self) -> str:
        """dtypes.weights, else the model's released dtype, else bf16 (`storage_dtypes`)."""
        return self._storage[0]

    @property
    def expert_dtype(self) -> str:
        """Routed experts' dtype: dtypes.experts, else the model's, else `weight_dtype`."""
        return self._storage[1]

    @property
    def _storage(self) -> tuple[str, str]:
        dtypes = self.workload.dtypes
        return storage_dtypes(self.model, dtypes.weights, dtypes.experts)

    @property
    def weight_dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.weight_dtype]

    @property
    def expert_dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.expert_dtype]

    @property
    def kv_dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.workload.dtypes.kv]

    @property
    def activation_dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.workload.dtypes.activations]

    @property
    def base_dir(self) -> Path:
        """Folder that relative paths in the workload (trace files) are resolved against."""
        return Path(self.workload_file).parent

    def at_field(self, field: str, message: str, blame: tuple[str, ...] = ()) -> str:
        """``message`` as a config error at ``field`` of the workload says it: ``file:line:
        field: message``, or ``file: field: message (from --set field)`` when an override
        set it, ``(from overrides: field)`` when the API's argument did (``source_of``): a
        rule checked after loading (a run's refusal before it simulates). ``blame``: the
        fields whose values make the problem, when more than ``field`` (every override
        among them named, ``blamed_overrides``)."""
        paths = blamed_overrides(blame or (field,), self.overrides)
        line = None if paths else self.lines.get(tuple(field.split(".")))
        note = f" {override_note(paths, source_of(self.overrides))}" if paths else ""
        return str(ConfigIssue(self.workload_file, field, message + note, line))


ModelValue = str | ConfigJsonModel | ConfigJsonKeys | Architecture
"""What a workload's model field holds once validated (``config.workload.ModelField``)."""


def _apply(
    data: dict[str, Any],
    overrides: Mapping[str, Any],
    file: str,
    prefix: str = "",
    source: str = SET,
) -> dict[str, Any]:
    """``data`` (of ``file``) with the overrides set; an override that cannot be set (inside
    a value that is not a mapping) is an error naming it (``overridden``)."""
    result = copy.deepcopy(data)
    try:
        for path, value in overrides.items():
            set_path(result, path, value, file)
    except ConfigError as exc:
        raise overridden(exc, file, overrides, prefix, source) from None
    return result


def _expand_preset(
    data: dict[str, Any], overrides: Mapping[str, Any], workload_file: str, source: str
) -> None:
    """`--set model.layers=4` on a preset name, or on a config.json, turns the model into an
    editable mapping of its architecture (``source``: where the overrides were given)."""
    model = data.get("model")
    edits = [k for k in set_fields(overrides) if k.startswith("model.")]
    own = {"model.config_json", "model.name"}  # the reference's own fields edit the reference
    if isinstance(model, str) and "model.config_json" in edits:
        # a config.json replaces the preset: its fields are not the preset's to edit
        others = [k for k in edits if k not in own]
        if others:
            raise overridden(
                ConfigError.single(
                    workload_file,
                    "model.config_json",
                    f"a config.json replaces the preset {model!r}, whose fields "
                    f"({', '.join(others)}) it cannot be set beside: remove those {source}, or "
                    "this one",
                ),
                workload_file,
                overrides,
                "",
                source,
            )
        data["model"] = {}  # --set fills in the reference: {config_json: ..., name: ...}
        return
    if isinstance(model, str) and edits:
        with contextlib.suppress(UnknownModelError):  # reported below with file and line
            data["model"] = get_model(model).model_dump()
    reference = isinstance(model, Mapping) and set(model) == {"config_json"} | (
        set(model) & {"name"}
    )
    if reference and set(edits) - own:
        with contextlib.suppress(ValidationError):  # a bad reference: reported below, by key
            ref = ConfigJsonModel.model_validate(model)
            data["model"] = _read_config_json(ref, workload_file, {}).model_dump()


def _validate(
    model: type[ModelT],
    data: Any,
    file: str,
    lines: LineMap,
    overrides: Mapping[str, Any],
    prefix: str,
    source: str,
) -> ModelT:
    """`validate`, with issues caused by an override saying so (the line would mislead)."""
    try:
        return validate(model, data, file, lines)
    except ConfigError as exc:
        raise overridden(exc, file, overrides, prefix, source) from None


def _failing(file: str, lines: LineMap) -> Callable[..., ConfigError]:
    """A ConfigError at a field path of the workload file, with its line (``blame``: the
    fields whose values make it, ``ConfigIssue.blame``)."""

    def fail(path: str, message: str, blame: tuple[str, ...] = ()) -> ConfigError:
        line = lines.get(tuple(path.split(".")))
        return ConfigError.single(file, path, message, line, blame)

    return fail


def _tp_problem(model: Architecture, tp: int, sockets: int, hardware: Hardware) -> str | None:
    """What is wrong with running ``model`` over ``tp`` of ``sockets`` sockets, or None."""
    if model.heads % tp:
        return (
            f"tp={tp} does not divide the {model.name} model's {model.heads} "
            f"attention heads; use a divisor of {model.heads}"
        )
    if tp > sockets:
        devices = human.count(sockets, device_noun(hardware))
        return f"tp={tp} exceeds the {devices} of hardware {hardware.name!r}" + (
            "" if sockets == hardware.system.sockets else " left beside the target's"
        )
    system = hardware.system
    forced = forced_algorithm(True, system.collective_algorithm)
    allowed = allowed_algorithms(True, system.topology, tp, system.sockets_per_node)
    if forced is not None and forced not in allowed:
        return (
            f"hardware {hardware.name!r} forces {forced} collectives "
            f"(system.collective_algorithm: {forced}), which a {system.topology!r} wiring "
            f"cannot run over a group of {tp} sockets (it allows {', '.join(allowed)}): use "
            "system.collective_algorithm auto or an allowed one, another system.topology "
            "(fully_connected runs every algorithm), or tp <= 2"
        )
    return None


def _body_sizes(model: Architecture) -> str:
    """The layers a body of ``model`` holds, in words: "pairs of layers", "runs of 1 to 2
    layers" (``models.layers.body_starts``)."""
    starts = body_starts(model)
    sizes = sorted({b - a for a, b in zip(starts, (*starts[1:], model.layers), strict=True)})
    if sizes == [2]:
        return "layers in pairs"
    if len(sizes) == 1:
        return f"runs of {sizes[0]} layers"
    return f"runs of {sizes[0]} to {sizes[-1]} layers"


DEVICES_FIELDS = (
    "parallelism.tp",
    "parallelism.dp_attention",
    "parallelism.pp",
    "hw.system.sockets",
    "hardware",
)
"""What a replica's devices against the hardware's come from: an override of any of them is
named as the cause of too many (``ConfigIssue.blame``)."""


def _devices_problem(workload: WorkloadConfig, hardware: Hardware) -> str | None:
    """What is wrong with the devices the parallelism asks for (tp x dp_attention x pp)
    against the hardware's, or None."""
    p, system = workload.parallelism, hardware.system
    if p.devices <= system.sockets:
        return None
    return (
        f"tp x dp_attention x pp = {p.tp} x {p.dp_attention} x {p.pp} = {p.devices} "
        f"{device_noun(hardware)}s, more than the {system.sockets} of hardware "
        f"{hardware.name!r} (raise hw.system.sockets: a replica over several nodes or racks)"
    )


def _layout_problem(
    workload: WorkloadConfig, hardware: Hardware, model: Architecture
) -> tuple[str, str] | None:
    """(field, problem) of a parallelism the model or the hardware cannot map, or None
    (its devices checked first, ``_devices_problem``): whole experts per device, a
    pipeline's stages and what the all-to-all of data-parallel attention needs
    (``config.parallelism``)."""
    p, system = workload.parallelism, hardware.system
    stage, experts = p.stage_devices, getattr(model, "routed_experts", 0)
    field = "parallelism.ep" if p.ep is not None else "parallelism.moe_experts"
    if p.expert_ways > 1 and not experts:
        return field, f"the {model.name} model has no routed experts to place whole on devices"
    copies = experts + workload.experts.redundant  # whole experts and their copies
    if p.expert_ways > 1 and copies % p.expert_ways:
        if workload.experts.redundant:
            return "experts.redundant", (
                f"{experts} experts and {workload.experts.redundant} copies do not fill the "
                f"{p.expert_ways} devices evenly (each holds as many)"
            )
        if p.tensor_parallel_only:
            return "parallelism.moe_experts", (
                f"expert parallelism places whole experts on sockets: tp={p.tp} does not "
                f"divide the model's {experts} routed experts; use moe_experts: tensor or a "
                f"tp dividing {experts}"
            )
        return field, (
            f"expert parallelism places whole experts on devices: {p.expert_ways} does not "
            f"divide the model's {experts} routed experts (experts.redundant copies can fill "
            "the devices evenly)"
        )
    if experts and p.dp_attention > 1 and p.expert_ways == 1:
        return "parallelism.ep", (
            f"data-parallel attention over {p.dp_attention} ranks needs the routed experts "
            f"expert-parallel across them (ep = tp x dp_attention = {stage}): slicing every "
            "expert over ranks that hold different tokens is not modelled"
        )
    bodies = len(body_starts(model))
    if p.pp > bodies:
        if bodies == model.layers:
            return "parallelism.pp", (
                f"pp={p.pp} exceeds the {model.name} model's {model.layers} layers"
            )
        return "parallelism.pp", (
            f"pp={p.pp} would leave a pipeline stage with no layers: the {model.name} "
            f"model's {model.layers} layers are {bodies} layer bodies, kept whole on one "
            f"stage ({_body_sizes(model)} that loop as one kernel); use pp <= {bodies}"
        )
    if p.stage_layers is not None:
        problem = stage_layers_problem(model, p.stage_layers)
        if problem is not None:
            return "parallelism.stage_layers", problem
    if p.exchange == "all_to_all" and stage > 2 and system.topology == "ring":
        return "parallelism.ep", (
            f"the experts' all-to-all sends from every device to every other; a 'ring' wiring "
            f"links each {device_noun(hardware)} to its neighbours only (use "
            "system.topology switched or fully_connected)"
        )
    experts_config = workload.experts
    if not experts_config.is_default:
        if p.expert_ways == 1:
            return "experts", (
                "the experts section loads whole experts per device: it needs expert "
                "parallelism (parallelism.ep > 1); sliced experts are balanced by construction"
            )
        load = experts_config.load
        if isinstance(load, CountsLoad) and load.counts is not None and len(load.counts) != experts:
            return "experts.load.counts", (
                f"{len(load.counts)} counts for the {model.name} model's {experts} routed experts"
            )
    if p.two_batch_overlap and not isinstance(hardware, GpuHardwareConfig):
        return "parallelism.two_batch_overlap", (
            "SN40L's fused layer kernels already stream the all-to-all piece by piece beside "
            "the compute feeding it (system.collective_chunks); two-batch overlap is a GPU "
            "runtime's schedule of separate kernels"
        )
    if p.two_batch_overlap and p.pp > 1:
        return "parallelism.two_batch_overlap", (
            "two-batch overlap and pipeline stages both cut a step into micro-batches; "
            "they are not modelled together (use one of them)"
        )
    if p.two_batch_overlap and workload.fusion == "full":
        return "parallelism.two_batch_overlap", (
            "two-batch overlap runs one micro-batch's all-to-all kernels beside the other's "
            "kernels; fusion full makes a layer one kernel (use fusion auto or partial)"
        )
    if isinstance(hardware, GpuHardwareConfig) and p.comm_sms >= hardware.gpu.sms:
        return "parallelism.comm_sms", (
            f"{p.comm_sms} SMs for communication leave none of the {hardware.gpu.sms} of "
            f"hardware {hardware.name!r} to compute"
        )
    if not p.tensor_parallel_only and (workload.speculation is not None or workload.coe):
        what = "speculation" if workload.speculation is not None else "coe"
        return what, (
            f"{what} runs on plain tensor parallelism; data-parallel attention, all-to-all "
            "experts and pipelines are not modelled with it"
        )
    return None


def coe_router(workload: WorkloadConfig, workload_file: str, lines: LineMap) -> Architecture:
    """A Composition of Experts' router model, given as ``model`` is (a preset, a
    config.json, its keys, an architecture); errors name ``coe.router``."""
    assert workload.coe is not None
    return _resolve_model(workload.coe.router, "coe.router", workload_file, lines)


def _check_coe(
    workload: WorkloadConfig,
    hardware: Hardware,
    stack: StackConfig,
    file: str,
    lines: LineMap,
    fail: Callable[[str, str], ConfigError],
) -> None:
    """A Composition of Experts needs SN40L's DDR, static slots (its plan sizes their KV
    cache beside the expert region: a paged pool for it is not modelled), a known router
    model whose heads the TP degree divides, and a number of batch slots (they share HBM
    with the expert region)."""
    coe = workload.coe
    assert coe is not None
    if hardware.kind == "gpu":
        raise fail("coe", "a Composition of Experts keeps its experts in DDR; a GPU has none")
    if stack.kv_page_tokens is not None:
        raise fail(
            "stack.kv_page_tokens",
            f"{stack.kv_page_tokens} pages the KV cache of stack {stack.name!r}, but a "
            "Composition of Experts plans static slots beside its expert region (serving.coe) "
            "and a paged KV pool for it is not modelled; leave kv_page_tokens unset (null)",
        )
    router = coe_router(workload, file, lines)
    if router.heads % workload.parallelism.tp:
        raise fail(
            "coe.router",
            f"tp={workload.parallelism.tp} does not divide the router's {router.heads} heads",
        )
    if workload.speculation is not None:
        raise fail(
            "coe",
            "a Composition of Experts serves each expert without a draft; remove speculation",
        )
    if workload.serving.batch_slots == "auto":
        raise fail(
            "serving.batch_slots",
            "a Composition of Experts needs a number of slots: their KV cache and the "
            "expert region share HBM, so 'auto' (as many slots as fit) would leave no region",
        )


def _cross_check(
    workload: WorkloadConfig,
    hardware: Hardware,
    stack: StackConfig,
    model: Architecture,
    file: str,
    lines: LineMap,
    overrides: Mapping[str, Any],
) -> KVPolicy:
    """Rules that span files: TP vs heads, sockets and the collective's links, context vs
    the model; then the KV policy, whose own parameter rules (the only ones) it returns (a
    rule over several fields blamed on the one an override set: ``overrides``, the
    workload's)."""

    fail = _failing(file, lines)
    parallelism = workload.parallelism
    sockets = hardware.system.sockets
    problem = _tp_problem(model, parallelism.tp, sockets, hardware)
    if problem is not None:
        raise fail("parallelism.tp", problem)
    problem = _devices_problem(workload, hardware)
    if problem is not None:
        raise fail("parallelism", problem, DEVICES_FIELDS)
    layout = _layout_problem(workload, hardware, model)
    if layout is not None:
        raise fail(*layout)
    serving = workload.serving
    if serving.max_context > model.max_context:
        raise fail(
            "serving.max_context",
            f"{serving.max_context} exceeds the model's maximum "
            f"context of {model.max_context} tokens",
        )
    if hardware.kind == "gpu" and workload.memory.weights != "hbm":
        raise fail(
            "memory.weights",
            f"{workload.memory.weights!r} serves weights from DDR; a GPU has no DDR tier "
            "(use hbm, or an SN40L hardware file)",
        )
    if workload.coe is not None:
        _check_coe(workload, hardware, stack, file, lines, fail)
    try:  # the policy's own parameter rules, so every entry point refuses the same inputs
        return make_policy(workload.kv, serving.max_context, stack.kv_page_tokens)
    except PolicyError as exc:
        raise fail(exc.blamed(overrides), str(exc)) from None


MAX_COUNTS_BYTES = 16 << 20
"""A file of expert counts is at most this large (100,000 experts of ~20 digits each fit)."""


def _with_expert_counts(workload: WorkloadConfig, file: str, lines: LineMap) -> WorkloadConfig:
    """``experts.load`` with its counts file read into ``counts`` (one finite count >= 0 per
    line; blank lines and ``#`` comments skipped), so the workload holds what it ran with;
    a bad line is one error naming the file and line."""
    load = workload.experts.load
    if not isinstance(load, CountsLoad) or load.file is None:
        return workload
    near = shipped.written_in(file, load.file)
    try:
        path = shipped.near_or_here(near, load.file) or near
    except (OSError, ValueError):
        path = near
    fail = _failing(file, lines)
    problem = file_problem(path)
    if problem is not None:
        raise fail(
            "experts.load.file",
            f"{str(path)!r}: {problem} (relative to the workload, else to the current folder)",
        )
    text = read_text_file(path, MAX_COUNTS_BYTES, "expert counts")
    counts: list[float] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        value = raw.split("#", 1)[0].strip()
        if not value:
            continue
        try:
            count = float(value)
        except ValueError:
            count = -1.0
        if not 0 <= count < float("inf"):
            raise ConfigError.single(
                str(path), "", f"line {number}: {value[:40]!r} is not a count >= 0", number
            )
        counts.append(count)
        if len(counts) > MAX_EXPERTS:
            raise ConfigError.single(str(path), "", f"more than {MAX_EXPERTS} counts", number)
    try:
        read = CountsLoad(dist="counts", counts=counts)
    except ValueError as exc:  # all zero, or none at all
        raise ConfigError.single(str(path), "", _reason(exc)) from None
    experts = workload.experts.model_copy(update={"load": read})
    return workload.model_copy(update={"experts": experts})


def _reason(exc: ValueError) -> str:
    """A pydantic error's message without its framing."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        return "; ".join(str(e.get("msg", "")).removeprefix("Value error, ") for e in errors())
    return str(exc)


def _switched_policy(workload: WorkloadConfig, overrides: Mapping[str, Any]) -> WorkloadConfig:
    """A workload whose KV policy an override switched: the ``kv`` fields the new policy
    derives from a given budget (``budget_determines``) and no override set are left to
    the budget. ``--set kv.policy=streamingllm`` on a SnapStream workload thus keeps its
    budget (the ring becomes budget - sinks) instead of refusing SnapStream's ``recent``."""
    kv = workload.kv
    fields = set_fields(overrides)  # (``kv={policy: ...}`` sets kv.policy too)
    if "kv.policy" not in fields or (kv.budget is None and kv.compression_ratio is None):
        return workload
    derived = {
        name
        for name in budget_determines(kv.policy)
        if name in kv.model_fields_set and f"kv.{name}" not in fields
    }
    if not derived:
        return workload
    given = kv.model_dump(exclude_unset=True, exclude=derived)
    return workload.model_copy(update={"kv": type(kv).model_validate(given)})


def _warn_unread(
    workload: WorkloadConfig, overrides: Mapping[str, Any], file: str, source: str
) -> None:
    """A warning for each override of a field the choice of its section does not read: a
    ``kv`` field the policy does not (``kv.policies.policy_reads``), a ``memory`` field the
    weights placement does not (``config.workload.WEIGHTS_READS``), a ``serving.arrival``
    field the arrival process does not (``ARRIVAL_READS``: a rate under closed_loop), one
    rule (``config.overrides.unread_overrides``): it would change nothing, and say nothing.
    The workload file's own sections are not checked: they may hold the settings of the
    choice a ``--set kv.policy`` (or a sweep) switches from (docs/kv.md, "Fields a policy
    reads")."""
    policy, weights = workload.kv.policy, workload.memory.weights
    process = workload.serving.arrival.process
    choices: list[tuple[str, str, tuple[str, ...] | None, type[UnreadFieldWarning]]] = [
        ("kv.policy", policy, policy_reads(policy), UnreadKVFieldWarning),
        ("memory.weights", weights, WEIGHTS_READS[weights], UnreadFieldWarning),
        ("serving.arrival.process", process, ARRIVAL_READS[process], UnreadFieldWarning),
    ]
    for chooser, choice, reads, kind in choices:
        section = chooser.rpartition(".")[0]
        names = ", ".join(f"{section}.{name}" for name in reads or ())
        why = f" by {chooser} {choice} (it reads {names or f'no other {section} field'})"
        for key in unread_overrides(chooser, reads, overrides):
            _warn_unread_field(key, why, overrides, file, source, kind)


def _warn_unread_on_device(scenario: Scenario, overrides: Mapping[str, Any], source: str) -> None:
    """A warning for each override (``overrides``: all of them, ``stack.`` ones too) of a
    field the scenario's kind of hardware does not read (``config.device_reads``: CUDA graphs
    on SN40L, kernel looping on a GPU at fusion auto), the rule :func:`_warn_unread` follows
    (``config.overrides.unread_paths``): the workload file's own fields are not checked
    either, so one file can run on both kinds (``llama3.1-70b-decode`` sets both fields)."""
    from rdu_sim.compiler.fusion_levels import resolve_level  # (the compiler imports this)

    gpu = scenario.hardware.kind == "gpu"
    fusion = scenario.workload.fusion
    unread = unread_on_device(gpu, fusion, resolve_level(fusion, gpu))
    device = device_words(gpu, scenario.hardware.name)
    for key in unread_paths(unread, overrides):
        why = f" on {device}{unread[key]}"
        _warn_unread_field(key, why, overrides, scenario.workload_file, source)


def _warn_unread_field(
    key: str,
    why: str,
    overrides: Mapping[str, Any],
    file: str,
    source: str,
    kind: type[UnreadFieldWarning] = UnreadFieldWarning,
) -> None:
    """The one warning of an override at ``key`` that changes nothing (``why``: what does not
    read it, after ``is not read``), naming the override as it was written."""
    given = override_for(key, overrides) or key  # as written: serving.arrival
    warn(
        kind(
            f"{file}: {key}: {set_fields(overrides)[key]!r} is not read{why}, so it changes "
            f"nothing {override_note(given, source)}"
        )
    )


def _read_config_json(
    ref: ConfigJsonModel, workload_file: str, lines: LineMap, field: str = "model"
) -> Architecture:
    """The architecture of `model: {config_json: ...}` (or of another model field); its errors
    name the JSON file and key, after a line saying which workload pointed there."""
    near = shipped.written_in(workload_file, ref.config_json)
    path = shipped.locate_near(near, ref.config_json, ("model",))  # a folder, a shipped name
    try:
        return read_config_json(path, ref.name)
    except ConfigError as exc:
        context = ConfigIssue(
            workload_file,
            f"{field}.config_json",
            f"{ref.config_json!r} cannot be modelled (paths are relative to the workload file):",
            lines.get((*field.split("."), "config_json")),
        )
        raise ConfigError([context, *exc.issues]) from None


def _resolve_model(
    value: ModelValue, field: str, workload_file: str, lines: LineMap
) -> Architecture:
    """The architecture a model field gives: a preset, a config.json, its keys inline, or an
    architecture; errors name ``field`` (``model``, ``speculation.draft``)."""
    if isinstance(value, str):
        try:
            return get_model(value)
        except UnknownModelError as exc:
            raise ConfigError.single(
                workload_file, field, str(exc), lines.get(tuple(field.split(".")))
            ) from None
    if isinstance(value, ConfigJsonModel):
        return _read_config_json(value, workload_file, lines, field)
    if isinstance(value, ConfigJsonKeys):  # a config.json's keys written inline
        keys = value.model_dump(exclude={"name"})
        return architecture_from_config(
            keys,
            file=workload_file,
            name=value.name or value.model_type,
            lines=lines,
            prefix=f"{field}.",
        )
    return value


def _draft_size_problem(
    draft: Architecture, target: Architecture, workload: WorkloadConfig
) -> str | None:
    """Why ``draft`` cannot draft for ``target``: its weights, at the workload's dtypes, are
    not smaller than the target's (a draft's k steps a round then cost more than the target
    decoding those tokens itself); None when they are smaller."""
    sizes = []
    for arch in (draft, target):
        weights, experts = storage_dtypes(arch, workload.dtypes.weights, workload.dtypes.experts)
        nbytes = weight_bytes(arch, DTYPE_BYTES[weights], DTYPE_BYTES[experts])
        sizes.append((nbytes, f"{human.number(params_total(arch) / 1e9)}B parameters"))
    (draft_bytes, draft_params), (target_bytes, target_params) = sizes
    if draft_bytes < target_bytes:
        return None
    return (
        f"a draft must be smaller than the target it drafts for: {draft.name}'s weights are "
        f"{human.size(draft_bytes)} ({draft_params}), {target.name}'s "
        f"{human.size(target_bytes)} ({target_params}); name a smaller model, or leave "
        "speculation out"
    )


def _draft_scenario(
    workload: WorkloadConfig,
    hardware: Hardware,
    target: Architecture,
    policy: KVPolicy,
    files: tuple[str, str],
    lines: LineMap,
) -> Scenario | None:
    """The draft of ``speculation`` as a scenario of its own, after the rules that tie it to
    the target: its tp and sockets, its tokenizer (vocabulary) and its context."""
    spec = workload.speculation
    if spec is None:
        return None
    file = files[0]
    fail = _failing(file, lines)
    draft = _resolve_model(spec.draft, "speculation.draft", file, lines)
    problem = _draft_size_problem(draft, target, workload)
    if problem is not None:
        raise fail("speculation.draft", problem)
    tp = workload.parallelism.tp
    draft_tp = spec.draft_tp or tp
    if spec.placement == "shared" and draft_tp != tp:
        raise fail(
            "speculation.draft_tp",
            f"a shared draft runs on the target's {tp} sockets, so draft_tp must equal "
            f"parallelism.tp ({tp}), got {draft_tp}; or use speculation.placement: separate",
        )
    sockets = hardware.system.sockets - (tp if spec.placement == "separate" else 0)
    problem = _tp_problem(draft, draft_tp, sockets, hardware)
    if problem is not None:
        raise fail("speculation.draft_tp" if spec.draft_tp else "speculation.draft", problem)
    same_vocabulary = draft.vocab_size == target.vocab_size
    same_tokenizer = same_vocabulary if spec.same_tokenizer is None else spec.same_tokenizer
    if spec.decoding is not None and not same_tokenizer:
        said = spec.same_tokenizer is not None  # false, as the workload says
        raise fail(
            "speculation.same_tokenizer" if said else "speculation.draft",
            "speculative decoding needs the draft to share the target's tokenizer: "
            + (
                "speculation.same_tokenizer is false"
                if said
                else f"{draft.name} has a vocabulary of {draft.vocab_size}, {target.name} of "
                f"{target.vocab_size} (if they share one and pad their tables differently, "
                "set speculation.same_tokenizer: true)"
            ),
        )
    if spec.shares_embeddings and (not same_vocabulary or draft.hidden_size != target.hidden_size):
        raise fail(
            "speculation.shares_embeddings",
            f"a draft sharing the target's embedding table and LM head needs their shape: "
            f"{draft.name} has {draft.vocab_size} x {draft.hidden_size}, {target.name} "
            f"{target.vocab_size} x {target.hidden_size}",
        )
    if spec.prefill is not None and spec.prefill.token_mapping is None and not same_tokenizer:
        raise fail(
            "speculation.prefill.token_mapping",
            f"{draft.name}'s tokenizer differs from {target.name}'s (vocabularies of "
            f"{draft.vocab_size} and {target.vocab_size}"
            + (", and speculation.same_tokenizer is false" if spec.same_tokenizer is False else "")
            + "): a cross-family draft needs token_mapping, the host time per prompt token to "
            "map its selection",
        )
    if workload.serving.max_context > draft.max_context:
        raise fail(
            "speculation.draft",
            f"serving.max_context {workload.serving.max_context} exceeds the draft "
            f"{draft.name}'s maximum context of {draft.max_context} tokens",
        )
    acceptance = spec.decoding.acceptance if spec.decoding is not None else None
    if acceptance is not None and acceptance.dist == "trace" and workload.serving.trace is None:
        raise fail(
            "speculation.decoding.acceptance",
            "{dist: trace} reads the acceptance column of serving.trace, and this "
            "workload has no trace",
        )
    parallelism = workload.parallelism.model_copy(update={"tp": draft_tp})
    draft_workload = workload.model_copy(
        update={"model": draft, "parallelism": parallelism, "speculation": None}
    )
    return Scenario(draft_workload, hardware, draft, file, files[1], policy)


def build_scenario(
    data: Mapping[str, Any],
    *,
    workload_file: str,
    lines: LineMap | None = None,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
    overrides_from: str = SET,
    device_checked: Mapping[str, Any] | None = None,
) -> Scenario:
    """Validate workload data (already parsed) and load its hardware and stack files;
    ``overrides_from`` names where the overrides that do not say were given, for their errors
    (``--set``, ``pools.serve.set``; ``config.overrides.origin_of``). ``device_checked``: the
    overrides warned of when the hardware does not read them (default: all of them; a
    scenario rebuilt with more passes only those, not its machine's and stack's own fields)."""
    lines = lines or {}
    source = origin_of(overrides, overrides_from)
    normalized = normalize_overrides(overrides, source)
    workload_overrides, _, _ = split_overrides(normalized)
    raw = dict(data) if isinstance(data, Mapping) else data
    if isinstance(raw, dict):
        _expand_preset(raw, workload_overrides, workload_file, source)
        raw = _apply(raw, workload_overrides, workload_file, "", source)
    workload = _validate(WorkloadConfig, raw, workload_file, lines, workload_overrides, "", source)
    workload = _switched_policy(workload, workload_overrides)
    _warn_unread(workload, workload_overrides, workload_file, source)
    try:
        scenario = _resolved(workload, workload_file, lines, normalized, source)
    except ConfigError as exc:  # a rule after validation, at a field an override may have set
        raise overridden(exc, workload_file, workload_overrides, "", source) from None
    checked = normalized if device_checked is None else device_checked
    _warn_unread_on_device(scenario, checked, source)
    return scenario


def _resolved(
    workload: WorkloadConfig,
    workload_file: str,
    lines: LineMap,
    overrides: Mapping[str, Any],
    source: str,
) -> Scenario:
    """The scenario of a validated workload: its expert counts, model, hardware and stack
    read, the rules across files checked (``overrides``: all of them, normalized; ``source``:
    where they were given)."""
    chosen, hardware_overrides, stack_overrides = split_overrides(overrides)
    workload = _with_expert_counts(workload, workload_file, lines)

    model = _resolve_model(workload.model, "model", workload_file, lines)

    hardware_path = shipped.locate_near(
        shipped.written_in(workload_file, workload.hardware), workload.hardware, ("hardware",)
    )
    problem = file_problem(hardware_path)
    if problem is not None:
        known = shipped.names("hardware")
        meant = did_you_mean(hardware_path.name.removesuffix(".yaml"), known)
        missing = problem == "file not found" and not hardware_path.is_symlink()
        if missing and shipped.is_bare(workload.hardware):  # a name, not a path: no file
            message = (  # as a name, as a stack's is (the path it was tried at is no file)
                f"unknown hardware file {workload.hardware!r}{meant} (a path is relative to "
                f"the workload file; a bare name is a shipped hardware file: {', '.join(known)})"
            )
        else:
            message = (
                f"hardware file {str(hardware_path)!r}: {problem}{meant} (paths are relative "
                f"to the workload file; a bare name is a shipped hardware file: "
                f"{', '.join(known)}{shipped.shadowed(hardware_path, ('hardware',))})"
            )
        raise ConfigError.single(workload_file, "hardware", message, lines.get(("hardware",)))
    hw_file = str(hardware_path)
    try:
        hw_data, hw_lines = read_hardware(hardware_path)
        other = kind_problem(hw_data, workload.hardware, "hardware")
        if other is not None:  # one error, not one per field of a cluster or a workload
            raise ConfigError.single(workload_file, "hardware", other, lines.get(("hardware",)))
        if isinstance(hw_data, dict):
            hw_data = _apply(hw_data, hardware_overrides, hw_file, HW_PREFIX, source)
        model_type = hardware_model(hw_data, hw_file, hw_lines)
        hardware = _validate(
            model_type, hw_data, hw_file, hw_lines, hardware_overrides, HW_PREFIX, source
        )
    except ConfigError as exc:
        if exc.issues and exc.issues[0].file == workload_file:  # the kind: said once
            raise
        # Say which workload led here (the issues themselves name the hardware file), unless
        # only overrides are at fault
        named = ConfigIssue(workload_file, "hardware", "", lines.get(("hardware",)))
        set_by = override_note("hardware", source) if "hardware" in chosen else ""
        raise in_context(exc, named, hw_file, hardware_overrides, set_by) from None
    stack, stack_file = _load_stack(
        workload,
        hardware,
        (workload_file, str(hardware_path)),
        lines,
        stack_overrides,
        source,
        "stack" in chosen,
        hw_lines,
    )
    files = (workload_file, str(hardware_path))
    try:  # the rules across the files: they refuse this combination, not a file
        policy = _cross_check(workload, hardware, stack, model, workload_file, lines, chosen)
        draft = _draft_scenario(workload, hardware, model, policy, files, lines)
    except ConfigError as exc:
        raise CombinationError(exc.issues) from None
    if draft is not None:
        draft = dataclasses.replace(
            draft, stack=stack, stack_file=stack_file, hardware_lines=hw_lines
        )
    return Scenario(
        workload,
        hardware,
        model,
        *files,
        policy,
        stack,
        stack_file,
        draft,
        # its own (a caller's later edit is not its), with where they were given
        overrides=GivenOverrides(copy.deepcopy(dict(overrides)), source),
        lines=lines,
        hardware_lines=hw_lines,
    )


def _load_stack(
    workload: WorkloadConfig,
    hardware: Hardware,
    files: tuple[str, str],
    lines: LineMap,
    overrides: Mapping[str, Any],
    source: str,
    chosen: bool = False,
    hardware_lines: LineMap | None = None,
) -> tuple[StackConfig, str]:
    """The serving stack the workload names (``stack:``; ``chosen``: an override at
    ``source`` set it), else its hardware file's default (its line in ``hardware_lines``),
    with the ``stack.`` overrides (given at ``source``) applied; it must run on the
    hardware's kind."""
    hardware_lines = hardware_lines or {}
    if workload.stack is not None:
        named, near, field_name = workload.stack, files[0], "stack"
    else:
        named, near, field_name = hardware.default_stack, files[1], "default_stack"
    path = stack_path(named, near)
    named_at = lines if field_name == "stack" else hardware_lines
    line = named_at.get((field_name,))
    missing = unknown_stack(named, path)
    if missing is not None:  # at the field that names it, as a missing hardware file is
        raise ConfigError.single(near, field_name, missing, line)
    other = None
    try:
        data, stack_lines, file = stack_data(path)
        other = kind_problem(data, named, "stack")
        if other is not None:  # one error, not one per field of a cluster or a workload
            raise ConfigError.single(file, "", other)
        data = _apply(data, overrides, file, STACK_PREFIX, source)
        stack = _validate(StackConfig, data, file, stack_lines, overrides, STACK_PREFIX, source)
    except ConfigError as exc:
        if other is not None:
            raise ConfigError.single(near, field_name, other, line) from None
        at = ConfigIssue(near, field_name, "", line)
        set_by = override_note("stack", source) if chosen and field_name == "stack" else ""
        placed = in_context(exc, at, NONE if path is None else str(path), overrides, set_by)
        raise (placed if path is not None else _device_alone(placed, files[0])) from None
    problem = runs_on_problem(stack, hardware.kind)
    if problem is not None:
        where = "" if field_name == "stack" else f" (the default_stack of {files[1]})"
        raise CombinationError.single(
            files[0],
            "stack",
            f"{problem}{where}; hardware {hardware.name!r} needs a stack for it: name one "
            f"(stack: NAME, --set stack=NAME) or run its default (--set stack=null, here "
            f"{hardware.default_stack!r})",
            lines.get(("stack",)),
        )
    return stack, file


def _device_alone(exc: ConfigError, workload_file: str) -> ConfigError:
    """The issues of the built-in ``none`` stack, which has no file, named by the workload
    that chose it: ``w.yaml (stack none: the device alone): decode_program: ...``, not
    ``none: decode_program: ...`` (the field stays the stack's own, as its ``(from --set
    stack.decode_program)`` note says; the workload's ``stack.`` is no field of its file)."""
    at = f"{workload_file} (stack none: the device alone)"
    return type(exc)([dataclasses.replace(i, file=at) if i.file == NONE else i for i in exc.issues])


def with_overrides(
    scenario: Scenario,
    overrides: Iterable[str] | Mapping[str, Any] | None,
    overrides_from: str = SET,
) -> Scenario:
    """``scenario`` with ``overrides`` (given where they say, else at ``overrides_from``:
    ``config.overrides.origin_of``) applied on top of its own (already overridden) workload,
    hardware and stack data; the files on disk would lose earlier ``hw.`` and ``stack.``
    overrides. A new ``hardware`` starts from its file's own fields and stack (the earlier
    ``hw.`` and ``stack.`` overrides edited another machine's), a new ``stack`` from its
    file's: those earlier overrides are dropped from the record too, so its ``overrides``
    are exactly those applied (the workload file loaded with them gives this scenario, as
    a run's provenance replays). No overrides: the same scenario. Its earlier overrides keep
    where they were given (``SetSource`` origins)."""
    given = origin_of(overrides, overrides_from)
    added = normalize_overrides(overrides, given)  # (a TypeError for what they cannot be)
    if not added:
        return scenario
    data = scenario.workload.model_dump(mode="json")
    hardware = scenario.hardware.model_dump(mode="json")
    merged: dict[str, Any] = {}
    dropped: tuple[str, ...] = ()  # the prefixes of earlier overrides no longer applied
    if "hardware" in added:  # a new hardware file starts from its own fields
        dropped = (HW_PREFIX, STACK_PREFIX)
    else:
        merged.update({f"{HW_PREFIX}{key}": value for key, value in hardware.items()})
    if "stack" in added:
        dropped = (*dropped, STACK_PREFIX)
    elif "hardware" not in added:
        stack = scenario.stack.model_dump(mode="json")
        merged.update({f"{STACK_PREFIX}{key}": value for key, value in stack.items()})
    merged.update(added)
    kept = {k: v for k, v in scenario.overrides.items() if not k.startswith(dropped)}
    rebuilt = build_scenario(
        data,
        workload_file=scenario.workload_file,
        overrides=merged,
        overrides_from=given,
        device_checked=added,
    )
    earlier = source_of(scenario.overrides)
    origins = dict(given.origins) if isinstance(given, SetSource) else {}
    origins.update({k: override_origin(k, earlier) for k in kept if k not in added})
    source = SetSource(given, origins) if origins else given
    earlier_kept = {k: v for k, v in kept.items() if k not in added}  # (applied in order)
    both = copy.deepcopy({**earlier_kept, **added})
    return dataclasses.replace(rebuilt, overrides=GivenOverrides(both, source))


def load_scenario(
    path: str | Path,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
    overrides_from: str = SET,
) -> Scenario:
    """Read a workload file (and its hardware file) into a validated Scenario; ``path`` may
    also name a shipped workload (``deepseek-r1-128k-snapstream``, ``rdu_sim.config.shipped``);
    ``overrides_from`` names where the overrides were given (``build_scenario``)."""
    file = shipped.locate(path, ("workload",))
    data, lines = read_yaml(file)
    refuse_other_kind(data, str(file), "workload")
    if not isinstance(data, Mapping):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError.single(str(file), "", f"expected a mapping of fields, got {kind}")
    return build_scenario(
        data,
        workload_file=str(file),
        lines=lines,
        overrides=overrides,
        overrides_from=overrides_from,
    )
