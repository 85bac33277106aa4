"""The bound a report names is the largest of the step's parts, and the parts account for
the step (``report.bound``): time that lies in no listed resource (a GPU host's kernel
launches, SN40L's layer loop, compute spread over fewer usable PCUs) would leave the step
unexplained and the wrong resource named; time that is not on the step's path (overlapped
host work the device hides) must not be named; time that is the host link's must not be
called the stack's."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from step_bounds import bound_of

from rdu_sim import api, human
from rdu_sim.cli.main import cli
from rdu_sim.engine.timing import StepTiming
from rdu_sim.report.bound import RESOURCES, StepBound
from rdu_sim.report.summary import summarize

SEVENTY_B = "llama3.1-70b-decode"
LLAMA_1S = "llama3.1-8b-1socket"
H100 = {"hardware": "dgx-h100"}


def _accounts(timing: StepTiming, bound: StepBound) -> None:
    """The property every step's bound keeps: the named resource's time alone is the
    largest, none exceeds the step, and together they reach the step (nothing
    unaccounted)."""
    times = bound.times()
    assert set(times) == set(RESOURCES)
    assert times[bound.bound] == max(times.values())
    assert bound.limit_s <= timing.step_s * (1 + 1e-9)
    assert bound.unaccounted_s == 0.0
    assert sum(times.values()) >= 0.99 * timing.step_s


def test_overlapped_host_time_the_device_hides_is_not_the_bound() -> None:
    """10 ms of overlapped host work beside a 16.7 ms device step adds nothing: the HBM
    binds, and the hidden time is said as hidden, not as the host's on the step's path."""
    timing, bound = bound_of(
        SEVENTY_B, {**H100, "stack.host.overlapped_per_step": "10ms"}, batch=32
    )
    assert timing.runtime_s == 0.0 and timing.host_overlapped_s < timing.device_s
    _accounts(timing, bound)
    assert bound.bound == "hbm"
    assert bound.host_hidden_s == timing.host_overlapped_s
    assert bound.host_s == timing.host_serial_s


def test_overlapped_host_time_longer_than_the_device_binds() -> None:
    """The same host work at 40 ms outlasts the device: the step is the host's, and it
    binds."""
    timing, bound = bound_of(
        SEVENTY_B, {**H100, "stack.host.overlapped_per_step": "40ms"}, batch=32
    )
    _accounts(timing, bound)
    assert bound.bound == "host" and bound.host_hidden_s == 0.0
    assert bound.host_s == pytest.approx(timing.step_s, rel=1e-12)


def test_a_run_does_not_blame_hidden_host_time() -> None:
    """The run's decode step says the same as step does."""
    overrides = {**H100, "stack.host.overlapped_per_step": "10ms", "serving.requests": 4}
    step = summarize(api.run(SEVENTY_B, overrides)).decode_step
    assert step is not None and step.bound != "host"
    assert step.host_hidden_s > 0 and step.host_s == 0.0


def test_gpu_kernel_launches_are_a_part_of_the_step() -> None:
    """Without CUDA graphs, a 50 us launch per call outlasts the kernels: the host's
    launches are the step."""
    overrides = {**H100, "cuda_graphs": False, "hw.gpu.kernel.launch": "50 us"}
    timing, bound = bound_of(SEVENTY_B, overrides, batch=32)
    _accounts(timing, bound)
    assert bound.bound == "launch"
    assert bound.launch_s == timing.busy_s["launch"]


def test_sn40l_layer_loop_is_a_part_of_the_step() -> None:
    """A 1 ms layer loop over the decoder's 32 looped layers is 31 ms of the step, more
    than its HBM reads."""
    timing, bound = bound_of(LLAMA_1S, {"hw.socket.kernel.layer_loop": "1 ms"}, batch=8)
    _accounts(timing, bound)
    assert bound.bound == "loop"
    assert bound.loop_s == pytest.approx(31e-3, rel=1e-12)


def test_a_short_layer_loop_hides_under_the_layers_reads() -> None:
    """Up to about a layer's HBM time less its other work, the loop hides under the stages'
    prefetched loads: a 5 us loop leaves the step exactly as it is without one (the
    parameter binds only when longer, as the 1 ms one above)."""
    none, _ = bound_of(LLAMA_1S, {"hw.socket.kernel.layer_loop": 0}, batch=8)
    short, bound = bound_of(LLAMA_1S, {"hw.socket.kernel.layer_loop": "5 us"}, batch=8)
    assert short.step_s == none.step_s
    assert bound.bound == "hbm" and bound.loop_s == pytest.approx(31 * 5e-6, rel=1e-12)


