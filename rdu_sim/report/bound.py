"""What binds a step: each resource's time on its own, and the largest.

The one reading of a step's binding resource, for every report that names one: a step's
``bound`` (``rdu-sim step``), a run's ``decode_step.bound``, ``rdu-sim compare``'s
per-variant line and its verdict, and the plan's why (``rdu_sim.report.slo_why``). A resource's
time is what the step asks of it alone, on the step's path: ``hbm`` and ``ddr`` the tier's
bytes at its bandwidth x efficiency; ``compute`` the time the compute units were busy (a
GPU's SMs; on SN40L the critical stage's PCUs: each kernel's busiest stage's PCU busy time,
matrix and vector work at the efficiencies the engine simulated, summed over the step's
kernels, ``RunStats.pcu_stage_s``: a kernel's stages run as a pipeline, so its slowest stage
is what it waits for, and a stage given too few PCUs binds though the PCUs on average are
idle); ``pmu`` SN40L's PMU SRAM bandwidth the same way (each kernel's busiest stage's PMU
ports' busy time, ``RunStats.pmu_stage_s``, ``hw.socket.pmu.bandwidth``); ``link`` the
socket-to-socket links (collectives): each kernel's busiest link direction's time with a
transfer under way, from its first byte leaving to its arrival, so serialisation and the
latency the engine simulated for every hop and step (``P2PLink.flight_time``), summed over
the step's kernels (``RunStats.link_flight_s``), named by the link class whose own time (each
kernel's busiest direction of that class, summed) is largest (``StepBound.link``: the
hardware's ``system.intra_node_link``, ``inter_node_link`` or ``inter_rack_link``;
:func:`resource_words` and :func:`remedy_words` name it), and by the part of that class's
time that is larger, its latency or its serialisation (``StepBound.link_term``). Kernels
whose busiest direction is of different classes (an all-reduce within a node, an all-to-all
across nodes) make ``link_s`` more than the named class's time: the class named is the
largest part of the links' time, not always all of it;
``blocks`` the time a GPU's decode attention streamed its KV cache through its thread blocks
(few blocks over long contexts stream slower than the HBM);
``boundaries`` the device time at the kernels' boundaries, launching and synchronising them
(each call's; what kernel looping and CUDA graphs save);
``launch`` a GPU host's CPU time launching the step's kernels (one launch a call, or one CUDA
graph): the device waits for it where kernels are shorter than their launches;
``loop`` SN40L's looped kernels' outer loop, ``hw.socket.kernel.layer_loop`` before each
layer iteration but the first (hidden while the stages' prefetched loads keep the memory
busy: it binds only when longer than a layer's memory time);
``host_link`` the trip over the host link of what the stack samples from on the host (the
logits), on the critical path;
``host`` the serving stack's own host time on the step's path: its serial time, and its
overlapped time only when that outlasts the device's step (then the host alone is the step);
overlapped time the device's step hides is ``host_hidden_s``, named but never binding.

The resources overlap, so their times need not add up to the step; but a step longer than
all of them together holds time none of them explains: ``unaccounted_s`` says how much (a
pipelined step's rest is its bubble, ``StepBound.bubble``, so it has none). It is kernel
execution no resource was busy for, so it lies inside one of the step's parts below (the
binding resource's ``idle``: :func:`unaccounted_part`), never beside them.

So the step report also gives the step as parts that add up to it (:func:`step_parts`,
``rdu-sim step``'s ``parts``), each measured: the binding resource's time, ``idle`` the
kernels' execution time it did not take, and what is serial beside it (the kernels'
boundaries, the host's time on the step's path and the logits' trip over the host link, a
GPU's wait for its launches, a pipeline's other stages).

A pipelined step's resource times are its binding stage's devices' over every micro-batch
(the slowest stage, which paces the pipeline: ``engine.pipeline.binding_stage``; so are its
parts' execution and boundaries); the rest of its step is that stage idle while the pipeline
fills before it and drains after it. The stages' idle share, the bubble, is that fill and
drain and the lighter stages' waits for the binding one (``engine.pipeline.bubble_shares``),
which ``StepBound.bubble`` carries for every report that names the bound
(:func:`bubble_words`, with the caveat that one batch is in flight: :data:`BUBBLE_CAVEAT`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from rdu_sim import human
from rdu_sim.config.hardware import HardwareConfig
from rdu_sim.config.hardware_file import Hardware
from rdu_sim.engine.pipeline import stage_kernels
from rdu_sim.engine.timing import StepTiming

RESOURCES: dict[str, str] = {
    "compute": "compute (PCUs or SMs)",
    "pmu": "PMU SRAM bandwidth",
    "hbm": "HBM bandwidth",
    "ddr": "DDR bandwidth",
    "link": "the socket-to-socket links",
    "blocks": "decode attention's thread blocks",
    "boundaries": "kernel boundaries (launch and sync)",
    "launch": "the host's kernel launches",
    "loop": "the looped kernels' layer loop",
    "host_link": "the logits' trip over the host link",
    "host": "the serving stack's host time",
}
"""Each resource in words, for sentences ("bound by HBM bandwidth"); the order ties break in."""

LABELS: dict[str, str] = {
    "compute": "compute",
    "pmu": "PMU",
    "hbm": "HBM",
    "ddr": "DDR",
    "link": "link",
    "blocks": "thread-block",
    "boundaries": "kernel-boundary",
    "launch": "launch",
    "loop": "layer-loop",
    "host_link": "host-link",
    "host": "host",
}
"""Each resource in a word or two, for a plot's label ("HBM-bound"): the same keys as
:data:`RESOURCES`."""

REMEDIES: dict[str, str] = {
    "compute": "more compute (PCUs or SMs)",
    "pmu": "more PMU SRAM bandwidth (hw.socket.pmu.bandwidth)",
    "hbm": "more HBM bandwidth",
    "ddr": "more DDR bandwidth",
    "link": "faster socket-to-socket links",
    "blocks": "decode attention split over more thread blocks",
    "boundaries": "fewer kernel boundaries (kernel looping, fused kernels)",
    "launch": "fewer kernel launches (CUDA graphs, fused kernels)",
    "loop": "a cheaper layer loop",
    "host_link": "a faster host link (or sampling on the device)",
    "host": "less host time a step (a faster serving stack)",
}
"""What would speed a step each resource binds, in words ("a faster prefill (more HBM
bandwidth)"): the same keys as :data:`RESOURCES`."""


