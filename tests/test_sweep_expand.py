"""Sweep specs and their expansion: the grid product, ranges, zip, and errors before running.

Every point is resolved to a validated Scenario before anything runs, so these tests also pin
that a bad axis (unknown field, refused value, mismatched zip) fails up front with the spec
file, the field and its line, and that no database is created.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rdu_sim.config.errors import ConfigError
from rdu_sim.scenario import Scenario
from rdu_sim.sweep import check_spec, expand, load_spec, run_sweep
from rdu_sim.sweep.spec import RangeSpec

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"


def write_spec(tmp_path: Path, body: str, name: str = "spec.yaml") -> Path:
    """A spec file in tmp_path whose base is the shipped Llama 8B workload."""
    path = tmp_path / name
    path.write_text(f"base: {BASE}\n" + textwrap.dedent(body).lstrip("\n"))
    return path


def test_grid_product_has_every_combination(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        """
        set: {serving.requests: 4}
        axes:
          serving.batch_slots: [1, 2, 4]
          hw.socket.hbm.bandwidth: ["1 TB/s", "2 TB/s"]
        """,
    )
    expansion = expand(load_spec(spec))
    assert len(expansion.points) == 6 and expansion.duplicates == 0
    assert expansion.axes == ("serving.batch_slots", "hw.socket.hbm.bandwidth")
    seen = set()
    for point in expansion.points:
        scenario = point.scenario
        assert isinstance(scenario, Scenario)
        assert scenario.workload.serving.requests == 4  # `set` applies to every point
        assert point.overrides == {
            "serving.batch_slots": scenario.workload.serving.batch_slots,
            "hw.socket.hbm.bandwidth": point.overrides["hw.socket.hbm.bandwidth"],
        }
        seen.add((scenario.workload.serving.batch_slots, scenario.hardware.socket.hbm.bandwidth))
    assert seen == {(s, b) for s in (1, 2, 4) for b in (1e12, 2e12)}


def test_no_axes_is_one_point(tmp_path: Path) -> None:
    expansion = expand(load_spec(write_spec(tmp_path, "set: {serving.requests: 3}\n")))
    assert len(expansion.points) == 1
    assert expansion.points[0].describe() == "base"


def test_zip_steps_axes_together(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        """
        axes:
          serving.batch_slots: [1, 2]
        zip:
          - parallelism.tp: [1, 2, 4]
            hw.system.sockets: [1, 2, 4]
            hw.system.sockets_per_node: [1, 2, 4]
        """,
    )
    expansion = expand(load_spec(spec))
    assert len(expansion.points) == 2 * 3
    pairs = {
        (p.scenario.tp, p.scenario.hardware.system.sockets, p.scenario.workload.serving.batch_slots)
        for p in expansion.points
    }
    assert pairs == {(n, n, s) for n in (1, 2, 4) for s in (1, 2)}


def test_zip_length_mismatch_is_a_clear_error(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        """
        zip:
          - parallelism.tp: [1, 2, 4]
            hw.system.sockets: [1, 2]
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_spec(spec)
    issue = info.value.issues[0]
    assert issue.file == str(spec) and issue.field == "zip.0" and issue.line == 3
    assert "equal lengths" in issue.message and "parallelism.tp: 3" in issue.message


def test_ranges_expand_inclusively(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        """
        axes:
          serving.max_context: {start: 2048, stop: 8192, step: 2048}
          kv.min_bucket: {start: 256, stop: 1024, num: 3, scale: log}
          hw.socket.hbm.bandwidth: {start: 1, stop: 2, num: 3, unit: TB/s}
        """,
    )
    expansion = expand(load_spec(spec))
    assert len(expansion.points) == 4 * 3 * 3
    contexts = sorted({p.scenario.workload.serving.max_context for p in expansion.points})
    assert contexts == [2048, 4096, 6144, 8192]
    buckets = sorted({p.scenario.workload.kv.min_bucket for p in expansion.points})
    assert buckets == [256, 512, 1024]
    bandwidths = sorted({p.scenario.hardware.socket.hbm.bandwidth for p in expansion.points})
    assert bandwidths == [1e12, 1.5e12, 2e12]


