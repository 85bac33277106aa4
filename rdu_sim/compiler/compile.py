"""The compiler's front door: a Scenario and a StepShape in, a Program out.

`Compiler(scenario)` holds the per-scenario caches (programs by shape, placements by batch
slots, the batch capacity): build one per scenario and ask it for every shape, so nothing
is global and one run cannot change another's results. `compile_program` is the one-shot
convenience.

How a kernel graph becomes stages (one stage per operator, topologically ordered):
- weight reads go to the tier the placement put the weight in (split by share when a
  tensor straddles HBM and DDR; the SnapKV selection, which places no weight of its own,
  reads every layer's copy: `_hbm_share`);
- KV reads and writes go to the KV cache's tier;
- tensors crossing the kernel boundary (the graph's inputs and outputs: hidden states,
  token ids, logits, SnapKV window queries) are read from / written to HBM;
- tensors between stages stream on-chip (`output_bytes`), except whole-layer edges too
  large for the SRAM, which are spilled to HBM (written and read back: `buffers`).

Then each kernel gets its tiles per call and its stages' PCUs and PMUs: from the fewest
tiles from `engine.tiles_per_stage` at which every stage's buffers fit whole PMUs
(`buffers.plan_tiles`), doubling up to a tile per row (`buffers.finer_plans`), the count
whose placement is estimated fastest, ties to the fewest (`choose_tiles`, `kernel_time`):
at each, the allocation above the buffers' floors (`allocation`) and what each GEMM stage
keeps resident in the SRAM left over: its streamed operand, or blocks of input rows over
which it re-reads the operand (`buffers.residency`: `passes`). Finer tiles shrink the
buffers and so the passes: without weighing them, more SRAM could let a kernel fit at
fewer tiles and re-read its weights more often, a slower step (the 405B's prefill at 585
KiB per PMU took 1.66 s against 1.18 s at 512).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from rdu_sim.compiler.allocation import StageWork, allocate
from rdu_sim.compiler.buffers import (
    BufferRule,
    TilePlan,
    finer_plans,
    input_bytes,
    plan_tiles,
    residency,
    rows_floor,
)
from rdu_sim.compiler.errors import (
    CapacityError,
    HardwareCapacityError,
    SlotsCapacityError,
    at_hardware,
    at_slots,
)
from rdu_sim.compiler.expert_exchange import micro_batch_shapes
from rdu_sim.compiler.expert_schedule import ProgramTimer, choose_schedule
from rdu_sim.compiler.fusion import KernelGraph, kernel_graphs, step_groups
from rdu_sim.compiler.layout import precision, shard_plan
from rdu_sim.compiler.mla_queries import chooses_queries
from rdu_sim.compiler.placement import (
    PlanFacts,
    batch_capacity,
    hbm_fractions,
    plan_memory,
    slot_tokens,
    spill_absorbs,
    whole_queries,
)
from rdu_sim.compiler.program import (
    CollectiveSpec,
    KernelProgram,
    Placement,
    Program,
    StageProgram,
    Tier,
    with_sram,
)
from rdu_sim.compiler.query_choice import choose_queries, makes_queries, replicates, wiring_key
from rdu_sim.compiler.row_barriers import whole_row_stages
from rdu_sim.compiler.row_path import RowGraph
from rdu_sim.compiler.shared_programs import shared
from rdu_sim.compiler.stages import PipelineStage, scenario_stages
from rdu_sim.compiler.view import CompileView, compile_view
from rdu_sim.config.hardware import HardwareConfig, SocketConfig
from rdu_sim.config.workload import EngineConfig
from rdu_sim.graph import Operator, operators
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.heads import logit_bytes
from rdu_sim.scenario import Scenario
from rdu_sim.shapes import Gemm, StepShape
from rdu_sim.systolic import stage_gemm_efficiency


class Compiler:
    """Compiles one scenario's static shapes into Programs, caching per instance (and per
    process inside `shared_programs.sharing`).

    Every rule compiles the scenario's `compile_view` (the fields it may read); read here of
    the scenario itself are ``serving.batch_slots``, resolved into the slot count the memory
    plan is made for and passed on as an argument (a plan of them that does not fit names
    the field: `errors.at_slots`), and the system's links, passed to the
    rules that choose how a sequence-split MLA gets its queries (`compiler.query_choice`):
    the results keyed by the links are those choices and the capacity they set; a plan and a
    step's kernels are keyed by the choices, so points differing only in their links share
    them where the choices agree. With pipeline stages (``parallelism.pp``) each stage has
    its own memory plan, query choices and Programs (``compiler.stages``), keyed by its
    index; the batch capacity is the tightest stage's.
    """

    def __init__(self, scenario: Scenario, timer: ProgramTimer | None = None) -> None:
        self.scenario = scenario
        self.timer = timer  # times a static MoE step's two expert schedules (expert_schedule)
        self._view: CompileView | None = None
        self._facts: PlanFacts | None = None
        self._programs: dict[StepShape, Program] = {}
        # two-batch overlap's micro-batches (and whether they stream every expert)
        self._micro: dict[tuple[StepShape, bool, bool | None], Program] = {}
        self._placements: dict[tuple[int, int], Placement] = {}
        self._capacity: int | None = None
        self._kernels: dict[tuple[StepShape, int, bool, bool, bool], list[KernelGraph]] = {}
        self._whole_queries: dict[tuple[int, int], bool] = {}
        # whether a step of a shape (on a stage) replicates MLA's queries, given them whole
        self._replicates: dict[tuple[StepShape, int], bool] = {}
        # whether a step whose queries the engine timed both ways makes them (query_choice)
        self._forms: dict[StepShape, bool] = {}
        self._system = scenario.hardware.system
        self._wiring = wiring_key(self._system) if chooses_queries(scenario) else None
        self._stages: tuple[PipelineStage | None, ...] = (
            scenario_stages(scenario) if scenario.workload.parallelism.pp > 1 else (None,)
        )

    @property
    def view(self) -> CompileView:
        """The fields of the scenario the compiler's rules may read (built once)."""
        if self._view is None:
            self._view = compile_view(self.scenario)
        return self._view

    @property
    def facts(self) -> PlanFacts:
        """What the memory rules ask of the viewed scenario more than once (built once)."""
        if self._facts is None:
            self._facts = PlanFacts(self.view.scenario)
        return self._facts

    def batch_capacity(self) -> int:
        """Most batch slots whose KV and activations fit in HBM beside the weights (on every
        pipeline stage) and that the serving stack runs (`StackConfig.runnable_batch`); 0
        when not one does and the workload's explicit slots shrink a hot set instead
        (`placement.spill_absorbs`), else a CapacityError."""
        if self._capacity is None:
            self._capacity = self._capacity_of(True)
        return self._capacity

    def memory_capacity(self) -> int:
        """Most batch slots whose KV and activations fit in HBM beside the weights (on every
        pipeline stage), whether or not the stack runs that batch: the most an explicit
        ``serving.batch_slots`` runs without pushing weights out of HBM, which ``hbm``
        refuses and ``hot_set`` does (0, or a CapacityError, as `batch_capacity`)."""
        return self._capacity_of(False)

    def _capacity_of(self, runnable: bool) -> int:
        """The tightest stage's capacity; the one rule of what none means (run, step,
        compare, inspect graph and check all ask here, so they agree)."""
        try:
            return min(self._stage_capacity(stage, runnable) for stage in self._stages)
        except CapacityError as exc:
            if spill_absorbs(self.scenario, exc):
                return 0  # the memory plan decides
            raise

    def _stage_capacity(self, stage: PipelineStage | None, runnable: bool) -> int:
        view = self.view
        return shared(
            "capacity",
            (view.digest, _index(stage), self._wiring, runnable),
            lambda: batch_capacity(
                view.scenario,
                stage=stage,
                system=self._system,
                runnable=runnable,
                facts=self.facts,
            ),
        )

    def batch_slots(self) -> int:
        """serving.batch_slots, or the batch capacity when it says 'auto'."""
        return self.scenario.workload.serving.slots_for(self.batch_capacity)

    def placement(self, batch_slots: int | None = None) -> Placement:
        """The memory plan for `batch_slots` slots (default: the workload's); with pipeline
        stages, the stage whose HBM is fullest."""
        slots = self.batch_slots() if batch_slots is None else batch_slots
        plans = [self._placement(slots, stage) for stage in self._stages]
        return max(plans, key=lambda p: p.tiers["hbm"].used_bytes / p.tiers["hbm"].capacity_bytes)

    def _placement(self, slots: int, stage: PipelineStage | None) -> Placement:
        key = (slots, _index(stage))
        if key not in self._placements:
            view = self.view
            decode = StepShape("decode", slots, 1, slot_tokens(view.scenario))
            queries = self.queries(decode, slots, stage)
            try:
                self._placements[key] = shared(
                    "placement",
                    (view.digest, slots, _index(stage), queries),
                    lambda: plan_memory(
                        view.scenario,
                        slots,
                        lambda shape: self.kernels(shape, stage, slots),
                        stage,
                        self._system,
                        self.facts,
                    ),
                )
            except SlotsCapacityError as exc:  # the view has no lines: the scenario's
                raise at_slots(self.scenario, slots, exc) from None
        return self._placements[key]

    def whole_queries(self, batch_slots: int, stage: PipelineStage | None = None) -> bool:
        """Whether the memory plan for `batch_slots` slots (of a pipeline ``stage``) holds
        MLA's query weights whole on every socket (`placement.whole_queries`)."""
        key = (batch_slots, _index(stage))
        if key not in self._whole_queries:
            view = self.view
            self._whole_queries[key] = shared(
                "whole_queries",
                (view.digest, batch_slots, _index(stage), self._wiring),
                lambda: whole_queries(view.scenario, batch_slots, stage, self._system, self.facts),
            )
        return self._whole_queries[key]

    def queries(
        self,
        shape: StepShape,
        batch_slots: int,
        stage: PipelineStage | None = None,
        replicate: bool | None = None,
    ) -> tuple[bool, bool]:
        """MLA's queries in a step of `shape` (on a pipeline ``stage``) on the memory plan
        for `batch_slots` slots: whether the plan holds their weights whole, and whether the
        step makes every head's queries on every socket rather than gathering:
        ``replicate`` when given (a candidate the engine times: `query_choice.choose_queries`),
        else as `query_choice.replicates` estimates (the memory plan's own step)."""
        whole = self.whole_queries(batch_slots, stage)
        if not whole:
            return False, False
        if replicate is not None:
            return True, replicate
        key = (shape, _index(stage))
        if key not in self._replicates:  # a step's choice, asked by every rule that shards it
            view = self.view
            plan = replace(shard_plan(view.scenario, shape), whole_queries=True)
            self._replicates[key] = shared(
                "replicates",
                (view.digest, shape, _index(stage), self._wiring),
                lambda: replicates(
                    view.scenario, step_groups(view.scenario, shape, stage), plan, self._system
                ),
            )
        return True, self._replicates[key]

    def program_queries(self, program: Program) -> tuple[bool, bool]:
        """`queries` of a Program this compiler made (with pipeline stages: of its first
        stage, whose kernels it reports)."""
        first = program.pipeline[0] if program.pipeline else program
        form = self._forms.get(program.shape)
        return self.queries(first.shape, first.placement.batch_slots, self._stages[0], form)

    def plan_slots(self, shape: StepShape) -> int:
        """The slots of the memory plan a step of `shape` runs on: the workload's, or the
        step's batch when larger."""
        return max(shape.batch, shape.decode_batch, self.batch_slots())

    def kernels(
        self,
        shape: StepShape,
        stage: PipelineStage | None = None,
        batch_slots: int | None = None,
        all_experts: bool = False,
        replicate: bool | None = None,
    ) -> list[KernelGraph]:
        """The fused, sharded kernel graphs of one step (of one pipeline ``stage``), before
        stage allocation, on the memory plan for `batch_slots` slots (default: `plan_slots`),
        kept until that step's Program is made: the memory plan reads the graphs of the
        decode step of its slots, often the first Program asked for (its graphs are read,
        never changed). A shape never compiled keeps its graphs as long as the compiler.
        ``all_experts``: static MoE layers stream every expert (`compiler.expert_schedule`);
        ``replicate``: the queries' form, as for `queries`."""
        slots = self.plan_slots(shape) if batch_slots is None else batch_slots
        whole, replicate = self.queries(shape, slots, stage, replicate)
        key = (shape, _index(stage), whole, replicate, all_experts)
        graphs = self._kernels.get(key)
        if graphs is None:
            graphs = self._kernels[key] = kernel_graphs(
                self.view.scenario,
                shape,
                stage,
                whole_queries=whole,
                replicate_queries=replicate,
                all_experts=all_experts,
            )
        return graphs

    def program(self, shape: StepShape) -> Program:
        """The Program of one static shape (cached); with two-batch overlap, its
        micro-batches' Programs beside it (``Program.micro_batches``); with pipeline stages,
        each stage's Program of one micro-batch (``Program.pipeline``). Under static expert
        loading, the faster of its two expert schedules (`expert_schedule.choose_schedule`,
        timed by the compiler's ``timer``: the scenario's engine). Under the MLA
        sequence_split layout, on a memory plan holding the query weights whole, the faster
        of making every head's queries and gathering them, so timed
        (`query_choice.choose_queries`; each form with its faster expert schedule)."""
        cached = self._programs.get(shape)
        if cached is not None:
            return cached
        timer = None if self.timer is None else _timed_once(self.timer)
        forms: dict[bool | None, Program] = {}

        def schedule(replicate: bool | None) -> Program:
            forms[replicate] = choose_schedule(
                self.scenario, lambda every: self._step(shape, every, replicate), timer
            )
            return forms[replicate]

        if timer is not None and self._chooses_queries(shape):
            program = choose_queries(schedule, timer)
            self._forms[shape] = program is forms.get(True)
        else:
            program = schedule(None)
        self._programs[shape] = program
        return program

    def _chooses_queries(self, shape: StepShape) -> bool:
        """Whether a step of ``shape`` could make MLA's queries either way: some pipeline
        stage's memory plan holds their weights whole and the step has queries to make."""
        scenario = self.view.scenario
        slots = self.plan_slots(shape)
        return any(
            self.whole_queries(slots, stage)
            and makes_queries(step_groups(scenario, shape, stage), shard_plan(scenario, shape))
            for stage in self._stages
        )

    def _step(self, shape: StepShape, all_experts: bool, replicate: bool | None = None) -> Program:
        """`program` of one expert schedule (``all_experts``: every expert streamed) and
        form of MLA's queries (``replicate``, as for `queries`)."""
        pipelined = self._stages[0] is not None
        program = (
            self._pipelined(shape, all_experts, replicate)
            if pipelined
            else self._compile(shape, all_experts=all_experts, replicate=replicate)
        )
        if self.view.scenario.workload.parallelism.two_batch_overlap:
            micro = tuple(
                self._micro_batch(part, all_experts, replicate)
                for part in micro_batch_shapes(shape)
            )
            program = replace(program, micro_batches=micro)
        return program

    def _pipelined(
        self, shape: StepShape, all_experts: bool = False, replicate: bool | None = None
    ) -> Program:
        """A step through the pipeline: its batch cut into ``parallelism.micro_batches``
        micro-batches (at most its sequences: ``step_micro_batches``; each the largest one's
        shape), each stage's Program of one micro-batch; the step's memory plan its fullest
        stage's."""
        parts = self.view.scenario.workload.parallelism.step_micro_batches(shape.batch)
        micro = shape.part(
            batch=math.ceil(shape.batch / parts),
            decode_batch=math.ceil(shape.decode_batch / parts),
        )
        slots = self.plan_slots(shape)
        stages = tuple(
            self._compile(micro, stage, slots, all_experts, replicate) for stage in self._stages
        )
        fullest = self.placement(slots)  # its stage's Program holds it with that stage's SRAM
        return Program(
            shape=shape,
            tp=self.view.scenario.tp,
            kernels=stages[0].kernels,
            placement=stages[fullest.pipeline_stage].placement,
            stage_devices=stages[0].stage_devices,
            pipeline=stages,
            pipeline_micro_batches=parts,
            pipeline_transfer_bytes=micro.rows
            * self.view.scenario.model.hidden_size
            * self.view.scenario.activation_dtype_bytes,
        )

    def _micro_batch(
        self, shape: StepShape, all_experts: bool = False, replicate: bool | None = None
    ) -> Program:
        """One micro-batch's Program (compiled whole: a micro-batch is not cut again)."""
        key = (shape, all_experts, replicate)
        if key not in self._micro:
            self._micro[key] = self._compile(shape, all_experts=all_experts, replicate=replicate)
        return self._micro[key]

    def _compile(
        self,
        shape: StepShape,
        stage: PipelineStage | None = None,
        slots: int | None = None,
        all_experts: bool = False,
        replicate: bool | None = None,
    ) -> Program:
        """The Program of ``shape`` run as one batch (on one pipeline ``stage``, whose memory
        plan holds ``slots`` slots; default: `plan_slots`; ``all_experts``: static MoE
        layers stream every expert; ``replicate``: MLA's queries' form, as for `queries`)."""
        planned = self.plan_slots(shape) if slots is None else slots
        placement = self._placement(planned, stage)
        fractions = weight_fractions(placement)
        kv_tier: Tier = next((t.tier for t in placement.tensors if t.kind == "kv"), "hbm")
        view = self.view
        queries = self.queries(shape, planned, stage, replicate)
        try:
            kernels = self._kernel_programs(
                shape, stage, planned, all_experts, fractions, kv_tier, replicate
            )
        except HardwareCapacityError as exc:  # the view has no overrides: the scenario's
            raise at_hardware(self.scenario, exc) from None
        self._kernels.pop((shape, _index(stage), *queries, all_experts), None)  # not needed again
        devices = view.scenario.workload.parallelism.stage_devices
        load = shard_plan(view.scenario, all_experts=all_experts).expert_load
        program = Program(
            shape=shape,
            tp=view.scenario.tp,
            kernels=kernels,
            placement=placement,
            host_bytes=host_bytes(view.scenario, shape),
            stage_devices=devices if devices > view.scenario.tp else 0,
            expert_balance=None if load is None else load.load(shape.rows, shape.joint_tokens),
        )
        return replace(program, placement=with_sram(placement, program.sram_bytes))

    def _kernel_programs(
        self,
        shape: StepShape,
        stage: PipelineStage | None,
        planned: int,
        all_experts: bool,
        fractions: dict[str, float],
        kv_tier: Tier,
        replicate: bool | None = None,
    ) -> tuple[KernelProgram, ...]:
        """The step's kernels, compiled (shared among compilers of equal views)."""
        view = self.view
        queries = self.queries(shape, planned, stage, replicate)
        return shared(
            "kernels",
            (
                view.digest,
                shape,
                tuple(sorted(fractions.items())),
                kv_tier,
                _index(stage),
                queries,
                all_experts,
            ),
            lambda: _kernel_programs(
                view.scenario,
                fractions,
                kv_tier,
                shape,
                self.kernels(shape, stage, planned, all_experts, replicate),
            ),
        )