LINK_WORDS: dict[str, str] = {
    "intra_node_link": "intra_node_link, the links within a node",
    "inter_node_link": "inter_node_link, the links between nodes",
    "inter_rack_link": "inter_rack_link, the links between racks",
}
"""Each link class in words, by the hardware's ``system.*`` field (``engine.links``), for a
step the links bind: which link it is and the field that sets it."""


def resource_words(resource: str, link: str = "", term: str = "") -> str:
    """``resource`` in words (:data:`RESOURCES`); the links by the class ``link`` names
    (:data:`LINK_WORDS`) when it is one, and by its latency when ``term`` says the latency is
    the larger part of its time (``StepBound.link_term``)."""
    if resource == "link" and link in LINK_WORDS:
        return f"the latency of {LINK_WORDS[link]}" if term == "latency" else LINK_WORDS[link]
    return RESOURCES[resource]


def remedy_words(resource: str, link: str = "", term: str = "") -> str:
    """What would speed a step ``resource`` binds (:data:`REMEDIES`); for the links, a faster
    link of the class ``link`` names, by its field (the largest part of the links' time, not
    always all of it: module docstring), or a lower latency of it, by its latency field, when
    ``term`` says the latency is the larger part of its time."""
    if resource == "link" and link in LINK_WORDS:
        if term == "latency":
            return f"a lower hw.system.{link}.latency"
        return f"a faster hw.system.{link}"
    return REMEDIES.get(resource, "a faster step")


def busiest_link(link_s: Mapping[str, float]) -> str:
    """The link class (``system.*`` field) whose time (``link_s``, by field) is longest, ties
    to the first in :data:`LINK_WORDS`' order; "" when no link was busy."""
    busy = {name: link_s.get(name, 0.0) for name in LINK_WORDS}
    name = max(busy, key=lambda k: busy[k])
    return name if busy[name] > 0 else ""