def test_range_values_and_rules() -> None:
    assert RangeSpec(start=0.1, stop=0.5, step=0.1).values() == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert RangeSpec(start=10, stop=1, step=-3).values() == [10, 7, 4, 1]
    assert RangeSpec(start=8192, stop=131072, num=5, scale="log").values() == [
        8192,
        16384,
        32768,
        65536,
        131072,
    ]
    assert RangeSpec(start=1, stop=2, num=2, unit="TB/s").values() == ["1 TB/s", "2 TB/s"]
    assert RangeSpec(start=1, stop=9, num=5).values() == [1, 3, 5, 7, 9]
    assert RangeSpec(start=1, stop=2, num=3).values() == [1.0, 1.5, 2.0]
    with pytest.raises(ValueError, match="exactly one of step or num"):
        RangeSpec(start=1, stop=2)
    with pytest.raises(ValueError, match="never reaches"):
        RangeSpec(start=1, stop=2, step=-1)
    with pytest.raises(ValueError, match="log needs num"):
        RangeSpec(start=1, stop=2, step=1, scale="log")
    with pytest.raises(ValueError, match=r"integer range 1\.\.3 repeats values"):
        RangeSpec(start=1, stop=3, num=10, scale="log").values()
    # floats are kept to 12 digits, and a unit's string to 12 significant digits: both
    # refuse a range narrower than that, whose points would run as one
    for unit in (None, "GB/s"):
        with pytest.raises(ValueError, match=r"the range 1\.0\.\.1\.0000000000001 repeats values"):
            RangeSpec(start=1.0, stop=1.0000000000001, num=3, unit=unit).values()
    with pytest.raises(ValueError, match="repeats values"):  # 12 significant digits
        RangeSpec(start=1000.0, stop=1000.0000000001, num=2, unit="GB/s").values()
    assert RangeSpec(start=1000.0, stop=1000.0000000001, num=2).values() == [
        1000.0,
        1000.0000000001,
    ]