def _timed_once(timer: ProgramTimer) -> ProgramTimer:
    """``timer``, each Program timed once (the expert schedule's choice and the queries' time
    the same candidates): keyed by identity, each Program kept so its id is not reused."""
    times: dict[int, tuple[Program, float]] = {}

    def timed(program: Program) -> float:
        if id(program) not in times:
            times[id(program)] = (program, timer(program))
        return times[id(program)][1]

    return timed


def _index(stage: PipelineStage | None) -> int:
    """A stage's index in cache keys (-1: the whole model, no pipeline)."""
    return -1 if stage is None else stage.index


def _kernel_programs(
    scenario: Scenario,
    fractions: dict[str, float],
    kv_tier: Tier,
    shape: StepShape,
    kernels: list[KernelGraph],
) -> tuple[KernelProgram, ...]:
    """Every kernel of one step (``kernels``: the step's kernel graphs), its stages
    allocated: a function of exactly its arguments (what `Compiler.program` keys its shared
    results by; the graphs are a function of the scenario and the shape)."""
    hardware = scenario.hardware
    if isinstance(hardware, HardwareConfig):
        engine = scenario.workload.engine
        rule = BufferRule(
            engine.buffer_tiles, engine.prefetch_tiles, hardware.system.collective_chunks
        )
        return tuple(
            _kernel_program(
                k, fractions, kv_tier, hardware.socket, engine, rule, k.rows or shape.rows
            )
            for k in kernels
        )
    # a GPU runs each kernel on all its SMs: no stage gets units of its own (0)
    return tuple(
        KernelProgram(
            k.name,
            k.calls,
            k.looped,
            tuple(_stages(k, fractions, kv_tier, units=0)),
            k.layer,
        )
        for k in kernels
    )