def link_term(link: str, flight_s: Mapping[str, float], busy_s: Mapping[str, float]) -> str:
    """Which part of link class ``link``'s time is larger: ``latency`` when its time under
    way less its serialisation (``flight_s`` less ``busy_s``, by field: what its transfers
    spent on the wire after their last byte left) exceeds its serialisation, else
    ``bandwidth``; "" without a link."""
    if not link:
        return ""
    serial = busy_s.get(link, 0.0)
    return "latency" if flight_s.get(link, 0.0) - serial > serial else "bandwidth"


BINDS_SHARE = 0.5
"""The least share of its step the largest resource's time takes for the reports to say it
binds the step ("bound by HBM bandwidth"); below it the step is mostly other parts, which
add up (a GPU's HBM 9.96 ms, host 9.05 ms and kernel boundaries 5.29 ms of 25.8 ms), and the
words name the largest part instead (:func:`bound_label`)."""


def bound_label(limit_s: float, step_s: float) -> str:
    """``bound by`` when the largest resource takes at least :data:`BINDS_SHARE` of the
    step, else ``largest part``: the one rule every report's bound words follow."""
    return "bound by" if step_s <= 0 or limit_s >= BINDS_SHARE * step_s else "largest part"


def others_alone(
    times: Mapping[str, float], bound: str, notes: Mapping[str, str] | None = None
) -> str:
    """The other resources' times alone, in words (``hbm 10 ms, host 1.73 ms``, the order of
    :data:`RESOURCES`; ``nothing else`` when none takes time): what the binding resource's
    share of a step leaves to name; a resource in ``notes`` has its note after its time
    (``compute 731 us (PCU busy 658 us ...)``, :func:`compute_note`)."""
    notes = notes or {}
    others = [
        f"{name} {human.duration(times[name])}" + (f" ({notes[name]})" if name in notes else "")
        for name in RESOURCES
        if name != bound and times.get(name, 0.0) > 0
    ]
    return ", ".join(others) or "nothing else"


def link_note(flight_s: float, wire_s: float) -> str | None:
    """How a step's ``link`` time (each kernel's busiest link direction with a transfer in
    flight, each hop's latency included: :func:`step_bound`) differs from the busy table's
    ``link`` (``busy_s.link``: that direction's serialisation alone, its bytes on the wire):
    ``in flight, latency included; on the wire 20.8 ms``. None when no link was busy or the
    two are one figure."""
    if flight_s <= 0 or human.duration(flight_s) == human.duration(wire_s):
        return None
    return f"in flight, latency included; on the wire {human.duration(wire_s)}"


def compute_note(pcu_busy_s: float, hardware: Hardware) -> str | None:
    """How an SN40L step's ``compute`` time differs from its PCUs' busy time (``busy_s.pcu``,
    PCU-seconds over all the socket's PCUs, which the step's busy table shows): it is each
    kernel's busiest stage's (:func:`step_bound`), so it reads longer: ``the busiest stage's
    PCUs; all 1,040 PCUs busy 658 us on average``. None on a GPU, whose compute time is its
    SMs' busy time."""
    if not isinstance(hardware, HardwareConfig):
        return None
    return (
        f"the busiest stage's PCUs; all {hardware.socket.pcu.count:,} PCUs busy "
        f"{human.duration(pcu_busy_s)} on average"
    )


class ResourceTimes(Protocol):
    """What holds a step's time on each resource (seconds of one socket)."""

    @property
    def compute_s(self) -> float: ...
    @property
    def pmu_s(self) -> float: ...
    @property
    def hbm_s(self) -> float: ...
    @property
    def ddr_s(self) -> float: ...
    @property
    def link_s(self) -> float: ...
    @property
    def blocks_s(self) -> float: ...
    @property
    def boundaries_s(self) -> float: ...
    @property
    def launch_s(self) -> float: ...
    @property
    def loop_s(self) -> float: ...
    @property
    def host_link_s(self) -> float: ...
    @property
    def host_s(self) -> float: ...


def resource_times(step: ResourceTimes) -> dict[str, float]:
    """Each resource's time, by name, in the order of RESOURCES (the ties' order)."""
    return {
        "compute": step.compute_s,
        "pmu": step.pmu_s,
        "hbm": step.hbm_s,
        "ddr": step.ddr_s,
        "link": step.link_s,
        "blocks": step.blocks_s,
        "boundaries": step.boundaries_s,
        "launch": step.launch_s,
        "loop": step.loop_s,
        "host_link": step.host_link_s,
        "host": step.host_s,
    }