def test_bad_range_names_the_axis_and_line(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        """
        axes:
          serving.batch_slots: [1, 2]
          serving.max_context: {start: 1024, stop: 4096, stepp: 1024}
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_spec(spec)
    issue = info.value.issues[0]
    assert (issue.field, issue.line) == ("axes.serving.max_context", 4)
    assert "unknown field 'stepp'" in issue.message and "'step'" in issue.message


def test_unknown_axis_field_fails_before_anything_runs(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        """
        axes:
          serving.batch_slots: [1, 2]
          serving.batch_slotz: [3]
        evaluator: {name: synthetic}
        """,
    )
    db = tmp_path / "out.sqlite"
    with pytest.raises(ConfigError) as info:
        run_sweep(spec, db=db, workers=1)
    assert not db.exists()  # nothing ran, nothing was written
    message = str(info.value)
    assert "2 of 2 points are invalid; nothing was run" in message
    blamed = [i for i in info.value.issues if i.field == "axes.serving.batch_slotz"]
    assert len(blamed) == 1 and blamed[0].file == str(spec) and blamed[0].line == 4
    assert "did you mean 'batch_slots'" in blamed[0].message
    with pytest.raises(ConfigError, match="batch_slotz"):
        check_spec(spec)


def test_unknown_batching_policy_fails_before_anything_runs(tmp_path: Path) -> None:
    """A batching policy's name is checked against its registry (in serving, which the
    scenario cannot import) as each point is resolved: a misspelt policy on an axis fails
    the check, the dry run and the sweep before any point runs, as a bad kv.policy does."""
    spec = write_spec(
        tmp_path,
        """
        axes:
          serving.prefill_priority: [prefill_first, decode_frist]
        evaluator: {name: synthetic}
        """,
    )
    db = tmp_path / "out.sqlite"
    with pytest.raises(ConfigError) as info:
        run_sweep(spec, db=db, workers=1)
    assert not db.exists()
    assert "1 of 2 points are invalid; nothing was run" in str(info.value)
    (blamed,) = [i for i in info.value.issues if i.field == "axes.serving.prefill_priority"]
    assert blamed.line == 3 and "unknown batching policy 'decode_frist'" in blamed.message
    assert "valid: aging_spf, decode_first, prefill_first" in blamed.message
    with pytest.raises(ConfigError, match="decode_frist"):
        check_spec(spec)


def test_unknown_hardware_field_names_the_spec_line(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        """
        axes:
          hw.socket.hbm.bandwith: ["1 TB/s"]
        """,
    )
    with pytest.raises(ConfigError) as info:
        expand(load_spec(spec))
    # two issues: the count, then the axis at its line (no 'hardware file ... is not
    # valid:' line between them, as if the shipped file were broken)
    count, blamed = info.value.issues
    assert count.message == "1 of 1 points are invalid; nothing was run"
    assert (blamed.field, blamed.line) == ("axes.hw.socket.hbm.bandwith", 3)
    assert "did you mean 'bandwidth'" in blamed.message


def test_a_refused_value_names_the_points_it_breaks(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        """
        axes:
          parallelism.tp: [1, 2]
        """,
    )
    with pytest.raises(ConfigError) as info:
        expand(load_spec(spec))
    assert "1 of 2 points are invalid" in info.value.issues[0].message
    blamed = info.value.issues[1]
    assert blamed.field == "axes.parallelism.tp" and blamed.line == 3
    assert "exceeds the 1 socket of" in blamed.message and "parallelism.tp=2" in blamed.message


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (
            "set: {serving.requests: 4}\naxes: {serving.requests: [1, 2]}\n",
            "axes.serving.requests",
            "already given at set.serving.requests",
        ),
        ("axes: {serving.batch_slots: []}\n", "axes.serving.batch_slots", "at least one value"),
        (
            "axes: {serving.batch_slots: 4}\n",
            "axes.serving.batch_slots",
            "list of values or a range",
        ),
        ("metrics: [ttft_s.p50, ttft_s.p50]\n", "metrics", "metrics repeat"),
        (
            "axes: {serving.batch_slots: [8, 16, 8]}\n",
            "axes.serving.batch_slots",
            "8 is listed twice; give each value once",
        ),
        ("axis: {serving.batch_slots: [1]}\n", "axis", "did you mean 'axes'"),
        ("evaluator: {name: simulat}\n", "evaluator.name", "valid: simulate, synthetic"),
        (
            "evaluator: {name: synthetic, options: {sleep: 1}}\n",
            "evaluator.options.sleep",
            "unknown field",
        ),
    ],
)
def test_spec_errors_name_the_field(tmp_path: Path, body: str, field: str, words: str) -> None:
    spec = write_spec(tmp_path, body)
    with pytest.raises(ConfigError) as info:
        check_spec(spec)
    issue = info.value.issues[0]
    assert issue.file == str(spec) and issue.field == field and issue.line is not None
    assert words in issue.message


def test_base_is_relative_to_the_spec(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("base: missing.yaml\n")
    with pytest.raises(ConfigError) as info:
        load_spec(spec)
    assert info.value.issues[0].field == "base" and "relative to the spec" in str(info.value)


def test_equal_configs_are_one_point(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        """
        axes:
          hw.socket.hbm.bandwidth: ["1.6 TB/s", "1600 GB/s", "2 TB/s"]
        """,
    )
    expansion = expand(load_spec(spec))
    assert len(expansion.points) == 2 and expansion.duplicates == 1
    assert expansion.grid_size == 3
    zipped = write_spec(  # a zipped axis may repeat a value: the pairs differ
        tmp_path,
        """
        zip:
          - serving.batch_slots: [8, 8]
            serving.requests: [4, 6]
        """,
        "zipped.yaml",
    )
    assert len(expand(load_spec(zipped)).points) == 2


@pytest.mark.parametrize(
    "group",
    [
        "- {serving.batch_slots: [8, 16, 8], serving.requests: [4, 6, 4]}",
        "- {serving.batch_slots: [8, 16, 8]}",
        "- {serving.batch_slots: [8, 16, 8], serving.seed: {start: 1, stop: 3, step: 1}}",
    ],
    ids=["pairs", "one-axis", "with-a-range"],
)
def test_a_zip_group_that_lists_a_row_twice_is_refused(tmp_path: Path, group: str) -> None:
    """A zip group's row given twice is the slip an axis's repeated value is: it would run
    once. (A row repeating one axis's value, the others differing, is two points.)"""
    spec = write_spec(tmp_path, "zip:\n  " + group + "\n")
    if "seed" in group:
        assert len(expand(load_spec(spec)).points) == 3
        return
    with pytest.raises(ConfigError) as info:
        check_spec(spec)
    issue = info.value.issues[0]
    assert issue.field == "zip.0" and issue.line is not None
    assert "serving.batch_slots=8" in issue.message
    assert "is listed twice; give each row once" in issue.message