def host_bytes(scenario: Scenario, shape: StepShape) -> float:
    """What a step sends its host before the next step can start: the logits when the
    serving stack samples on the host (the token ids of device sampling stay on the device,
    where the next step reads them)."""
    if scenario.stack.sampling == "device":
        return 0.0
    return logit_bytes(scenario.model, shape, precision(scenario))


def compile_program(scenario: Scenario, shape: StepShape) -> Program:
    """One Program, without keeping a cache (use a Compiler for many shapes). No engine times
    a static MoE step's two expert schedules here: it keeps the gather, where a step timed
    through the serving level (``EngineBackend.compiler``: ``api.step``, runs) may stream
    every expert (`expert_schedule`)."""
    return Compiler(scenario).program(shape)


ANY_KERNEL = "*"
"""The kernel part of a `weight_fractions` key pooling a weight over every kernel placing it."""


def weight_fractions(placement: Placement) -> dict[str, float]:
    """HBM share of each placed weight tensor, for `_hbm_share`.

    `"<kernel>/<weight>"`: the tensor that kernel places (`hbm_fractions`); and
    `"*/<weight>"`: all the tensors of that weight name together, the share of their bytes
    in HBM (what a kernel reading every layer's copy of the weight gets from HBM).
    """
    fractions = hbm_fractions(placement)
    sizes: dict[str, list[int]] = {}
    for tensor in placement.tensors:
        if tensor.kind == "weights":
            entry = sizes.setdefault(tensor.name.split("/", 1)[1], [0, 0])
            entry[0 if tensor.tier == "hbm" else 1] += tensor.bytes
    fractions.update(
        {
            f"{ANY_KERNEL}/{name}": hbm / (hbm + ddr)
            for name, (hbm, ddr) in sizes.items()
            if hbm + ddr
        }
    )
    return fractions


