"""What a cluster plugs into a server: prefix caching and KV handoff between replicas.

A lone server has no hooks and behaves exactly as docs/serving.md says. A replica of a
cluster (``rdu_sim.cluster``) gets one object implementing this protocol; the server's
hand-off strategy (``serving.handoff``, by the replica's role) calls it at the four moments
where a request's KV cache meets the outside world, and never needs to know what is behind
it (a prefix cache, a link to another replica).
"""

from __future__ import annotations

from typing import Protocol

from simpy.events import Event


class ServerHooks(Protocol):
    """Calls a server makes into its cluster; times are the server's (integer ps)."""

    def admitted(self, request: int, prompt: int) -> int:
        """A slot was given to ``request`` and its prefill starts now: how many prompt tokens
        it skips because a prefix cache holds them. The value must already be a reusable
        prefix (``serving.buckets.reusable_prefix``): 0, or less than ``prompt``."""
        ...

    def prefilled(self, request: int) -> Event | None:
        """The last prefill step of ``request`` ended (its first token is out). None: it
        decodes here. An event: its KV cache leaves for another replica; the slot holds it
        until the event fires, then frees (a prefill replica of disaggregated serving)."""
        ...

    def receive(self, request: int) -> Event:
        """A decode replica reserved a slot for ``request``: start moving its KV cache here;
        the event fires when the cache has arrived and decoding may start."""
        ...

    def left(self, request: int) -> None:
        """``request`` no longer holds a slot here (completed, or its KV cache was sent)."""
        ...
