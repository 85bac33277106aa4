"""The router contract and its registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
from numpy.typing import NDArray


class PoolState(Protocol):
    """What a router may read about the replicas of a pool, at the arrival instant."""

    def __len__(self) -> int:
        """Replicas in the pool."""
        ...

    def outstanding_tokens(self) -> NDArray[np.int64]:
        """Per replica: prompt tokens still to prefill plus output tokens still to generate,
        over the requests queued or running there (``serving.load``); an array the pool reuses
        at its next read."""
        ...

    def cached_tokens(self, request: int) -> NDArray[np.int64]:
        """Per replica: prompt tokens of ``request`` its prefix cache would spare (0 without
        a cache)."""
        ...


class Router(Protocol):
    """Picks the replica of a pool that takes a request."""

    def choose(self, request: int, pool: PoolState) -> int:
        """The index (in the pool) of the replica that takes ``request``."""
        ...


RouterFactory = Callable[[], Router]
_REGISTRY: dict[str, RouterFactory] = {}


def register(name: str) -> Callable[[RouterFactory], RouterFactory]:
    """Register a router class (or factory) as ``router.policy: name``; no duplicates."""

    def decorate(factory: RouterFactory) -> RouterFactory:
        if name in _REGISTRY:
            raise ValueError(f"router {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return decorate


def router_names() -> list[str]:
    """Registered router names, sorted."""
    return sorted(_REGISTRY)


def make_router(name: str) -> Router:
    """A fresh router (its own state, e.g. a round-robin position) of the named policy."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown router.policy {name!r}; valid: {', '.join(router_names())}"
        ) from None
    return factory()