def _hbm_share(fractions: dict[str, float], kernel: str, weight: str) -> float:
    """Share of `kernel`'s reads of `weight` that come from HBM (the rest from DDR).

    `plan_memory` places weights per kernel of the decode step: `"<kernel>/<weight>"` is the
    tensor holding that weight for every layer the kernel runs, e.g. DeepSeek's
    `decoder_dense/attn.kv_b_proj` holds the 3 dense layers' copies and
    `decoder_moe/attn.kv_b_proj` the 58 MoE layers'; a straddling tensor's reads split
    between HBM and DDR in proportion to its bytes. A kernel reads its own placement.

    A kernel with no placement of its own (`snapkv_score` of a compressing prefill, or a
    decode step's `evict_score`: they read W_UK and hold none) reads the copies the kernels
    that own the weight placed: its call for layer l reads layer l's copy, placed by the
    kernel that runs layer l. The selection runs for every layer, so its share is that of
    all the owners' tensors together, weighted by
    bytes (`"*/<weight>"`, see `weight_fractions`): with equal copies per layer, the
    layer-weighted mean `(3 x dense share + 58 x MoE share) / 61` for kv_b_proj. Neither the
    first owner's share (decoder_dense's, which this once returned) nor the MoE kernel's
    alone (the selection covers the dense layers too). A weight no kernel placed is read
    from HBM.
    """
    for key in (f"{kernel}/{weight}", f"{ANY_KERNEL}/{weight}"):
        if key in fractions:
            return fractions[key]
    return 1.0