def test_compute_time_is_the_busiest_stage_s() -> None:
    """Half the usable PCUs, twice the compute time: a prefill at usable_fraction 0.45 is
    bound by compute for most of its step. The compute time is each kernel's busiest stage's
    PCU time (``StepTiming.critical_s``), at least the PCUs' busy time spread over every
    usable PCU (the stages share them, none idle less than the average)."""
    times = {}
    for fraction in (0.9, 0.45):
        overrides = {"hw.socket.usable_fraction": fraction}
        timing, bound = bound_of(LLAMA_1S, overrides, phase="prefill", tokens=4096)
        _accounts(timing, bound)
        assert bound.bound == "compute"
        assert bound.compute_s > 0.9 * timing.device_s
        socket = api.load(LLAMA_1S, overrides).hardware.socket  # type: ignore[union-attr]
        assert bound.compute_s == timing.critical_s["pcu"] <= timing.device_s
        assert bound.compute_s >= timing.busy_s["pcu"] * socket.pcu.count / socket.usable_pcus
        times[fraction] = bound.compute_s
    assert times[0.45] == pytest.approx(2 * times[0.9], rel=0.1)


def test_the_host_link_is_not_the_stacks_host_time() -> None:
    """Sampling on the host at 27.5 MB/s: 32 slots' logits (128,256 x 2 B each) take
    298 ms over the host link, which binds; the stack's own host time is the rest."""
    overrides = {"stack": "sambastudio-2024", "hw.system.host_link.bandwidth": "27.5 MB/s"}
    timing, bound = bound_of(SEVENTY_B, overrides, batch=32)
    _accounts(timing, bound)
    link = api.load(SEVENTY_B, overrides).hardware.system.host_link
    assert bound.bound == "host_link"
    assert bound.host_link_s == pytest.approx(link.latency + 32 * 128_256 * 2 / 27.5e6)
    assert bound.host_s == pytest.approx(timing.host_serial_s - bound.host_link_s, rel=1e-12)


@pytest.mark.parametrize(
    ("workload", "overrides", "shape"),
    [
        (LLAMA_1S, {}, {}),
        (LLAMA_1S, {}, {"phase": "prefill", "tokens": 4096}),
        (SEVENTY_B, {}, {}),
        (SEVENTY_B, H100, {}),
        (SEVENTY_B, H100, {"phase": "prefill", "tokens": 4096}),
    ],
)
def test_shipped_steps_are_accounted_for(
    workload: str, overrides: dict[str, object], shape: dict[str, object]
) -> None:
    """The shipped workloads' steps keep the property as they are."""
    _accounts(*bound_of(workload, overrides, **shape))


PART_CASES = [
    ("deepseek-r1-128k-snapstream", "decode", {}),
    (SEVENTY_B, "prefill", {}),
    (SEVENTY_B, "decode", H100),
    (SEVENTY_B, "prefill", H100),
    (SEVENTY_B, "decode", {**H100, "stack.host.overlapped_per_step": "30ms"}),
]


@pytest.mark.parametrize(("workload", "phase", "overrides"), PART_CASES)
def test_the_step_parts_add_up_to_the_step(workload: str, phase: str, overrides: dict) -> None:  # type: ignore[type-arg]
    """The trial's SnapStream decode step: hbm 37.86 + host 1.732 + boundaries 0.068 + loop
    0.0295 = 39.60 ms of 40.99, and unaccounted_s 0 (it compares against every resource
    together, which overlap). The parts are measured: the binding resource's time, the
    kernels' execution it did not take (idle), the boundaries and the host's time; they add
    up to the step, and none is negative."""
    report = api.step_report(workload, overrides, phase=phase)
    data = report.to_dict()
    parts, bound = data["parts"], data["bound"]
    assert sum(parts.values()) == pytest.approx(data["step_s"], rel=1e-12, abs=0)
    assert all(t > 0 for t in parts.values()), parts
    kernels = report.timing.kernels
    execution = sum(k.time_s - k.overhead_s for k in kernels)
    resource = bound["resource"]
    if resource in ("hbm", "link", "compute"):
        assert parts[resource] == bound[f"{resource}_s"]
        assert parts["idle"] == pytest.approx(execution - bound[f"{resource}_s"], rel=1e-12)
    else:  # a serial part binds: the kernels' execution stays whole
        assert parts["execution"] == pytest.approx(execution, rel=1e-12)
    assert parts.get("boundaries", 0.0) == pytest.approx(sum(k.overhead_s for k in kernels))
    assert parts.get("runtime", parts.get("host", 0.0)) == pytest.approx(data["runtime_s"])


def test_the_snapstream_step_names_its_idle_hbm() -> None:
    """The SnapStream decode step's 1.42 ms the HBM did not take is named, in the JSON and
    on the console's line, where the parts add up to the step."""
    parts = api.step_report("deepseek-r1-128k-snapstream").to_dict()["parts"]
    assert list(parts) == ["hbm", "idle", "runtime", "boundaries"]
    assert parts["idle"] == pytest.approx(1.42e-3, abs=0.01e-3)
    printed = CliRunner().invoke(cli, ["step", "deepseek-r1-128k-snapstream"]).output
    assert (
        "the step's parts: HBM bandwidth 37.9 ms + the binding resource idle while the kernels "
        "ran (pipeline fill and drain, kernels or stages waiting on other resources) 1.42 ms + "
        "the serving stack's host time on the step's path 1.73 ms + kernel boundaries (launch "
        "and sync) 68 us = 41.1 ms"
    ) in " ".join(printed.split())