@dataclass(frozen=True)
class StepBound:
    """One step against its resources (seconds of one socket)."""

    step_s: float
    compute_s: float
    hbm_s: float
    ddr_s: float
    link_s: float
    blocks_s: float
    boundaries_s: float
    host_s: float
    bound: str  # the resource with the largest time (a key of RESOURCES)
    hbm_bytes: float
    ddr_bytes: float
    flops: float
    runtime_s: float  # what the host added to the device's step (serial + exposed)
    # a pipelined step's bubble (``StepTiming.pipeline``): its stages' idle share; None
    # without a pipeline
    bubble: float | None = None
    # a decode pipeline's estimate at fewer micro-batches when faster (its
    # ``pipeline.fewer_micro_batches``: micro_batches, device_s, now_s); None otherwise
    fewer_micro_batches: Mapping[str, float] | None = None
    launch_s: float = 0.0
    loop_s: float = 0.0
    host_link_s: float = 0.0
    # the stack's overlapped host time the device's step hides (not on the step's path)
    host_hidden_s: float = 0.0
    # the step's time beyond all the resources' times together (module docstring)
    unaccounted_s: float = 0.0
    # the link class whose busiest direction took longest (a system.* field; "" when no
    # link was busy): the largest part of ``link_s``, all of it when one class carried the
    # step's busiest direction in every kernel (module docstring)
    link: str = ""
    # SN40L's PMU SRAM bandwidth time (module docstring)
    pmu_s: float = 0.0
    # which part of the named link class's time is larger: "latency" or "bandwidth"
    # (:func:`link_term`; "" when no link was busy)
    link_term: str = ""

    @property
    def limit_s(self) -> float:
        """The binding resource's time."""
        return self.times()[self.bound]

    def times(self) -> dict[str, float]:
        """Each resource's time, by name (the order of RESOURCES)."""
        return resource_times(self)

    @property
    def resource(self) -> str:
        """The binding resource in words (the links by their class)."""
        return resource_words(self.bound, self.link, self.link_term)


def step_bound(timing: StepTiming, hardware: Hardware) -> StepBound:
    """The step's time on each resource of ``hardware`` and the one that binds."""
    socket = hardware.socket if isinstance(hardware, HardwareConfig) else None
    hbm_bytes = timing.bytes_by_tier.get("hbm", 0.0)
    ddr_bytes = timing.bytes_by_tier.get("ddr", 0.0)
    busy = timing.busy_s
    critical = timing.critical_s
    if socket is None:
        compute, ddr_s, loop = busy.get("sm", 0.0), 0.0, 0.0
    else:
        ddr = socket.ddr
        compute = critical.get("pcu", 0.0)
        ddr_s = ddr_bytes / (ddr.bandwidth * ddr.efficiency)
        loop = socket.kernel.layer_loop * sum(k.calls - 1 for k in timing.kernels if k.looped)
    overlapped = timing.host_overlapped_s
    hidden = overlapped if overlapped <= timing.device_s else 0.0
    times = {
        "compute": compute,
        "pmu": critical.get("pmu", 0.0),
        "hbm": hbm_bytes / (hardware.hbm.bandwidth * hardware.hbm.efficiency),
        "ddr": ddr_s,
        "link": critical.get("link", 0.0),
        "blocks": busy.get("blocks", 0.0),
        "boundaries": busy.get("boundaries", 0.0),
        "launch": busy.get("launch", 0.0),
        "loop": loop,
        "host_link": timing.host_transfer_s,
        "host": timing.host_serial_s - timing.host_transfer_s + (overlapped - hidden),
    }
    bubble = None if timing.pipeline is None else float(timing.pipeline["bubble"])
    link = busiest_link(timing.link_flight_s)
    return StepBound(
        step_s=timing.step_s,
        compute_s=times["compute"],
        hbm_s=times["hbm"],
        ddr_s=times["ddr"],
        link_s=times["link"],
        blocks_s=times["blocks"],
        boundaries_s=times["boundaries"],
        host_s=times["host"],
        bound=max(times, key=lambda k: times[k]),
        hbm_bytes=hbm_bytes,
        ddr_bytes=ddr_bytes,
        flops=timing.flops,
        runtime_s=timing.runtime_s,
        bubble=bubble,
        fewer_micro_batches=None
        if timing.pipeline is None
        else timing.pipeline.get("fewer_micro_batches"),
        launch_s=times["launch"],
        loop_s=times["loop"],
        host_link_s=times["host_link"],
        host_hidden_s=hidden,
        unaccounted_s=0.0 if bubble is not None else unaccounted(timing.step_s, times),
        link=link,
        pmu_s=times["pmu"],
        link_term=link_term(link, timing.link_flight_s, timing.link_busy_s),
    )


