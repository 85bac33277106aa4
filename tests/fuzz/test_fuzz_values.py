"""Fuzz: extreme numbers through the whole pipeline (config, compiler, engine, serving).
A few hardware and workload fields at once take values from the edges (denormals, 1,
just inside and past the bounds, huge, negative, NaN): the run either gives finite results
or ends in an input error, never another exception."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rdu_sim import api
from rdu_sim.input_errors import InputError

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"

RATES = [
    "hw.socket.hbm.bandwidth", "hw.socket.pmu.bandwidth", "hw.socket.pcu.peak_flops",
    "hw.socket.pcu.vector_flops", "hw.socket.ddr_to_hbm_bandwidth",
]  # fmt: skip
FRACTIONS = [
    "hw.socket.hbm.efficiency", "hw.socket.usable_fraction",
    "hw.socket.pcu.max_gemm_efficiency", "engine.operand_buffer_fraction",
]  # fmt: skip
COUNTS = [
    "hw.socket.pcu.count", "hw.socket.pmu.count",
    "serving.batch_slots", "serving.max_context", "engine.tiles_per_stage",
    "engine.buffer_tiles", "engine.prefetch_tiles", "hw.socket.pcu.systolic_rows",
]  # fmt: skip
TIMES = ["hw.socket.kernel.sync", "hw.socket.kernel.layer_loop", "hw.socket.hbm.latency"]

EDGE_FLOATS = st.sampled_from(
    [5e-324, 1e-300, 1e-9, 0.5, 1.0, 1.0000001, 1e3, 1e9, 1e16, 1e18, 1e300, -1.0, 0.0,
     math.nan, math.inf, sys.float_info.max]
)  # fmt: skip
EDGE_INTS = st.sampled_from([0, 1, 2, 3, 7, 64, 4096, 10**6, 2**31, 2**63, -1])
VALUES = st.one_of(
    st.tuples(st.sampled_from(RATES), EDGE_FLOATS),
    st.tuples(st.sampled_from(FRACTIONS), st.sampled_from([5e-324, 1e-9, 1e-3, 1.0, 1.5])),
    st.tuples(st.sampled_from(COUNTS), EDGE_INTS),
    st.tuples(st.sampled_from(TIMES), st.sampled_from([0, 5e-324, 1e-12, 1.0, 3600, 1e9])),
)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(changes=st.lists(VALUES, min_size=1, max_size=3, unique_by=lambda c: c[0]))
def test_extreme_values_give_finite_results_or_an_input_error(
    changes: list[tuple[str, float]],
) -> None:
    overrides = [f"{path}={value!r}" for path, value in changes]
    overrides += ["serving.requests=3", "engine.max_events=2000000"]
    try:
        result = api.run(LLAMA, overrides)
    except InputError as exc:
        event(f"refused: {type(exc).__name__}")
        return
    event("ran")
    data = result.to_dict()
    assert math.isfinite(data["decode_tokens_per_s"]) and data["decode_tokens_per_s"] >= 0
    assert math.isfinite(data["makespan_s"]) and data["makespan_s"] > 0
