"""Two-batch overlap's schedule: two micro-batches' kernel calls in SGLang's fixed order.

SGLang cuts a MoE layer's operations into stages at yield points and runs micro-batch A
``delta`` stages ahead, then A's and B's stages alternately (``operations_strategy.py``'s
``_compute_moe_deepseek_blog_prefill`` and ``_compute_moe_deepseek_blog_decode``, and
``operations.py``'s ``execute_overlapped_operations``, in sgl-project/sglang
``python/sglang/srt/batch_overlap/``). Here, on a micro-batch's chain of kernel calls:

- prefill (``delta`` 0): a cut after each dispatch and after each combine: ``[attention,
  gate, dispatch] [experts, combine] [output, the next layer's attention, ...]``;
- decode (``delta`` 2): cuts before the attention core (after the projections), before the
  shared experts and the dispatch, after the dispatch, after the combine, and once more (the
  stage that receives the combine, empty here: the combine call includes it).

The host issues the calls in that order, and each resource runs its calls in it: the SMs the
computing calls, the network the all-to-alls (``kernel_role``). A call starts when it is
launched, its micro-batch's previous call is done (its data) and its resource's previous
call is done. Every finish time is so a max of sums of call times and launch times over
paths fixed by the order (a max-plus system): it never decreases when any of them grows.
A first-come-first-served choice of the next call (``stream.run_first_come``, the default
schedule, ``parallelism.overlap_schedule``) is not so (Graham's list-scheduling anomalies: a
slower call can reorder the rest into a shorter step).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from rdu_sim.compiler.fusion_levels import ATTENTION, KV_READ
from rdu_sim.compiler.program import KernelProgram
from rdu_sim.des.environment import EventLimitError
from rdu_sim.engine.gpu.stream import Call, StreamRun

Role = Literal["compute", "attention", "shared", "dispatch", "combine"]
"""What a kernel is to the stage cuts: an all-to-all (``dispatch``, ``combine``: on the
network), the attention core, the shared experts, or another computing kernel."""

DECODE_DELTA = 2  # stages micro-batch A runs ahead in decode (SGLang's tbo_delta_stages)
COMMUNICATES: frozenset[Role] = frozenset({"dispatch", "combine"})


def exchanges(kernel: KernelProgram) -> bool:
    """Whether the kernel is an all-to-all (every stage one): it runs on the network, beside
    the other micro-batch's kernels on the SMs, under either schedule."""
    return all(stage.op == "alltoall" for stage in kernel.stages)


def kernel_role(kernel: KernelProgram) -> Role:
    """The kernel's role: an all-to-all (:func:`exchanges`, by its direction), the attention
    core (a stage reading the KV cache or attending), the shared experts (every stage
    theirs), else computing."""
    stages = kernel.stages
    if exchanges(kernel):
        spec = stages[0].collective
        assert spec is not None and spec.exchange is not None  # the compiler's all-to-alls
        return spec.exchange.direction
    if any(stage.op == KV_READ or stage.op in ATTENTION for stage in stages):
        return "attention"
    if all(".shared." in f".{stage.name}" for stage in stages):
        return "shared"
    return "compute"


def stage_cuts(roles: Sequence[Role], decode: bool) -> list[int]:
    """Where a micro-batch's chain of calls (each call's role) is cut into stages: call
    positions, non-decreasing; a repeated position is an empty stage."""
    cuts: list[int] = []
    last_combine = 0
    for d, role in enumerate(roles):
        if role != "dispatch":
            continue
        c = next((i for i in range(d + 1, len(roles)) if roles[i] == "combine"), None)
        if decode:
            shared = d
            while shared > last_combine and roles[shared - 1] == "shared":
                shared -= 1
            core = next(
                (i for i in range(shared - 1, last_combine - 1, -1) if roles[i] == "attention"),
                None,
            )
            if core is None:
                core = shared
            else:
                while core > last_combine and roles[core - 1] == "attention":
                    core -= 1
            cuts += [core, shared]
        cuts.append(d + 1)
        if c is not None:
            cuts += [c + 1, c + 1] if decode else [c + 1]
            last_combine = c + 1
    return cuts


def interleave(
    lengths: Sequence[int], cuts: Sequence[Sequence[int]], delta: int
) -> list[tuple[int, int]]:
    """The order of two micro-batches' calls (micro-batch, position): A's first ``delta``
    stages, then A's and B's next stages alternately, then what is left of B."""
    stages = [
        [range(lo, hi) for lo, hi in zip([0, *c], [*c, n], strict=True)]
        for n, c in zip(lengths, cuts, strict=True)
    ]
    first, second = stages
    sequence = [(0, k) for k in range(min(delta, len(first)))]
    for k in range(max(len(first) - delta, len(second))):
        if delta + k < len(first):
            sequence.append((0, delta + k))
        if k < len(second):
            sequence.append((1, k))
    return [(m, i) for m, k in sequence for i in stages[m][k]]


def run_stage_order(
    streams: Sequence[Sequence[Call]],
    roles: Sequence[Role],
    decode: bool,
    launch_s: float,
    graph_launch_s: float | None,
    compute_scale: float,
    max_events: int,
) -> StreamRun:
    """Two micro-batches' calls (``roles`` by kernel index) in SGLang's stage order: the host
    launches them in it (each ``launch_s``; with ``graph_launch_s`` not None, all at once as
    one CUDA graph), and a call starts at the latest of its launch, its micro-batch's
    previous call's end and its resource's previous call's end (the SMs, or the network for
    an all-to-all). A computing call takes ``compute_scale`` times its time alone (the SMs
    the communication kernels hold). ``starts`` are in that order; one event a call."""
    assert len(streams) == 2
    chains = [[roles[call.kernel] for call in calls] for calls in streams]
    cuts = [stage_cuts(chain, decode) for chain in chains]
    order = interleave([len(c) for c in streams], cuts, DECODE_DELTA if decode else 0)
    if len(order) > max_events:
        raise EventLimitError(max_events)
    done = [0.0, 0.0]  # each micro-batch's last call's end
    free = {False: 0.0, True: 0.0}  # each resource's last call's end (True: the network)
    starts: list[float] = []
    for k, (m, i) in enumerate(order):
        call = streams[m][i]
        comm = roles[call.kernel] in COMMUNICATES
        launched = graph_launch_s if graph_launch_s is not None else launch_s * (k + 1)
        start = max(launched, done[m], free[comm])
        starts.append(start)
        done[m] = free[comm] = start + (call.device_s if comm else call.device_s * compute_scale)
    host_s = graph_launch_s if graph_launch_s is not None else launch_s * len(order)
    return StreamRun(max(done), tuple(starts), host_s, len(order))
