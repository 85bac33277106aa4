"""A replica's data-parallel attention ranks, stepping together: what the one driver drives
for them.

Under data-parallel attention (``parallelism.dp_attention``) each rank holds its own
requests, batch and KV cache, and every MoE layer joins the ranks in its all-to-alls, so no
rank's step ends before the slowest rank's: the ranks step in lockstep. :class:`Ranks` is
the ranks' schedulers as one :class:`~rdu_sim.serving.driven.Driven`:

- at a boundary every rank decides for its own slots (its batching policy, its queue);
- when some rank takes prefill work, the joint step is one step: the prefilling ranks'
  prefill steps and one decode step of every decoding rank, lasting the longest of them
  (a decoding rank's token waits for the other ranks' prefill);
- when every busy rank decodes, the joint run lasts as many steps as the shortest rank's
  run, each as long as the slowest rank's step;
- a rank with nothing to do runs nothing of its own (its device takes part in the
  collectives, which the busy ranks' step times already hold).

When every rank runs the same shape, a rank's step is that shape's (the pool's step times:
every rank sends its experts as many tokens). When they differ (a prefill beside decodes,
a rank idle, another bucket), each busy rank's step is timed with the experts serving the
busy ranks' tokens together (``StepShape.joint_tokens``), and the joint step is the longest
of those. Each rank's tokens carry the joint times; its device time in its step cache (its
utilization and energy) stays its own shape's as if every rank ran it.
The ranks keep what the lockstep cost them (:class:`Ranks`'s counters): the joint steps'
time, the busy ranks' time in them and their own step time within it, and the decoding
ranks' time, of which in joint steps that held another rank's prefill.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from rdu_sim.des.timeline import Loop
from rdu_sim.serving.buckets import octave_rung
from rdu_sim.serving.driven import FOREVER, Action, Driven
from rdu_sim.serving.driver import ArrivalSource, Driver
from rdu_sim.serving.scheduler import Scheduler
from rdu_sim.shapes import StepShape

_DECODE: Final = Action.DECODE
_IDLE: Final = Action.IDLE
_PREFILL: Final = Action.PREFILL


class DecodePlan:
    """One rank's decode run as it planned it: its shape and bucket."""

    def __init__(self, rank: Scheduler, shape: StepShape, bucket: int) -> None:
        self.rank = rank
        self.shape = shape
        self.bucket = bucket


