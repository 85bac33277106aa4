"""The bounds every hardware file kind shares (SN40L sockets, GPUs), and the cluster's link.

Limits that catch typos (a missing unit prefix, a sign) without forbidding exotic designs,
and the floor of every rate; and the plausible sizes of one device, which catch a figure
written in the wrong field (a socket's written as one PCU's or one PMU's: a datasheet
quotes the socket) while leaving room for any chip a designer may sketch, each several
times the largest built. The floor follows from the internal units: durations are float
seconds, work / rate; at >= 1 per second the longest (2^60 bytes) is 1.2e18 s, finite, where
a denormal rate such as 5e-324 gives an infinite or NaN time. Whether a slow machine's steps
fit the serving clock (int64 picoseconds, 106 days) depends on the workload:
rdu_sim/serving/clock.py.
"""

from collections.abc import Callable

from rdu_sim.config.errors import FieldProblem

MAX_BYTES = 2**60
"""The most bytes a capacity may hold."""
MAX_TIER_BYTES = 2**46
"""The most one device's off-chip memory tier (HBM, DDR) holds: 64 TiB. The largest built:
288 GB of HBM on one GPU package (B300, MI355X), 1.5 TiB of DDR behind an SN40L socket,
about 6 TiB of DDR5 behind one server socket (12 channels x 2 DIMMs x 256 GiB); ten times
that. A capacity in the wrong unit prefix (``256 PiB``, ``256 TiB`` for GiB) is past it."""
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


MAX_SOCKET_FLOPS = 1e17
"""The most FLOP/s one socket's compute units add up to (``pcu.count`` x ``peak_flops``, and
x ``vector_flops``): 100 PFLOP/s. The largest built: 2.25 PFLOP/s dense BF16 on one package
(B200), 638 TFLOP/s on an SN40L socket, a whole wafer (Cerebras WSE-3) 125 PFLOP/s with
sparsity, about half that dense. A socket's figure written as one PCU's is past it by the
PCU count (638 TFLOP/s x 1,040 PCUs = 664 PFLOP/s)."""
MAX_SOCKET_SRAM = 2**37
"""The most on-chip SRAM one socket's memory units add up to (``pmu.count`` x ``sram``):
128 GiB. The largest built: 520 MiB on an SN40L socket, 230 MB on a Groq LPU, 44 GB on a
whole wafer (Cerebras WSE-3); three times the wafer. A socket's SRAM written as one PMU's is
past it by the PMU count (520 MiB x 1,040 PMUs = 528 GiB)."""
MAX_SOCKET_SRAM_BANDWIDTH = 1e17
"""The most bytes/s one socket's memory units add up to (``pmu.count`` x ``bandwidth``):
100 PB/s. The largest built: about 213 TB/s over an SN40L socket's PMUs, 21 PB/s over a
whole wafer's SRAM (Cerebras WSE-3); five times the wafer. A socket's figure written as one
PMU's is past it by the PMU count (213 TB/s x 1,040 PMUs = 222 PB/s)."""


def per_unit_total(
    field: str, value: float, count: int, unit: str, most: float, shown: Callable[[float], str]
) -> None:
    """Refuse a per-unit ``field`` (one PCU's or one PMU's ``value``; ``unit``: ``PCU`` or
    ``PMU``) whose socket total over ``count`` units is more than ``most``: the socket's
    figure written as one unit's. A FieldProblem naming the field, the total it makes, and
    what one unit's share of the written figure would be (``shown`` formats a value)."""
    total = value * count
    if total <= most:
        return
    units = f"{count:,} {unit}s" if count != 1 else f"1 {unit}"
    raise FieldProblem(
        field,
        f"{shown(value)} per {unit} makes {shown(total)} a socket over {units}, past the "
        f"most a socket is taken to have ({shown(most)}: rdu_sim/config/limits.py); {field} "
        f"is one {unit}'s: a socket's {shown(value)} over {units} is {shown(value / count)} "
        "each",
    )
