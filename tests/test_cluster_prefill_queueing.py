"""A disaggregated run's TTFT queueing says what it waited for: a prefill replica's slot holds
a prefilled request until a decode slot takes its KV cache, so a starved decode pool shows as
queueing for a prefill slot; the report splits it and names the pool that binds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_cluster import LLAMA, fake, write_cluster

from rdu_sim.cluster.records import UNSET
from rdu_sim.report.cluster import _share_integral, _step_function
from rdu_sim.report.cluster_console import binding_caption
from rdu_sim.report.slo_why import moves


def _disaggregated(folder: Path, prefill_slots: int, decode: int, decode_slots: int) -> Any:
    pools = {
        "pre": {
            "workload": str(LLAMA),
            "replicas": 1,
            "role": "prefill",
            "set": {"serving.batch_slots": prefill_slots},
        },
        "dec": {
            "workload": str(LLAMA),
            "replicas": decode,
            "role": "decode",
            "set": {"serving.batch_slots": decode_slots},
        },
    }
    traffic = {
        "rate": 40.0,
        "requests": 200,
        "prompt_tokens": {"dist": "uniform", "low": 200, "high": 3000},
        "output_tokens": {"dist": "uniform", "low": 100, "high": 400},
        "seed": 5,
    }
    slo = {"ttft": "100 ms", "tpot": "20 ms", "attainment": 0.9}
    path = write_cluster(folder, pools=pools, traffic=traffic, slo=slo)
    return fake(path)


def test_a_starved_decode_pool_is_named_for_the_ttft(tmp_path: Path) -> None:
    result = _disaggregated(tmp_path, prefill_slots=8, decode=1, decode_slots=2)
    summary = result.summary()
    split = summary.prefill_queueing
    assert split is not None and split.waits_for == "decode" and split.decode_share > 0.5
    assert set(split.decode_pools) == {"dec"}
    # The parts sum to every served request's queueing.
    queued = result.requests()["queue_delay_s"]
    total = float(np.nansum(queued))
    assert split.total_s == pytest.approx(total, rel=1e-6)
    parts = split.prefill_s + split.decode_slot_s + split.kv_transfer_s
    assert parts == pytest.approx(total, rel=1e-6)
    data = summary.to_dict()["prefill_queueing"]
    assert data["waits_for"] == "decode"
    assert data["decode_pools"] == {"dec": pytest.approx(1, abs=0.1)}
    caption = binding_caption(summary)
    assert "TTFT binds" in caption
    assert "pool dec" in caption and "the decode pool binds" in caption
    assert "more decode replicas" in caption
    # The plan's lever for a TTFT the decode side holds: the decode pool first.
    metrics = {"disaggregated": True, "prefill_queue_decode_share": split.decode_share}
    assert moves(metrics, "ttft", alone=False)[0].startswith("more decode replicas")


def test_a_starved_prefill_pool_is_named_for_the_ttft(tmp_path: Path) -> None:
    result = _disaggregated(tmp_path, prefill_slots=1, decode=2, decode_slots=64)
    split = result.summary().prefill_queueing
    assert split is not None and split.waits_for == "prefill" and split.decode_share < 0.5
    assert split.prefill_s > split.decode_slot_s
    caption = binding_caption(result.summary())
    assert "the prefill pool binds" in caption and "more prefill replicas" in caption
    metrics = {"disaggregated": True, "prefill_queue_decode_share": split.decode_share}
    assert moves(metrics, "ttft", alone=False)[0].startswith("more prefill replicas")


def test_a_mixed_cluster_has_no_split(tmp_path: Path) -> None:
    result = fake(write_cluster(tmp_path))
    assert result.summary().prefill_queueing is None
    assert "prefill_queueing" not in result.summary().to_dict()


def test_the_share_integral_by_hand() -> None:
    """Two slots busy over [0, 10); one held over [4, 10): a wait over [2, 8) is behind the
    held slot half the time from 4 to 8: 2."""
    busy = _step_function(np.array([0, 0]), np.array([10, 10]))
    held = _step_function(np.array([4]), np.array([10]))
    assert _share_integral(busy, held, np.array([2]), np.array([8])) == pytest.approx(2.0)
    assert _share_integral(busy, held, np.array([0]), np.array([3])) == 0.0
    # a replica that took no request (or sent none): nothing open, nothing held
    none = _step_function(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert none[0].size == 0 and none[1].size == 0
    assert _share_integral(busy, none, np.array([2]), np.array([8])) == 0.0
    assert UNSET == -1