class Ranks(Driven):
    """A replica's attention ranks in lockstep (module docstring): ``ranks``, every one a
    scheduler of the same pool (its step times), served until the run ends."""

    def __init__(self, ranks: list[Scheduler]) -> None:
        if not ranks:
            raise ValueError("a replica has one attention rank at least")
        super().__init__(ranks[0].cache, FOREVER)
        self.ranks = ranks
        self.clock = ranks[0].clock
        for rank in ranks:
            rank.poke = self._poked
        self._prefilling: list[Scheduler] = []  # the ranks taking prefill work this step
        self._decoding: list[Scheduler] = []  # the ranks decoding this step (or run)
        self._plans: list[DecodePlan] = []
        self._mixing = 0  # the prefilling ranks whose step carries their decode rows
        # ranks that decode their live sequences only (a dynamic batch): their rows vary
        self._dynamic = any(rank.rounds.per_sequence() for rank in ranks)
        self._joint_step = 0  # ps: the joint step (or each step of the joint run) in flight
        self._own = 0  # ps: the ranks' own step times in it, summed
        # what the lockstep cost, over the run (integer ps)
        self.joint_ps = 0  # the joint steps' time
        self.busy_ps = 0  # the joint steps' time, summed over the ranks with work in them
        self.own_ps = 0  # the busy ranks' own step times within them, summed
        self.decode_ps = 0  # the decoding ranks' time in joint steps, summed over them
        self.held_ps = 0  # of which in joint steps that held another rank's prefill

    def _poked(self) -> None:
        """Something arrived at a rank: the driver hears it (it wakes, or cuts its run)."""
        self.poke()

    # --- decisions ------------------------------------------------------------------------------
    def at_boundary(self) -> None:
        """Every rank's hand-offs that ended take effect."""
        for rank in self.ranks:
            rank.at_boundary()

    def prefill_may_run(self) -> bool:
        """Whether any rank's batching policy lets prefill work run."""
        return any(rank.prefill_may_run() for rank in self.ranks)

    def prefill_ran_elsewhere(self) -> None:
        """Prefill work outside the slots ran: every rank counts it."""
        for rank in self.ranks:
            rank.prefill_ran_elsewhere()

    def decide(self, now: int) -> Action:
        """Every rank decides for itself; the joint step prefills if any rank does, else
        decodes if any rank does, else waits."""
        prefilling, decoding = self._prefilling, self._decoding
        prefilling.clear()
        decoding.clear()
        for rank in self.ranks:
            action = rank.decide(now)
            if action is _DECODE:
                decoding.append(rank)
            elif action is not _IDLE:
                prefilling.append(rank)
        if prefilling:
            return _PREFILL
        return _DECODE if decoding else _IDLE

    # --- a joint step with prefill work ---------------------------------------------------------
    def begin_prefill(self) -> tuple[int, ...]:
        """Every prefilling rank's step and one decode step of every decoding rank begin;
        the joint step lasts the longest."""
        busy: list[Scheduler] = []
        shapes: list[StepShape] = []
        times: list[int] = []
        for rank in self._prefilling:
            times.append(sum(rank.begin_prefill()))
            shape = rank.prefill_shape
            assert shape is not None
            busy.append(rank)
            shapes.append(shape)
        self.prefill_shape = shapes[0]
        self._mixing = sum(1 for shape in shapes if shape.mixed)
        plans = self._plans
        plans.clear()
        for rank in self._decoding:
            shape, bucket, _steps, step = rank.decode_plan()
            plans.append(DecodePlan(rank, shape, bucket))
            busy.append(rank)
            shapes.append(shape)
            times.append(step)
        times = self._joint_times(busy, shapes, times)
        longest = max(times)
        self._joint_step, self._own = longest, sum(times)
        self._runs(1, longest)
        return (longest,)

    def end_prefill(self) -> None:
        """The joint step ended now: the prefilling ranks' prompts advance, the decoding
        ranks' slots gain their token."""
        self.prefill_shape = None
        for rank in self._prefilling:
            rank.end_prefill()
        self._account(1, held=True)
        self._decoded(1)

    # --- a joint decode run -------------------------------------------------------------------
    def decode_plan(self) -> tuple[StepShape, int, int, int]:
        """The ranks' joint run: the shortest rank's steps, each the slowest rank's step
        (its shape and bucket are the slowest rank's)."""
        plans = self._plans
        plans.clear()
        steps = FOREVER
        times: list[int] = []
        for rank in self._decoding:
            shape, bucket, rank_steps, rank_step = rank.decode_plan()
            plans.append(DecodePlan(rank, shape, bucket))
            steps = min(steps, rank_steps)
            times.append(rank_step)
        shapes = [plan.shape for plan in plans]
        times = self._joint_times(self._decoding, shapes, times)
        step = max(times)
        slowest = plans[times.index(step)]
        self._joint_step, self._own = step, sum(times)
        self._runs(steps, step)
        return slowest.shape, slowest.bucket, steps, step

    def cuttable(self, steps: int) -> bool:
        """Whether an arrival could end the run early: a rank could take it (a rank with
        nothing to do starts its prefill at the next joint boundary)."""
        return any(rank.cuttable(steps) for rank in self.ranks)

    def cut(self, start: int, steps: int, step: int, arrival: int) -> int:
        """The run ends with the joint step in flight at ``arrival`` when a rank could take
        it; every decoding rank's load counters see where."""
        kept = steps
        if self.cuttable(steps):
            for plan in self._plans:
                kept = plan.rank.end_run_at(start, steps, step, arrival)
        return kept

    def decode_done(self, shape: StepShape, bucket: int, steps: int) -> None:
        """The joint run of ``steps`` steps ended now: every decoding rank accounts its own."""
        self._account(steps, held=False)
        self._decoded(steps)

    def record(self, now: int) -> None:
        """Every rank's row."""
        for rank in self.ranks:
            rank.record(now)

    def _joint_times(
        self, busy: list[Scheduler], shapes: list[StepShape], times: list[int]
    ) -> list[int]:
        """Each busy rank's step time in this joint step: ``times``, its own shape's, when
        every rank runs the same shape; else its shape with the experts serving the busy
        ranks' tokens together (``StepShape.joint_tokens``; a rank with nothing to do
        sends none), or its own shape's when that is as many tokens as every rank's copy
        of it (``StepShape.distinct_joint``). (A cluster runs no speculative draft, whose
        scoring would add to a prefilling rank's own time.)"""
        first = shapes[0]
        ranks = len(self.ranks)
        if len(shapes) == ranks and all(shape == first for shape in shapes):
            return times
        together = sum(shape.rows for shape in shapes)
        if self._dynamic:  # up the octave ladder (at most 12.5% over): ranks of dynamic
            together = octave_rung(together)  # batches would time a step per sum of rows
        joint_times: list[int] = []
        for rank, shape, own in zip(busy, shapes, times, strict=True):
            joint = replace(shape, joint_tokens=together)
            joint_times.append(rank.cache.step_ps(joint) if joint.distinct_joint(ranks) else own)
        return joint_times

    # --- the ranks' own accounts ----------------------------------------------------------------
    def _runs(self, steps: int, step: int) -> None:
        """Every decoding rank's load counters see a run of ``steps`` joint steps from now."""
        now = self.clock.now
        for plan in self._plans:
            rank = plan.rank
            rank.load.begin_run(now, now + steps * step, step, rank.slots.decoding)

    def _decoded(self, steps: int) -> None:
        """Every decoding rank accounts ``steps`` decode steps of its own shape."""
        for plan in self._plans:
            plan.rank.decode_done(plan.shape, plan.bucket, steps)
        self._plans.clear()

    def _account(self, steps: int, held: bool) -> None:
        """``steps`` joint steps ended (``held``: one holding prefill work): their time, the
        busy ranks' time in them and their own within it, and the decoding ranks' time."""
        joint = steps * self._joint_step
        decoders = len(self._plans)
        busy = decoders + len(self._prefilling) if held else decoders
        self.joint_ps += joint
        self.busy_ps += joint * busy
        self.own_ps += steps * self._own
        # a rank whose prefill step carried its decode rows decoded in it, not held
        self.decode_ps += joint * (decoders + (self._mixing if held else 0))
        if held:
            self.held_ps += joint * decoders


def drive_in_lockstep(loop: Loop, ranks: list[Scheduler], settles: bool) -> Ranks:
    """Start the one driver on ``ranks`` together (fed by their replica's router; settling
    after every step when a rank's hand-offs end at events its steps cause); the ranks as
    one, with what the lockstep costs them."""
    together = Ranks(ranks)

    def longest_step_s() -> float:  # (for the clock's range error: any rank's longest)
        return max(rank.cache.longest_step_s for rank in ranks)

    driver = Driver(loop, together, ArrivalSource(), settles=settles, longest_step_s=longest_step_s)
    driver.start(endless=True)
    return together