UNACCOUNTED_SHARE = 0.01
"""The least share of a step :func:`unaccounted` names: below it, time none of the resources
explains is their overlaps' rounding and the kernels' fill, not a missing resource."""


def unaccounted(step_s: float, times: Mapping[str, float]) -> float:
    """The step's time beyond all of ``times`` together (0 when within
    :data:`UNACCOUNTED_SHARE` of the step): what no listed resource explains."""
    rest = step_s - sum(times.values())
    return rest if rest > UNACCOUNTED_SHARE * step_s else 0.0


BUBBLE_CAVEAT = "only one batch in flight: docs/parallelism.md, Left out"
"""What every report that lays time on a pipeline's bubble adds once (:func:`bubble_words`):
the pipeline runs one batch's micro-batches at a time, so a pipeline always loses to the
bubble here, which a runtime's virtual engines would fill."""


def bubble_words(bubble: float, caveat: bool = True) -> str:
    """A pipeline's bubble in words, for the reports that name a step's bound beside it
    (``the pipeline's bubble 33.8% of its stages' time``), with :data:`BUBBLE_CAVEAT` in
    brackets unless ``caveat`` is false (a sentence naming several bubbles says it once)."""
    words = f"the pipeline's bubble {human.percent(bubble)} of its stages' time"
    return f"{words} ({BUBBLE_CAVEAT})" if caveat else words


def micro_batch_words(fewer: Mapping[str, float]) -> str:
    """A decode pipeline's fewer micro-batches in words, from its step's
    ``pipeline.fewer_micro_batches`` (``engine.pipeline.fewer_micro_batches``): that every
    micro-batch re-reads its stage's weights, so fewer of them would take less device time,
    by how much, and that it is this step's estimate."""
    parts = int(fewer["micro_batches"])
    return (
        f"parallelism.micro_batches: {parts} would take about "
        f"{human.duration(fewer['device_s'])} of device time against "
        f"{human.duration(fewer['now_s'])} (fewer re-reads of each stage's weights outweigh "
        "a longer fill and drain; this step's estimate: a stage's weight reads once a "
        "micro-batch, the rest scaling with its sequences)"
    )


PART_WORDS: dict[str, str] = {
    "idle": "the binding resource idle while the kernels ran (pipeline fill and drain, "
    "kernels or stages waiting on other resources)",
    "execution": "the kernels' execution",
    "boundaries": "kernel boundaries (launch and sync)",
    "launch": "the device waiting for the host's kernel launches",
    "pipeline": "the binding stage idle while the pipeline fills and drains (the other "
    "stages' micro-batch and the hand-offs)",
    "runtime": "the serving stack's host time on the step's path",
    "host_link": RESOURCES["host_link"],
}
"""Each part of :func:`step_parts` in words (the binding resource's own: :data:`RESOURCES`)."""

SERIAL_BOUNDS = {
    "boundaries": "boundaries",
    "launch": "launch",
    "host": "runtime",
    "host_link": "host_link",
}
"""A bound that is a serial part of the step itself, by the part it is."""


