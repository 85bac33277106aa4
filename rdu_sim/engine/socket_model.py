"""One socket's shared parts in a simulation run: HBM and DDR channels and the AGCU launcher.

Every stage of a kernel on this socket streams its weight and KV tiles through the same two
``MemoryChannel``s (fair processor sharing), so concurrent stages compete for bandwidth the
way they do on the chip. A channel is the fluid limit of interleaving requests across the
tier's lanes (their number would only set how finely streams interleave, not what one stream
gets, so it is not a parameter); the tier's ``efficiency`` scales its peak.

``read``/``write`` wrap the channels so that, when recording, the socket's bytes-in-flight
counters move with each request (added at issue, removed when the last byte lands).
"""

from __future__ import annotations

from rdu_sim.config.hardware import MemoryTierConfig, SocketConfig
from rdu_sim.des.environment import CountingEnvironment, Event
from rdu_sim.engine.records import Recorder
from rdu_sim.hw.kernel_launch import KernelLauncher
from rdu_sim.hw.memory_channel import MemoryChannel


def _channel(env: CountingEnvironment, tier: MemoryTierConfig, name: str) -> MemoryChannel:
    return MemoryChannel(env, tier.bandwidth, tier.latency, tier.efficiency, name=name)


class SocketModel:
    """The parts of socket ``index`` shared by all stages: memory tiers and kernel launch."""

    def __init__(
        self,
        env: CountingEnvironment,
        index: int,
        socket: SocketConfig,
        recorder: Recorder | None = None,
    ) -> None:
        self.env = env
        self.index = index
        self.config = socket
        self.recorder = recorder
        self.channels: dict[str, MemoryChannel] = {
            "hbm": _channel(env, socket.hbm, f"s{index}.hbm"),
            "ddr": _channel(env, socket.ddr, f"s{index}.ddr"),
        }
        k = socket.kernel
        self.launcher = KernelLauncher(
            env, k.program_load, k.argument_load, k.sync, name=f"s{index}.agcu"
        )

    def read(self, tier: str, nbytes: float) -> Event:
        """Stream ``nbytes`` from ``tier``; fires when the last byte has arrived."""
        done = self.channels[tier].read(nbytes)
        return done if self.recorder is None else self._track(tier, nbytes, done)

    def write(self, tier: str, nbytes: float) -> Event:
        """Store ``nbytes`` to ``tier``; fires when the last byte is stored."""
        done = self.channels[tier].write(nbytes)
        return done if self.recorder is None else self._track(tier, nbytes, done)

    def _track(self, tier: str, nbytes: float, done: Event) -> Event:
        rec = self.recorder
        if rec is not None and nbytes > 0:
            rec.in_flight(self.index, tier, float(self.env.now), nbytes)
            done.add_callback(
                lambda _ev: rec.in_flight(self.index, tier, float(self.env.now), -nbytes)
            )
        return done

    def bytes_moved(self, tier: str) -> float:
        """Bytes read plus written on ``tier`` so far."""
        ch = self.channels[tier]
        return ch.reads.total + ch.writes.total