def _add(target: dict[Tier, float], tier: Tier, value: float) -> None:
    if value:
        target[tier] = target.get(tier, 0.0) + value


@dataclass(frozen=True)
class _Draft:
    """A stage before allocation, with what residency needs: the off-chip bytes per call
    its GEMM re-uses for every input row (weights, KV) by tier, and its kernel-input
    activation reads."""

    stage: StageProgram
    operand: dict[Tier, float]
    external_bytes: float


def _stage(
    kernel: KernelGraph, node: Operator, fractions: dict[str, float], kv_tier: Tier, units: int = 1
) -> _Draft:
    """``node``'s stage draft, with ``units`` PCUs and PMUs before allocation (0: a GPU's,
    which runs each kernel on all its SMs)."""
    graph = kernel.graph
    external = graph.graph.get("inputs", {})
    finals = graph.graph.get("output_nodes", {})
    operand: dict[Tier, float] = {}
    writes: dict[Tier, float] = {}
    share = _hbm_share(fractions, kernel.group, node.weight_name)
    _add(operand, "hbm", node.weight_read_bytes * share)
    _add(operand, "ddr", node.weight_read_bytes * (1 - share))
    _add(operand, kv_tier, node.kv_read_bytes)
    _add(writes, kv_tier, node.kv_write_bytes)
    reads = dict(operand)
    streamed_in = {
        name
        for source in graph.predecessors(node.name)
        for name in graph.edges[source, node.name]["tensors"]
    }
    activations = (  # a kernel input gathered in the kernel arrives from the gather
        sum(t.bytes for t in node.inputs if t.name in external and t.name not in streamed_in)
        * node.act_read_fraction
    )
    _add(reads, "hbm", activations)
    _add(
        writes,
        "hbm",
        sum(t.bytes for t in node.outputs if finals.get(t.name) == node.name)
        * node.act_write_fraction,
    )
    streamed = {
        name
        for target in graph.successors(node.name)
        for name in graph.edges[node.name, target]["tensors"]
    }
    output_bytes = (
        sum(t.bytes for t in node.outputs if t.name in streamed) * node.act_write_fraction
    )
    gemm = node.gemm
    stage = StageProgram(
        name=node.name,
        op=node.kind,
        pcus=units,
        pmus=units,
        flops=node.flops,
        vector_flops=node.vector_flops,
        reads=reads,
        writes=writes,
        inputs=tuple(graph.predecessors(node.name)),
        output_bytes=output_bytes,
        gemm=None if gemm is None else Gemm(gemm.m, gemm.n, gemm.k, gemm.batch),
        collective=None
        if node.collective is None
        else CollectiveSpec(node.collective, node.collective_bytes, node.group, node.exchange),
        selected_by=_producer(graph, node.weights_selected_by),
    )
    return _Draft(stage, operand, activations)