def step_parts(timing: StepTiming, bound: StepBound) -> dict[str, float]:
    """The step's time as parts that add up to ``step_s``, each measured by the engine: the
    logits' trip over the host link (``host_link``) and the rest of the host time the serving
    stack adds (``runtime``), a pipeline's fill and drain (``pipeline``: its device time
    beyond its binding stage's over every micro-batch, that stage idle while the other
    stages run the first and last micro-batches and the hand-offs cross), the device's time
    before and between its kernels beyond their own (``launch`` on a GPU, the host's
    launches it waited for), the kernels' boundaries (launch and sync) and their execution;
    the execution split into the binding resource's time and the rest of it, ``idle`` (the
    kernels' execution time the binding resource did not take: pipeline fill and drain
    inside each kernel, waits on other resources). A bound that is itself a serial part (the
    boundaries, the launches, the host, the host link) is that part, named by the resource,
    and the execution stays whole. A pipelined step's kernels are measured as its resource
    times are (module docstring): its binding stage's kernels over every micro-batch (the
    lighter stages' waits for it, the bubble's imbalance, are not on its timeline:
    ``pipeline.imbalance`` says them). Parts of zero are left out."""
    pipeline = timing.pipeline
    if pipeline is None:
        kernels, times, stage_s = timing.kernels, 1, timing.device_s
    else:
        times = int(pipeline["micro_batches"])
        binding = int(pipeline["binding_stage"])
        kernels = stage_kernels(timing, binding)
        stage_s = float(pipeline["stage_s"][binding])
    ran = sum(k.time_s for k in kernels) * times
    overheads = sum(k.overhead_s for k in kernels) * times
    device = stage_s * times
    parts = {
        "runtime": timing.runtime_s - timing.host_transfer_s,
        "host_link": timing.host_transfer_s,
        "pipeline": timing.device_s - device,
        "launch": device - ran,
        "boundaries": overheads,
        "execution": ran - overheads,
    }
    whole = SERIAL_BOUNDS.get(bound.bound)
    if whole is not None:
        parts = {bound.bound if name == whole else name: t for name, t in parts.items()}
    else:
        execution = parts.pop("execution")
        parts = {bound.bound: bound.limit_s, "idle": execution - bound.limit_s, **parts}
    return {name: t for name, t in parts.items() if abs(t) > NOISE_S}


NOISE_S = 1e-15
"""A part shorter than this (a femtosecond) is the subtraction's rounding, not time."""

UNACCOUNTED_PARTS: dict[str, str] = {
    "idle": "the binding resource idle",
    "execution": "the kernels' execution",
}
"""The parts of :func:`step_parts` the unaccounted time can lie in, each in a few words
(:func:`unaccounted_words`), in the order they are tried."""


def unaccounted_part(parts: Mapping[str, float], unaccounted_s: float) -> str | None:
    """The part of :func:`step_parts` (``parts``) the step's unaccounted time lies in: the
    kernels' execution no resource was busy for, so ``idle`` (the execution the binding
    resource did not take) or, when the bound is a serial part, the whole ``execution``;
    None when nothing is unaccounted, or when it is longer than that part (then it is spread
    over the parts beside the binding resource's). The one rule the step report's words and
    its JSON (``bound.unaccounted_in``) follow, so the unaccounted time is never said to lie
    beside parts that already add up to the step."""
    if unaccounted_s <= 0:
        return None
    return next((name for name in UNACCOUNTED_PARTS if parts.get(name, 0.0) >= unaccounted_s), None)


def unaccounted_words(unaccounted_s: float, within: str | None, parts: Mapping[str, float]) -> str:
    """The unaccounted time in words, as the part that holds it (``within``:
    :func:`unaccounted_part`) places it among the step's parts: ``871 us of the step is none
    of these resources' (unaccounted, within the binding resource idle 1.37 ms of the
    step's parts)``; '' when there is none."""
    if unaccounted_s <= 0:
        return ""
    if within is None:
        where = "spread over the step's parts beside the binding resource's own"
    else:
        part = f"{UNACCOUNTED_PARTS[within]} {human.duration(parts[within])}"
        where = f"within {part} of the step's parts"
    rest = human.duration(unaccounted_s)
    return f"{rest} of the step is none of these resources' (unaccounted, {where})"


def parts_words(parts: Mapping[str, float], link: str = "", term: str = "") -> str:
    """:func:`step_parts` as a sum: ``HBM bandwidth 37.9 ms + the binding resource idle
    ... 1.39 ms + ... = 41 ms``; a binding link named by its class (``link``, ``term``:
    :func:`resource_words`), as the bound's line names it."""
    said = " + ".join(
        f"{PART_WORDS.get(name) or resource_words(name, link, term)} {human.duration(t)}"
        for name, t in parts.items()
    )
    return f"{said} = {human.duration(sum(parts.values()))}"
