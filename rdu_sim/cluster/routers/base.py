"""The router contract and its registry (shipped routers and plugins' alike:
``rdu_sim.plugins``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Protocol, overload

import numpy as np
from numpy.typing import NDArray

from rdu_sim import plugins


class PoolState(Protocol):
    """What a router may read about the replicas of a pool, at the arrival instant."""

    def __len__(self) -> int:
        """Replicas in the pool."""
        ...

    def outstanding_tokens(self) -> NDArray[np.int64]:
        """Per replica: its load as a real router knows it, over the requests queued or
        running there, each one's prompt plus its output tokens generated so far (prompt
        tokens still to prefill plus KV tokens held; no output length still to come:
        ``serving.load``); an array the pool reuses at its next read."""
        ...

    def cached_tokens(self, request: int) -> NDArray[np.int64]:
        """Per replica: prompt tokens of ``request`` its prefix cache would spare (0 without
        a cache)."""
        ...

    # The queue and the slots, per replica, read exact at the arrival instant from each
    # replica's scheduler (what tracks them) whatever ``router.load_refresh``, which delays
    # only ``outstanding_tokens``, the load a router scrapes. Each a new array, from a Python
    # loop over the replicas (~25 ns a replica: ~25 us a read of 1,024).

    def queued_tokens(self) -> NDArray[np.int64]:
        """Per replica: the prompt tokens of its requests waiting for a slot (not yet
        prefilling: the part of ``outstanding_tokens`` no slot has started)."""
        ...

    def queue_lengths(self) -> NDArray[np.int64]:
        """Per replica: its requests waiting for a slot."""
        ...

    def running_slots(self) -> NDArray[np.int64]:
        """Per replica: its batch slots holding a request (prefilling, decoding, holding a KV
        cache being sent, or reserved for one being received)."""
        ...

    def free_slots(self) -> NDArray[np.int64]:
        """Per replica: its batch slots free (its ``batch_slots`` less the running ones)."""
        ...

    def prompt_tokens(self, request: int) -> int:
        """``request``'s prompt tokens (a router knows the prompt it routes)."""
        ...

    def output_tokens(self, request: int) -> int:
        """``request``'s output tokens, from the trace: an oracle no production router has
        (for studies of length-aware routing, or of a predictor's value)."""
        ...


class Router(Protocol):
    """Picks the replica of a pool that takes a request."""

    def choose(self, request: int, pool: PoolState) -> int:
        """The index (in the pool) of the replica that takes ``request``."""
        ...


RouterFactory = Callable[..., Router]
"""A router class or factory: called with no argument, or with ``seed=`` (an int, the
cluster's ``router.seed``, else its ``traffic.seed``: ``ClusterConfig.router_seed``; the
decode pool's router gets it plus one) when it takes a ``seed`` keyword, as a router that
draws at random does. A class attribute ``reads_load = False`` says it reads no load
(:func:`reads_load`)."""
_REGISTRY: dict[str, RouterFactory] = {}


@overload
def register(name: str) -> Callable[[RouterFactory], RouterFactory]: ...


@overload
def register(name: str, factory: RouterFactory) -> RouterFactory: ...


def register(
    name: str, factory: RouterFactory | None = None
) -> RouterFactory | Callable[[RouterFactory], RouterFactory]:
    """Register a router class (or factory) as ``router.policy: name``: as a class decorator,
    ``@register(name)``, or called, ``register(name, Cls)`` (as a batching policy's;
    ``plugins.register_in``). A name is refused to a class other than the one holding it;
    the same class again (module and name: a reloaded plugin) replaces it."""
    registered: RouterFactory | Callable[[RouterFactory], RouterFactory]
    registered = plugins.register_in("router", _REGISTRY, name, factory)
    return registered


def router_factory(name: str) -> RouterFactory | None:
    """The router registered as ``name``, the plugins loaded first when none is
    (``rdu_sim.plugins``); None when no plugin registers it either."""
    return plugins.lookup(_REGISTRY, name)


def router_names() -> list[str]:
    """Registered router names, sorted (the plugins' too: loaded first)."""
    return plugins.names(_REGISTRY)


def takes_seed(factory: RouterFactory) -> bool:
    """Whether a router's constructor takes a ``seed`` keyword."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature: no seed
        return False
    seed = parameters.get("seed")
    return seed is not None and seed.kind in (seed.POSITIONAL_OR_KEYWORD, seed.KEYWORD_ONLY)


def reads_load(factory: RouterFactory) -> bool:
    """Whether a router reads the replicas' load (``PoolState.outstanding_tokens``), so
    ``router.load_refresh`` changes its choices: unless its class says ``reads_load = False``
    (``round_robin``: a run warns that a refresh changes nothing)."""
    return bool(getattr(factory, "reads_load", True))


def make_router(name: str, seed: int = 0) -> Router:
    """A fresh router (its own state, e.g. a round-robin position) of the named policy;
    ``seed`` is passed to one that takes it (:data:`RouterFactory`)."""
    factory = router_factory(name)
    if factory is None:
        raise ValueError(
            f"unknown router.policy {name!r}; valid: {', '.join(router_names())} "
            + plugins.ELSEWHERE
        )
    return factory(seed=seed) if takes_seed(factory) else factory()