def _producer(graph: DiGraph, tensor: str) -> str | None:
    """The node of ``graph`` that produces ``tensor`` (None for "" or a kernel input)."""
    if not tensor:
        return None
    return next(
        (n.name for n in operators(graph) if any(t.name == tensor for t in n.outputs)), None
    )


def _work(
    stage: StageProgram,
    produced: dict[str, float],
    socket: SocketConfig,
    sram_bytes: float,
    resident_bytes: float,
) -> StageWork:
    """Estimated compute (PCU-seconds), buffers and streams of a stage.

    `produced` maps earlier stages to their output_bytes: each input edge brings the whole
    of its producer's output into this stage's PMUs, the edges sharing their bandwidth;
    `sram_bytes` is what its buffers hold at the kernel's tiles (`buffers.stream_buffers`),
    `resident_bytes` what it needs to stream its operand once (`buffers.rows_floor`).
    """
    arriving = [produced[name] for name in stage.inputs]
    offchip = sum(stage.reads.values()) + sum(stage.writes.values())
    return StageWork(
        compute=_compute(stage, socket),
        sram_bytes=sram_bytes,
        resident_bytes=resident_bytes,
        stream_in=len(arriving) * max(arriving, default=0.0),
        moved=sum(arriving) + offchip,
    )


def _compute(stage: StageProgram, socket: SocketConfig) -> float:
    """A stage's PCU-seconds per call: its GEMM at the efficiency its shape reaches on the
    systolic arrays, its element-wise work at the vector rate."""
    pcu = socket.pcu
    efficiency = pcu.max_gemm_efficiency
    if stage.gemm is not None:
        g = stage.gemm
        efficiency = stage_gemm_efficiency(
            g.m, g.n, g.k, pcu.systolic_rows, pcu.systolic_cols, pcu.max_gemm_efficiency
        )
    return stage.flops / (pcu.peak_flops * efficiency) + stage.vector_flops / pcu.vector_flops


