"""A server: one scheduler with its strategies, and its driver on the serving loop.

:class:`Server` assembles what ``serving.scheduler`` decides with and what
``serving.driver`` drives it with, once: the batching policy the config names
(``serving.batching``), the hand-off of its role (``serving.handoff``), plain or speculative
decode rounds and the draft's prefill work (``serving.decode_rounds``, ``serving.drafting``,
``serving.speculative``), and where its requests come from: known in advance (a server
alone: ``arrivals``) or pushed at run time (a cluster replica: a router calls
:meth:`Server.submit`, a prefill replica's hand-off :meth:`Server.enqueue`).

In a cluster (``rdu_sim.cluster``) a server is one replica: ``hooks`` (``serving.hooks``)
let a prefix cache shorten prefills, and ``role`` splits serving in two. A ``prefill``
replica holds a prefilled slot until its KV cache has been sent; a ``decode`` replica admits
a request by reserving a slot, decodes once the cache has arrived, and never prefills.
Hand-offs that complete mid-step take effect at the next step boundary, like arrivals.
"""

from __future__ import annotations

from collections import deque

from rdu_sim.des.timeline import Loop
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.serving.arrivals import Arrivals
from rdu_sim.serving.batching import BatchingPolicy, make_batching
from rdu_sim.serving.decode_rounds import DecodeRounds
from rdu_sim.serving.drafting import Drafting
from rdu_sim.serving.driver import ArrivalSource, Driver, KnownArrivals
from rdu_sim.serving.handoff import make_handoff
from rdu_sim.serving.hooks import ServerHooks
from rdu_sim.serving.kv_pool import PoolBlocks
from rdu_sim.serving.load import Counters
from rdu_sim.serving.preemption import make_preemption
from rdu_sim.serving.prompt_facts import PromptFacts
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.scheduler import (
    Policies,
    Priority,
    Progress,
    Role,
    Scheduler,
    ServerConfig,
)
from rdu_sim.serving.slots import Slots
from rdu_sim.serving.speculative import DraftWork, Speculation, SpeculativeRounds
from rdu_sim.serving.step_cache import StepCache

__all__ = ["Priority", "Progress", "Role", "Server", "ServerConfig", "policies_for"]


def policies_for(
    config: ServerConfig,
    records: ServingRecords,
    hooks: ServerHooks | None = None,
    speculation: Speculation | None = None,
    batching: BatchingPolicy | None = None,
) -> Policies:
    """A scheduler's strategies, chosen once: ``batching`` or the one ``config`` names, the
    preemption policy ``config`` names, the hand-off of ``config.role`` with ``hooks``, and a
    draft's rounds and prefill work when ``speculation`` is given (a server alone only)."""
    if speculation is not None and (hooks is not None or config.role != "mixed"):
        raise ValueError("a speculative server runs alone, without cluster hooks")
    rounds, drafting = DecodeRounds(config.decode_rows), Drafting()
    if speculation is not None:
        if speculation.config.decoding is not None:
            rounds = SpeculativeRounds(speculation, records, config.decode_rows)
        drafting = DraftWork(speculation, records.prompt_tokens)
    return Policies(
        batching if batching is not None else make_batching(config.prefill_priority),
        make_handoff(config.role, hooks),
        rounds,
        drafting,
        make_preemption(config.preemption),
    )


class Server:
    """A scheduler and its driver on ``loop`` (module docstring)."""

    def __init__(
        self,
        loop: Loop,
        config: ServerConfig,
        policy: KVPolicy,
        cache: StepCache,
        records: ServingRecords,
        progress: Progress | None = None,
        *,
        hooks: ServerHooks | None = None,
        forever: bool = False,
        load: Counters | None = None,
        speculation: Speculation | None = None,
        arrivals: Arrivals | None = None,
        facts: PromptFacts | None = None,
        batching: BatchingPolicy | None = None,
        rank: bool = False,
        blocks: PoolBlocks | None = None,
    ) -> None:
        """The scheduler's arguments (``Scheduler``; ``batching`` instead of the policy the
        config names), and ``arrivals``: the requests of a server alone, which it lands
        itself as its clock passes them. Without them the server is fed by :meth:`submit`
        and :meth:`enqueue`. ``rank``: an attention rank of a replica, whose scheduler is
        driven with the replica's other ranks' (``serving.lockstep``), not by a driver of
        its own. ``blocks``: a cluster replica's prefix cache, kept in a paged KV pool's
        pages (``serving.kv_pool``)."""
        if arrivals is not None and (hooks is not None or forever):
            raise ValueError("a server given its arrivals runs alone, without cluster hooks")
        policies = policies_for(config, records, hooks, speculation, batching)
        self.loop = loop
        self.scheduler = Scheduler(
            config,
            policy,
            cache,
            records,
            loop,
            policies,
            progress,
            forever=forever,
            load=load,
            facts=facts,
            blocks=blocks,
        )
        self.settles = policies.handoff.settles()  # its driver settles after every step
        self.driver: Driver | None = None  # its own (an attention rank's is its replica's)
        if rank:
            if arrivals is not None:
                raise ValueError("an attention rank is fed by its replica's router")
        else:
            source = ArrivalSource() if arrivals is None else KnownArrivals(arrivals)
            self.driver = Driver(loop, self.scheduler, source, settles=self.settles)
            self.driver.start(endless=forever)
        self._arrival_ps = records.arrival_ps.data  # (as the scheduler's arrays)

    # --- the scheduler's state, as the cluster and the tests read it --------------------------
    @property
    def config(self) -> ServerConfig:
        return self.scheduler.config

    @property
    def records(self) -> ServingRecords:
        return self.scheduler.records

    @property
    def cache(self) -> StepCache:
        return self.scheduler.cache

    @property
    def completed(self) -> int:
        """Requests completed here."""
        return self.scheduler.completed

    @property
    def slots(self) -> Slots:
        return self.scheduler.slots

    @property
    def queue(self) -> deque[int]:
        """The requests waiting for a slot, oldest first."""
        return self.scheduler.queue

    @property
    def load(self) -> Counters:
        return self.scheduler.load

    def outstanding_tokens(self) -> int:
        """The scheduler's outstanding tokens now (what a router balances)."""
        return self.scheduler.outstanding_tokens()

    # --- requests pushed at run time ----------------------------------------------------------
    def submit(self, request: int) -> None:
        """A request arrives now (a replica: a router or a test hands it over)."""
        now = self.loop.now
        self._arrival_ps[request] = now
        self.scheduler.enqueue(request, now)
        self.scheduler.poke()

    def enqueue(self, request: int) -> None:
        """Queue a request now, keeping the arrival time it already has (a decode replica
        receiving a request prefilled elsewhere; :meth:`submit` for a new one)."""
        self.scheduler.enqueue(request, self.loop.now)
        self.scheduler.poke()
