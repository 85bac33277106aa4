"""What one simulation run of a kernel measured on one socket, as additive quantities.

Every field is a total over the run (seconds, bytes, FLOPs, unit-seconds), so runs combine
linearly: a step is the sum of its kernels, ``k`` identical unlooped calls are ``k`` times one
call (calls are separated by a full synchronization, so each starts from an empty machine), and
a periodic looped kernel extrapolates affinely in its iteration count (see ``fast_forward``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class RunStats:
    """Totals of one run on socket 0 (every socket is identical under symmetric TP)."""

    time_s: float = 0.0  # launch + execute + sync
    overhead_s: float = 0.0  # launch (program + argument load) and sync
    hbm_bytes: float = 0.0  # read + written
    ddr_bytes: float = 0.0
    sram_bytes: float = 0.0  # SRAM-resident bytes read + written by stages
    p2p_bytes: float = 0.0  # bytes socket 0 sent on its links
    flops: float = 0.0
    vector_flops: float = 0.0
    pcu_s: float = 0.0  # PCU-seconds busy (each stage's busy time x its PCUs)
    pmu_s: float = 0.0  # PMU-port-seconds busy
    # the critical (busiest) stage's: its PCUs' busy time and its PMU ports' busy time, each
    # the largest over the kernel's stages (a stage's PCUs and PMUs work together, so the
    # busiest stage's time is what the kernel waits for where one stage is slower than the
    # rest): ``report.bound``'s compute and pmu times
    pcu_stage_s: float = 0.0
    pmu_stage_s: float = 0.0
    hbm_busy_s: float = 0.0  # time at least one HBM stream was active
    ddr_busy_s: float = 0.0
    link_busy_s: float = 0.0  # busiest link direction's serialisation time
    # of each link class (``engine.links.LINK_FIELDS``): its busiest direction's; link_busy_s
    # is the largest of the three in each run
    intra_node_link_busy_s: float = 0.0
    inter_node_link_busy_s: float = 0.0
    inter_rack_link_busy_s: float = 0.0
    # the same directions' time with a transfer under way, from its first byte leaving to its
    # arrival (serialisation and latency: ``P2PLink.flight_time``), the longest of each class
    # and of all: what the links cost the step's critical path (``report.bound``'s link time)
    link_flight_s: float = 0.0
    intra_node_link_flight_s: float = 0.0
    inter_node_link_flight_s: float = 0.0
    inter_rack_link_flight_s: float = 0.0
    blocks_busy_s: float = 0.0  # time a GPU's decode attention's thread blocks streamed

    def as_dict(self) -> dict[str, float]:
        """Field name -> value."""
        return {name: getattr(self, name) for name in FIELDS}

    def plus(self, other: RunStats) -> RunStats:
        """Field-wise sum."""
        return self.affine(other, 1.0)

    def scaled(self, factor: float) -> RunStats:
        """Every field times ``factor``."""
        return RunStats(**{name: getattr(self, name) * factor for name in FIELDS})

    def minus(self, other: RunStats) -> RunStats:
        """Field-wise difference."""
        return self.affine(other, -1.0)

    def affine(self, other: RunStats, factor: float) -> RunStats:
        """``self + factor * other``, field-wise."""
        return RunStats(
            **{name: getattr(self, name) + factor * getattr(other, name) for name in FIELDS}
        )


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RunStats))
"""``RunStats``'s field names in order, read once, not per call (``plus`` and ``minus`` run
~120,000 times in cluster-h100-lockstep: twice a simulated kernel call)."""

OBSERVED: frozenset[str] = frozenset(
    {
        "pcu_stage_s",
        "pmu_stage_s",
        "link_flight_s",
        "intra_node_link_flight_s",
        "inter_node_link_flight_s",
        "inter_rack_link_flight_s",
    }
)
"""``RunStats`` fields that only observe a run for the reports (what binds it), never decide
its future: fast-forward's cycle rule does not compare them (``fast_forward._close``), so
they cannot change where a looped kernel is cut; they extrapolate like the rest."""
