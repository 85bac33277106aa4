"""The bounds every hardware file kind shares (SN40L sockets, GPUs), and the cluster's link.

Limits that catch typos (a missing unit prefix, a sign) without forbidding exotic designs,
and the floor of every rate. The floor follows from the internal units: durations are float
seconds, work / rate; at >= 1 per second the longest (2^60 bytes) is 1.2e18 s, finite, where
a denormal rate such as 5e-324 gives an infinite or NaN time. Whether a slow machine's steps
fit the serving clock (int64 picoseconds, 106 days) depends on the workload:
rdu_sim/serving/clock.py.
"""

MAX_BYTES = 2**60
"""The most bytes a capacity may hold."""
MAX_BANDWIDTH = 1e18
"""The most bytes/s a memory or a link may move."""
MAX_KERNEL_SECONDS = 3600.0
"""The longest a kernel boundary's overhead may take (a launch, a program load, a sync)."""
MIN_RATE = 1.0
"""The least rate (B/s, FLOP/s), also after its efficiency: one unit per second."""


def rate_floor(rate: float, fraction: float, what: str) -> None:
    """Refuse a rate whose effective value (rate x fraction) is below :data:`MIN_RATE`."""
    if rate * fraction < MIN_RATE:
        raise ValueError(
            f"{what} is {rate * fraction:.3g} per second, below the least rate of "
            f"{MIN_RATE:g} per second"
        )
