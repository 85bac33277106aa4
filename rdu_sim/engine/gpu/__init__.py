"""A GPU's execution of a Program: device kernels in SimPy, the host launching them.

Public API: :class:`GpuEngine` (``simulate_step(program) -> StepTiming``) and
:class:`GpuSettings` (CUDA graphs, FP8 tensor cores). See docs/gpu.md.
"""

from rdu_sim.engine.gpu.engine import GpuEngine
from rdu_sim.engine.gpu.work import GpuSettings

__all__ = ["GpuEngine", "GpuSettings"]