def _bandwidth(socket: SocketConfig, tier: Tier) -> float:
    memory = socket.hbm if tier == "hbm" else socket.ddr
    return memory.bandwidth * memory.efficiency


def _stages(
    kernel: KernelGraph, fractions: dict[str, float], kv_tier: Tier, units: int = 1
) -> list[StageProgram]:
    """The kernel's stages in topological order, before any units are allocated (each
    ``units`` PCUs and PMUs)."""
    return [d.stage for d in _drafts(kernel, fractions, kv_tier, units)]


def _drafts(
    kernel: KernelGraph, fractions: dict[str, float], kv_tier: Tier, units: int = 1
) -> list[_Draft]:
    """The kernel's stage drafts in topological order (`_stage`)."""
    return [_stage(kernel, node, fractions, kv_tier, units) for node in operators(kernel.graph)]


def _memory_time(stages: Sequence[StageProgram], socket: SocketConfig) -> float:
    """The kernel's off-chip time per call: its busiest tier's bytes at that tier's rate."""
    return max(
        sum(s.reads.get(t, 0.0) + s.writes.get(t, 0.0) for s in stages) / _bandwidth(socket, t)
        for t in ("hbm", "ddr")
    )


def _kernel_program(
    kernel: KernelGraph,
    fractions: dict[str, float],
    kv_tier: Tier,
    socket: SocketConfig,
    engine: EngineConfig,
    rule: BufferRule,
    rows: int,
) -> KernelProgram:
    drafts = _drafts(kernel, fractions, kv_tier)
    chained = rows < engine.tiles_per_stage  # the tiles cut through rows: reductions hold them
    if chained:
        reducing = whole_row_stages([(d.stage.name, d.stage.op, d.stage.inputs) for d in drafts])
        drafts = [
            replace(d, stage=replace(d.stage, whole_row_outputs=rows))
            if d.stage.name in reducing
            else d
            for d in drafts
        ]
    usable_pcus, usable_pmus = socket.usable_pcus, socket.usable_pmus
    if len(drafts) > min(usable_pcus, usable_pmus):
        raise HardwareCapacityError.of(
            f"kernel {kernel.name!r} has {len(drafts)} stages, each needing a PCU and a PMU, "
            f"but the hardware's usable_fraction leaves {usable_pcus} PCUs and {usable_pmus} "
            "PMUs per socket; raise socket.pcu.count, socket.pmu.count or "
            "socket.usable_fraction",
            (
                *(("hw.socket.pcu.count",) if len(drafts) > usable_pcus else ()),
                *(("hw.socket.pmu.count",) if len(drafts) > usable_pmus else ()),
                "hw.socket.usable_fraction",
            ),
        )
    plan = plan_tiles(
        kernel.name,
        [d.stage for d in drafts],
        kernel.looped,
        pmus=usable_pmus,
        pmu_bytes=socket.pmu.sram,
        min_tiles=engine.tiles_per_stage,
        rule=rule,
    )
    finer = finer_plans(  # never cutting a row when the tiles do not already
        plan,
        kernel.looped,
        pmus=usable_pmus,
        pmu_bytes=socket.pmu.sram,
        most=plan.tiles if chained else rows,
        rule=rule,
    )
    chain_rows = rows if chained else None
    return choose_tiles(
        _placed(kernel, drafts, p, socket, chain_rows) for p in itertools.chain([plan], finer)
    ).program


