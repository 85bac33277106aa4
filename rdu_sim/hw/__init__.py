"""SimPy models of SN40L hardware parts, one primitive per module.

Units everywhere: seconds (float), bytes, FLOP/s. Constructors take plain
numbers (no config objects) so each part is testable on its own; the engine
wires them to a compiled Program.

Every part runs in the engine's ``rdu_sim.des.environment.CountingEnvironment`` (SimPy's
environment and events as compiled classes; SimPy's own events run in it too). The parts a
kernel simulation touches at every tile (stage buffers, memory channels, PCU groups) read
the clock as ``env._now``, the field behind ``env.now``.
"""

from rdu_sim.hw.collectives import (
    Collective,
    Topology,
    ring,
    ring_steps,
    ring_time,
    tree_all_reduce,
    tree_time,
)
from rdu_sim.hw.copy_engine import CopyEngine
from rdu_sim.hw.kernel_launch import Body, KernelLauncher
from rdu_sim.hw.memory_channel import MemoryChannel
from rdu_sim.hw.p2p_link import P2PLink
from rdu_sim.hw.pcu_group import PCUGroup, gemm_efficiency
from rdu_sim.hw.stage_buffer import StageBuffer
from rdu_sim.hw.stats import BusyTracker, ByteCounter

__all__ = [
    "Body",
    "BusyTracker",
    "ByteCounter",
    "Collective",
    "CopyEngine",
    "KernelLauncher",
    "MemoryChannel",
    "P2PLink",
    "PCUGroup",
    "StageBuffer",
    "Topology",
    "gemm_efficiency",
    "ring",
    "ring_steps",
    "ring_time",
    "tree_all_reduce",
    "tree_time",
]
