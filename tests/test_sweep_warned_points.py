"""A sweep's table says which points ran with warnings (what `rdu-sim run` of that point
would have warned of), naming each point by its axes; the ``warnings`` column keeps them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rdu_sim.report.sweep_table import MAX_WARNED_POINTS, table_notes, warned_notes
from rdu_sim.sweep import load, run_sweep

ROOT = Path(__file__).resolve().parents[1]


def test_a_point_whose_weights_spill_to_ddr_is_named_under_the_table(tmp_path: Path) -> None:
    """16 slots of 4k context beside Llama 3.1 8B's 15 GiB of weights, a hot set of up to 75%
    of HBM: at 20 GiB the slots push part of it to DDR (WeightsSpilledWarning in a run); at
    64 GiB they do not."""
    spec = {
        "name": "spill",
        "base": str(ROOT / "workloads" / "llama3.1-8b-1socket.yaml"),
        "set": {
            "serving.requests": 4,
            "serving.batch_slots": 16,
            "memory.weights": "hot_set",
            "memory.hot_set_fraction": 0.75,
            "serving.max_context": 4096,
            "serving.prompt_tokens": 512,
            "serving.output_tokens": 8,
            "serving.arrival": {"process": "closed_loop"},
        },
        "axes": {"hw.socket.hbm.capacity": ["20 GiB", "64 GiB"]},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    summary = run_sweep(tmp_path / "s.yaml", db=tmp_path / "s.sqlite")
    assert summary.failed == 0
    frame = load(tmp_path / "s.sqlite")
    warned = [n for n in table_notes(frame) if n.startswith("warning")]
    assert len(warned) == 1
    assert warned[0].startswith("warning at hw.socket.hbm.capacity=20 GiB: serving.batch_slots 16")
    assert "of them from there" in warned[0]


def test_past_a_few_warned_points_the_rest_are_counted() -> None:
    records: list[dict[str, Any]] = [
        {"status": "done", "x": i, "warnings": [f"w{i}"]} for i in range(MAX_WARNED_POINTS + 2)
    ]
    records.append({"status": "done", "x": 99, "warnings": []})
    notes = warned_notes(records, ["x"])
    assert notes[:MAX_WARNED_POINTS] == [
        f"warning at x={i}: w{i}" for i in range(MAX_WARNED_POINTS)
    ]
    assert notes[-1] == "warning: 2 more points ran with warnings (the warnings column has them)"
    assert len(notes) == MAX_WARNED_POINTS + 1
