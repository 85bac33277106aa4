"""One simulated step as a report reads it: the JSON of ``rdu-sim step --json``, built here
once for the command and for ``rdu_sim.api.step_report`` alike.

:func:`step_report` takes a step's cost (``api.step``: the engine's ``StepTiming`` in
``detail``) and the backend that timed it, and finds the compiled program of that step
again (the compiler memoizes it: nothing is simulated twice). :meth:`StepReport.to_dict`
is ``StepTiming.to_dict()`` plus what the step's program and workload say of it:
``memory`` (the plan it ran on), ``model_flops`` and ``model_flops_fraction``
(``compiler.step_work``), ``experts`` (a MoE step's routed experts), ``prompt`` (which
prompt a default prefill step times), ``batch_note`` (why a default decode step runs fewer
sequences than the batch slots), ``bound`` (``report.bound``), ``layout``,
``batch_of``, ``kv_layout``, the workload, model, hardware and stack names, ``predicted``
(``config.origins.predicted_words``: hardware predicted, not measured; else None), and
``provenance``. Every key is described in ``rdu_sim/cli/step_cmd.py``'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from rdu_sim.compiler.program import Placement, Program
from rdu_sim.compiler.stages import scenario_stages
from rdu_sim.compiler.step_work import (
    ExpertStreams,
    expert_streams,
    model_flops,
    model_flops_fraction,
)
from rdu_sim.config.origins import predicted_words
from rdu_sim.engine.timing import StepTiming
from rdu_sim.provenance import of_scenario
from rdu_sim.report.bound import step_bound, step_parts, unaccounted_part
from rdu_sim.scenario import Scenario
from rdu_sim.serving.backend import EngineBackend, step_batch, step_batch_note
from rdu_sim.serving.step_cache import StepCost
from rdu_sim.serving.step_shape import (
    default_step_shape,
    long_prompts,
    served_prefill_steps,
    typical_prefill,
)

__all__ = ["StepReport", "memory_plan", "prompt_words", "step_report"]


@dataclass(frozen=True)
class StepReport:
    """A simulated step (``cost``, its ``timing``), the compiled ``program`` it ran and, for
    a default prefill step, which prompt it times (``prompt``, :func:`prompt_words`); for a
    default decode step of fewer sequences than the batch slots, why (``batch_note``: its
    paged pool holds no more, ``serving.backend.step_batch_note``)."""

    scenario: Scenario
    cost: StepCost
    timing: StepTiming
    program: Program
    prompt: str | None = None
    batch_note: str | None = None

    @property
    def experts(self) -> ExpertStreams | None:
        """What each MoE layer streams (``compiler.step_work.expert_streams``)."""
        return expert_streams(self.scenario, self.program)

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``rdu-sim step --json`` (without ``trace``, the file the command
        wrote): a new dict each call."""
        scenario, timing, program = self.scenario, self.timing, self.program
        data = timing.to_dict()
        data["memory"] = memory_plan(program.placement)
        pipeline = data.get("pipeline")
        binding = 0 if pipeline is None else int(pipeline["binding_stage"])
        own = model_flops(scenario, program, binding)
        if pipeline is not None:
            pipeline["stage_layers"] = [stage.layers for stage in scenario_stages(scenario)]
        data["model_flops"] = own
        data["model_flops_fraction"] = model_flops_fraction(
            own, program.tp, timing.flops, timing.flops_fraction
        )
        experts = self.experts
        if experts is not None:
            data["experts"] = experts.to_dict()
        if self.prompt is not None:
            data["prompt"] = self.prompt
        if self.batch_note is not None:
            data["batch_note"] = self.batch_note
        bound = step_bound(timing, scenario.hardware)
        parts = step_parts(timing, bound)
        layout = scenario.workload.parallelism.layout()
        data.update(
            workload=scenario.workload.name,
            model=scenario.model.name,
            hardware=scenario.hardware.name,
            stack=scenario.stack.name,
            predicted=predicted_words(scenario.hardware_file),
            bound={
                "resource": bound.bound,
                **{f"{k}_s": v for k, v in bound.times().items()},
                "host_hidden_s": bound.host_hidden_s,
                "unaccounted_s": bound.unaccounted_s,
                "unaccounted_in": unaccounted_part(parts, bound.unaccounted_s),
                "link": bound.link or None,
                "link_term": bound.link_term or None,
            },
            parts=parts,
            layout=layout,
            batch_of="attention_rank" if layout["dp_attention"] > 1 else "replica",
            kv_layout=scenario.kv_policy.layout(),
            provenance=of_scenario(scenario),
        )
        return data


def step_report(
    scenario: Scenario,
    cost: StepCost,
    backend: EngineBackend,
    phase: str = "decode",
    *,
    batch: int | None = None,
    tokens: int | None = None,
    context: int | None = None,
) -> StepReport:
    """The report of the step ``backend`` timed as ``cost`` with these options (those
    ``api.step`` was given): its program found again from the backend's compiler."""
    if cost.detail is None:
        raise ValueError("a step report needs the engine's timing (StepCost.detail)")
    slots = partial(step_batch, scenario, backend, context)
    shape = default_step_shape(scenario, slots, phase, batch=batch, tokens=tokens, context=context)
    program = backend.compiler(scenario).program(shape)
    default_prefill = phase == "prefill" and tokens is None and context is None
    prompt = prompt_words(scenario) if default_prefill else None
    default_decode = phase == "decode" and batch is None
    note = step_batch_note(scenario, backend, context) if default_decode else None
    return StepReport(scenario, cost, cost.detail, program, prompt, note)


def memory_plan(placement: Placement) -> dict[str, Any]:
    """The memory plan the step ran on (``Program.placement``, with pipeline stages the
    first stage's): its slots, and where its weights live."""
    tiers = placement.tiers
    return {
        "plan_slots": placement.batch_slots,
        "weights_hbm_bytes": tiers["hbm"].weights_bytes if "hbm" in tiers else 0,
        "weights_ddr_bytes": tiers["ddr"].weights_bytes if "ddr" in tiers else 0,
    }


def prompt_words(scenario: Scenario) -> str:
    """Which prompt a default prefill step times, and why: the workload's typical prompt as
    a server runs it (``serving.step_shape.typical_prefill``, the one run's ``prefill_s``
    and compare's prefill row time); a compressing policy's longer prompts, with the
    ``--tokens`` that times their median."""
    typical = typical_prefill(scenario)
    chunks = len(typical.steps)
    timed = (
        "the prompt run's prefill_s and compare's prefill row time"
        if chunks == 1
        else (
            f"this step times that chunk only; run's prefill_s and compare's prefill row sum "
            f"all {chunks}"
        )
    )
    words = f"prompt: {typical.words()}; {timed}"
    long = long_prompts(scenario)
    if long is not None:
        # the shape compare's long-prompt row times (its bucket, or chunks): an explicit
        # --tokens runs unpadded, so the hint names the bucket
        steps = served_prefill_steps(scenario, long.median)
        last = steps[-1]
        how = (
            f"--tokens {last.tokens} times one at its bucket, with the SnapKV selection, as "
            "compare's long-prompt row"
            if len(steps) == 1
            else f"--tokens {last.tokens} --context {last.cache_len} times the last of its "
            f"{len(steps)} chunks, with the SnapKV selection; compare's long-prompt row sums all"
        )
        words += f"; the {scenario.kv_policy.name} policy compresses only {long.words()} ({how})"
    return words