PIPELINED = {"parallelism.tp": 2, "parallelism.pp": 4}


@pytest.mark.parametrize("micro_batches", [1, 4, 8])
@pytest.mark.parametrize("overrides", [{}, H100], ids=["sn40l", "h100"])
def test_a_pipelined_step_s_parts_are_measured_as_its_resources(
    overrides: dict[str, object], micro_batches: int
) -> None:
    """A pipelined step's resource times are its binding (slowest) stage's devices' over every
    micro-batch, so its execution is measured the same way: 8 micro-batches of batch 64 on
    SN40L took HBM 28.3 ms against one micro-batch through every stage (14.7 ms), an idle
    part of -13.7 ms. Every part is positive, they add up to the step, and the boundaries
    part is the boundaries resource's time."""
    shape = {**overrides, **PIPELINED, "parallelism.micro_batches": micro_batches}
    report = api.step_report("llama3.1-8b-8socket", shape, batch=64)
    data = report.to_dict()
    parts, bound = data["parts"], data["bound"]
    assert all(t > 0 for t in parts.values()), parts
    assert sum(parts.values()) == pytest.approx(data["step_s"], rel=1e-12, abs=0)
    resource = bound["resource"]
    assert parts[resource] == bound[f"{resource}_s"]
    assert parts["boundaries"] == pytest.approx(bound["boundaries_s"], rel=1e-12)
    stages = data["pipeline"]["stage_s"]
    binding = data["pipeline"]["binding_stage"]
    assert stages[binding] == max(stages)
    assert parts["pipeline"] == pytest.approx(
        data["device_s"] - micro_batches * stages[binding], rel=1e-9
    )


def test_the_host_link_part_is_the_link_s_own_time() -> None:
    """Sampling on the host over a 27.5 MB/s link binds: its part is the link's trip alone,
    and the stack's own host time is a part of its own (the two add up to the host's time
    on the step's path), on a pipeline as on one stage."""
    overrides = {"stack": "sambastudio-2024", "hw.system.host_link.bandwidth": "27.5 MB/s"}
    for shape in ({}, {**PIPELINED, "parallelism.micro_batches": 4}):
        report = api.step_report("llama3.1-8b-8socket", {**overrides, **shape}, batch=32)
        data = report.to_dict()
        parts, bound = data["parts"], data["bound"]
        assert bound["resource"] == "host_link"
        assert parts["host_link"] == bound["host_link_s"]
        assert parts["runtime"] == pytest.approx(bound["host_s"], rel=1e-12)
        assert parts["host_link"] + parts["runtime"] == pytest.approx(data["runtime_s"])
        assert sum(parts.values()) == pytest.approx(data["step_s"], rel=1e-12, abs=0)


def test_kernel_launches_binding_a_pipeline_are_a_part() -> None:
    """Without CUDA graphs at 50 us a launch, a pipelined H100 step of 8 micro-batches is
    bound by its launches: the device's wait for them is a part, named by the resource."""
    overrides = {**H100, **PIPELINED, "parallelism.micro_batches": 8}
    overrides |= {"cuda_graphs": False, "hw.gpu.kernel.launch": "50 us"}
    data = api.step_report("llama3.1-8b-8socket", overrides, batch=64).to_dict()
    parts = data["parts"]
    assert data["bound"]["resource"] == "launch"
    assert parts["launch"] > 0 and "execution" in parts
    assert all(t > 0 for t in parts.values()), parts
    assert sum(parts.values()) == pytest.approx(data["step_s"], rel=1e-12, abs=0)


def test_unaccounted_time_lies_inside_the_parts_that_add_up_to_the_step() -> None:
    """A small GPU decode step holds time no resource explains (871 us of 12.7 ms), and its
    parts add up to the step: the report places that time inside one of them (the binding
    resource idle), in its words and its JSON alike, never beside them."""
    args = ["step", SEVENTY_B, "--set", "hardware=dgx-h100", "--batch", "1", "--context", "1024"]
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    bound, parts = data["bound"], data["parts"]
    assert bound["unaccounted_s"] > 0
    assert sum(parts.values()) == pytest.approx(data["step_s"], rel=1e-9)
    within = bound["unaccounted_in"]
    assert within == "idle"
    assert bound["unaccounted_s"] <= parts[within]
    printed = " ".join(CliRunner().invoke(cli, args).output.split())
    rest = human.duration(bound["unaccounted_s"])
    idle = human.duration(parts["idle"])
    assert f"{rest} of the step is none of these resources' (unaccounted, within the " in printed
    assert f"within the binding resource idle {idle} of the step's parts)" in printed
    assert "the binding resource idle while the kernels ran" in printed