@dataclass(frozen=True)
class TileChoice:
    """A kernel placed at one tile count, its estimated time per call (``kernel_time``) and
    that estimate without its GEMMs' operand re-reads, which no tile count beats."""

    program: KernelProgram
    time: float
    floor: float


def choose_tiles(choices: Iterable[TileChoice]) -> TileChoice:
    """The kernel's tiles: among the counts that fit (``buffers.plan_tiles``'s, then
    doubling: ``buffers.finer_plans``), the one whose placement is estimated fastest, ties
    to the fewest tiles (fewer events to simulate). Finer tiles shrink the stream buffers
    and leave a GEMM more SRAM for its block of input rows, so fewer passes over its
    weights; nothing else in the estimate depends on the tiles. Stops at the first count
    that re-reads nothing the estimate counts (its ``floor``)."""
    best: TileChoice | None = None
    for choice in choices:
        if best is None or choice.time < best.time:
            best = choice
        if best.time <= best.floor:
            break
    if best is None:
        raise ValueError("no tile count to choose from")
    return best


def kernel_time(stages: Sequence[StageProgram], socket: SocketConfig) -> float:
    """A placed kernel's estimated time per call: its pipeline at the pace of its slowest
    stage's compute on its PCUs, no faster than its off-chip bytes (re-reads included) at
    its busiest tier's rate (the stage time ``allocation`` balances to)."""
    compute = max((_compute(s, socket) / s.pcus for s in stages), default=0.0)
    return max(compute, _memory_time(stages, socket))


def row_graph(stages: Sequence[StageProgram]) -> RowGraph:
    """How one row crosses ``stages`` (topologically ordered): their producers, and which
    hold their consumers to the row's end (``whole_row_outputs``, `row_barriers`)."""
    index = {s.name: i for i, s in enumerate(stages)}
    return RowGraph(
        tuple(tuple(index[name] for name in s.inputs) for s in stages),
        tuple(s.whole_row_outputs > 0 for s in stages),
    )


def _placed(
    kernel: KernelGraph,
    drafts: Sequence[_Draft],
    plan: TilePlan,
    socket: SocketConfig,
    chain_rows: int | None,
) -> TileChoice:
    """The kernel at ``plan``'s tiles: its stages' PCUs and PMUs (``allocation``) and what
    each GEMM keeps resident in them, its operand re-read per pass (``buffers.residency``)."""
    sram = socket.pmu.sram
    stages = plan.stages  # with the spilled edges' HBM traffic
    # the topological order of `operators` puts every producer before its consumers
    produced = {s.name: s.output_bytes for s in stages}
    arriving = input_bytes(stages, kernel.looped)
    inputs = {d.stage.name: arriving[d.stage.name] + d.external_bytes for d in drafts}
    operand = {d.stage.name: sum(d.operand.values()) for d in drafts}
    work = [
        _work(s, produced, socket, b.total, rows_floor(s, b, operand[s.name], inputs[s.name]))
        for s, b in zip(stages, plan.stream, strict=True)
    ]
    allocation = allocate(
        work,
        pcus=socket.usable_pcus,
        pmus=socket.usable_pmus,
        pmu_bytes=sram,
        pmu_bandwidth=socket.pmu.bandwidth,
        memory_time=_memory_time(stages, socket),
        chain_rows=chain_rows,
        graph=None if chain_rows is None else row_graph(stages),
    )
    placed = []
    for draft, stage, stream, pcus, pmus in zip(
        drafts, stages, plan.stream, allocation.pcus, allocation.pmus, strict=True
    ):
        held = residency(
            stage,
            stream,
            operand[stage.name],
            inputs[stage.name],
            pmus * sram,
            socket.pcu.systolic_rows,
        )
        reads = dict(stage.reads)
        for tier, amount in draft.operand.items():
            _add(reads, tier, (held.passes - 1) * amount)
        placed.append(
            replace(
                stage,
                pcus=pcus,
                pmus=pmus,
                reads=reads,
                passes=held.passes,
                sram_bytes=held.sram_bytes,
            )
        )
    time = kernel_time(placed, socket)
    program = KernelProgram(
        name=kernel.name,
        calls=kernel.calls,
        looped=kernel.looped,
        stages=tuple(placed),
        layer=kernel.layer,
        tiles=plan.tiles,
        pace_s=time,
    )
    once = [replace(p, reads=s.reads) for p, s in zip(placed, stages, strict=True)]
    return TileChoice(program, time, kernel_time(once, socket))
