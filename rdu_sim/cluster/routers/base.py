"""The router contract and its registry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol


class Candidate(Protocol):
    """What a router may ask a replica about, at the arrival instant."""

    def outstanding_tokens(self) -> int:
        """Prompt tokens still to prefill plus output tokens still to generate, over the
        requests queued or running on the replica."""
        ...

    def cached_tokens(self, request: int) -> int:
        """Prompt tokens of ``request`` the replica's prefix cache holds (0 without one)."""
        ...


class Router(Protocol):
    """Picks the replica of a pool that takes a request."""

    def choose(self, request: int, candidates: Sequence[Candidate]) -> int:
        """The index (into ``candidates``) of the replica that takes ``request``."""
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
