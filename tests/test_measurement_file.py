"""The measurement format: its columns and metrics, a full-load row as a real serving run, the
shipped files and their converters, and every bad input ending in one clean error."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rdu_sim import api
from rdu_sim.compiler.placement import smallest_request_pages
from rdu_sim.config import ConfigError
from rdu_sim.config.errors import ConfigIssue
from rdu_sim.validate import argonne, trtllm
from rdu_sim.validate.deployment import METRICS, MeasuredPoint, simulate_run
from rdu_sim.validate.measurement_file import (
    MAX_CELL_CHARS,
    OPTIONAL,
    REQUIRED,
    is_measurement_file,
    read_points,
    shipped_files,
)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "reference" / "measurements"
LEGACY = "hardware,model,tp,batch,input_tokens,output_tokens,metric,measured_s"
HEADER = "hardware,model,tp,batch,input_tokens,output_tokens,metric,measured"
ROW = "sn40l,llama-3.2-1b,1,2,64,8,e2e_s,0.5"


def _write(tmp_path: Path, text: str, name: str = "m.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        read_points(path)
    message = str(caught.value)
    assert len(message.splitlines()) == 1, message
    return message


def test_a_row_of_every_column(tmp_path: Path) -> None:
    text = (
        "# a citation\n"
        "hardware,stack,model,tp,batch,requests,input_tokens,output_tokens,weights,kv,"
        "metric,measured,label\n"
        "dgx-h100,,llama-3.1-8b,1,auto,3000,1000,1000,fp8,fp8,output_tokens_per_s,15220,x\n"
        "sn40l,,llama-3.2-1b,1,2,,64,8,,,e2e_s,0.5,\n"
    )
    full, batch = read_points(_write(tmp_path, text))
    assert (full.batch, full.requests, full.weights, full.kv, full.unit) == (
        None,
        3000,
        "fp8",
        "fp8",
        "tokens/s",
    )
    assert full.request_count == 3000 and full.source == f"{tmp_path / 'm.csv'}:3"
    assert (batch.batch, batch.request_count, batch.weights, batch.kv, batch.stack) == (
        2,
        2,
        "bf16",
        "bf16",
        "",
    )


def test_the_older_measured_s_column_still_reads(tmp_path: Path) -> None:
    (point,) = read_points(_write(tmp_path, f"{LEGACY}\n{ROW}\n"))
    assert point.measured == 0.5 and point.metric == "e2e_s"
    throughput = ROW.replace("e2e_s,0.5", "output_tokens_per_s,900")
    assert "name the column measured" in _error(_write(tmp_path, f"{LEGACY}\n{throughput}\n"))
    both = _write(tmp_path, f"{HEADER},measured_s\n{ROW},0.5\n")
    assert "measured (or measured_s)" in _error(both)


@pytest.mark.parametrize(
    ("row", "column", "words"),
    [
        (ROW.replace("e2e_s", "tpot"), "metric", "must be one of"),
        (ROW.replace(",2,", ",two,"), "batch", "expected an integer"),
        (ROW.replace(",2,", ",1_000,"), "batch", "expected an integer or auto"),
        (ROW.replace(",2,", ",-2,"), "batch", "must be in 1..65536, got -2"),
        (ROW.replace(",1,2,", ",-1,2,"), "tp", "must be in 1..4096, got -1"),
        (ROW.replace("0.5", "500 ms"), "measured", "expected a number in e2e_s's unit (s, not"),
        (ROW.replace(",2,", ",auto,"), "requests", "names its requests"),
        (ROW.replace("0.5", "-1"), "measured", "must be in"),
        (ROW.replace("0.5", "nan"), "measured", "expected a number"),
        (ROW.replace("0.5", "1e999"), "measured", "must be in"),
        (ROW.replace("e2e_s", "tpot_s").replace(",8,", ",1,"), "output_tokens", "at least 2"),
        (ROW.replace("sn40l,", ","), "hardware", "is empty"),
    ],
)
def test_a_bad_cell_names_its_line_and_column(
    tmp_path: Path, row: str, column: str, words: str
) -> None:
    message = _error(_write(tmp_path, f"{HEADER}\n{row}\n"))
    assert f"m.csv:2: {column}:" in message and words in message, message


def test_a_subnormal_measurement_is_refused(tmp_path: Path) -> None:
    """Issue 45, reproducer 3: 5e-324 s was accepted, then the fit's first residual was not
    finite (a traceback)."""
    message = _error(_write(tmp_path, f"{LEGACY}\n{ROW.replace('0.5', '5e-324')}\n"))
    assert "measured_s: e2e_s must be in [1e-06, 1e+06] s" in message, message


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        # docs/calibration.md's worked example with its TPOT of 8.5 ms written in seconds:
        # check said OK and calibrate fitted a host time at its bound to -99.8%
        (",tpot_s,0.0085,", ",tpot_s,8.5,", "measured: tpot_s must be in [0.0001, 2] s, got 8.5"),
        # a batch's latency of 1,024 tokens written in ms as seconds / 1000
        (",e2e_s,3.5425630824450263,", ",e2e_s,0.0035,", "shorter than the 1,023 decode steps"),
        # a throughput beyond 3,000 sequences making a token each 100 us
        (",output_tokens_per_s,15220,", ",output_tokens_per_s,4e7,", "more than 3,000 sequences"),
    ],
)
def test_a_measurement_in_another_unit_is_refused(
    tmp_path: Path, old: str, new: str, words: str
) -> None:
    """A value its metric's plausible range (``deployment.TPOT_LOW``, ``TPOT_HIGH``) or its
    row's own lengths and batch make implausible is refused naming file, line and column."""
    doc = (REPO / "docs" / "calibration.md").read_text()
    example = doc.split("<!-- worked example -->\n```csv\n", 1)[1].split("```", 1)[0]
    assert old in example
    read_points(_write(tmp_path, example, "good.csv"))  # the example as written reads
    lines = example.splitlines()
    line = next(i for i, text in enumerate(lines, 1) if old in text)
    message = _error(_write(tmp_path, example.replace(old, new)))
    assert message.startswith(f"{tmp_path / 'm.csv'}:{line}: measured: "), message
    assert words in message, message


@pytest.mark.parametrize("where", ["label", "header"])
def test_a_cell_longer_than_the_csv_limit_is_one_error(tmp_path: Path, where: str) -> None:
    """Issue 45, reproducer 2: a cell over 131,072 characters raised _csv.Error."""
    huge = "x" * 140_000
    text = f"{HEADER},label\n{ROW},{huge}\n" if where == "label" else f"{HEADER},{huge}\n{ROW},a\n"
    message = _error(_write(tmp_path, text))
    assert f"longer than {MAX_CELL_CHARS * 32} characters" in message, message


@pytest.mark.parametrize(("sep", "name"), [(";", "semicolons"), ("\t", "tabs")])
def test_a_sheet_saved_with_another_separator_is_told_to_use_commas(
    tmp_path: Path, sep: str, name: str
) -> None:
    """A spreadsheet saved with semicolons (a locale's CSV) or tabs read as one column:
    "unknown column(s) ['hardware;model;...']", no hint why (and `check` took it for a
    request trace). The header of one column holding the separator says the file must be
    comma-separated, at its line."""
    text = f"{HEADER.replace(',', sep)}\n{ROW.replace(',', sep)}\n"
    path = _write(tmp_path, text)
    message = _error(path)
    assert message.startswith(f"{path}:1: ") and "unknown column" not in message
    assert f"its names separated by {name}: a measurement file is comma-separated" in message
    assert f"(its header would read {HEADER!r}; save the sheet as CSV with commas)" in message
    # `check` tells it from a request trace by its header, as it does a comma-separated one
    assert is_measurement_file(path)
    # one column that is a known name (a file of nothing but hardware) keeps its own error
    assert "header lacks column(s)" in _error(_write(tmp_path, "hardware\nsn40l\n"))


def test_unknown_columns_and_files_that_are_not_csv(tmp_path: Path) -> None:
    assert "unknown column(s) ['stak']" in _error(_write(tmp_path, f"{HEADER},stak\n{ROW},x\n"))
    assert "no header row" in _error(_write(tmp_path, "# only a comment\n"))
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00")
    assert "not valid UTF-8" in _error(binary)
    assert "is a directory" in _error(tmp_path)


def test_every_metric_has_a_unit_and_a_plausible_range() -> None:
    assert set(METRICS) == {"e2e_s", "ttft_s", "tpot_s", "output_tokens_per_s"}
    for metric in METRICS.values():
        assert metric.unit in ("s", "tokens/s") and 0 < metric.low < metric.high


def test_a_full_load_row_is_a_serving_run_at_the_kv_capacity() -> None:
    """output_tokens_per_s is every request's output over the run's makespan, from a run of
    the row's requests, all at time 0, at as many slots as the memory holds, in the row's
    dtypes: the same numbers as `rdu-sim run` of that workload."""
    point = MeasuredPoint(
        "sn40l", "llama-3.2-1b", 1, None, 96, 32, "output_tokens_per_s", 1.0,
        requests=200, weights="fp8", kv="fp8", source="x.csv:2",
    )  # fmt: skip
    done = simulate_run(point)
    result = api.run(point.scenario())
    summary = result.summary()
    assert result.batch_slots == result.batch_capacity == done.batch_slots > 1
    assert result.scenario.workload.serving.max_context == 96 + 32
    assert (result.scenario.weight_dtype, result.scenario.workload.dtypes.kv) == ("fp8", "fp8")
    assert summary.output_tokens == 200 * 32 and summary.requests_completed == 200
    assert done.value == pytest.approx(200 * 32 / summary.makespan_s, rel=1e-12)
    tpot = MeasuredPoint(**{**point.__dict__, "metric": "tpot_s"})
    assert simulate_run(tpot).value == pytest.approx(summary.tpot_s.mean, rel=1e-12)


def test_a_full_load_rows_request_reserves_its_length_in_whole_pages() -> None:
    """A paged stack reserves a request's whole length at admission, in pages (the run's
    rule, ``kv.paged``): 500 + 2000 tokens take 40 pages of 64, the row's context its own
    length; a batch sent together keeps its padded static context."""
    point = MeasuredPoint(
        "dgx-h100", "llama-3.1-8b", 1, None, 500, 2000, "output_tokens_per_s", 1.0,
        requests=10, stack="tensorrt-llm", source="x.csv:2",
    )  # fmt: skip
    scenario = point.scenario()
    assert scenario.stack.kv_page_tokens == 64
    assert scenario.workload.serving.max_context == 2500
    assert smallest_request_pages(scenario) == 40
    fixed = MeasuredPoint(**{**point.__dict__, "batch": 4})
    assert fixed.scenario().workload.serving.max_context == 4096  # MIN_CONTEXT
    static = MeasuredPoint(**{**point.__dict__, "hardware": "sn40l", "stack": ""})
    assert static.scenario().workload.serving.max_context == 2500  # no pages


def test_a_row_that_cannot_run_names_its_line_and_column(tmp_path: Path) -> None:
    for row, column in [
        (ROW.replace("llama-3.2-1b", "llama-9"), "model"),
        (ROW.replace(",1,2,", ",3,2,"), "tp"),
        (ROW.replace("sn40l,", "no-such-hardware,"), "hardware"),
    ]:
        (point,) = read_points(_write(tmp_path, f"{HEADER}\n{row}\n"))
        with pytest.raises(ConfigError, match=rf"m.csv:2: {column}:"):
            point.scenario()


def _rows(path: Path) -> list[list[str]]:
    lines = path.read_text().splitlines()
    return list(csv.reader(line for line in lines if not line.startswith("#")))


def test_shipped_measurements_are_the_conversion_of_the_shared_files() -> None:
    """Each shipped file is its converter's output from the published CSV (when shared/ is
    beside the checkout, as in CI and development)."""
    if not SHARED.is_dir():
        pytest.skip("shared/reference/measurements is not beside this checkout")
    converters = {"argonne": argonne.convert, "trtllm": trtllm.convert}
    for shipped in shipped_files():
        convert = converters[shipped.stem.split("-")[0]]
        assert _rows(shipped) == list(convert(SHARED / shipped.name)), shipped.name
    counts = {p.stem: len(read_points(p)) for p in shipped_files()}
    assert counts == {
        "argonne-h100": 151,
        "argonne-sn40l": 20,
        "argonne-sn40l-ttft": 2,
        "trtllm-h100-max-throughput": 20,
    }
    table = read_points(REPO / "measurements" / "trtllm-h100-max-throughput.csv")
    assert {(p.batch, p.weights, p.kv, p.metric) for p in table} == {
        (None, "fp8", "fp8", "output_tokens_per_s")
    }
    header = (REPO / "measurements" / "trtllm-h100-max-throughput.csv").read_text()
    assert "95% of free" in header and "Converted by: python -m rdu_sim.validate.trtllm" in header


def test_the_worked_example_in_the_docs_reads() -> None:
    """docs/calibration.md's worked example is a measurement file that reads."""
    docs = (REPO / "docs" / "calibration.md").read_text()
    block = re.search(r"<!-- worked example -->\n```csv\n(.*?)```", docs, re.S)
    assert block is not None, "the worked example block is missing"
    points = _read_text(block.group(1))
    assert {p.metric for p in points} == set(METRICS)


def test_the_worked_examples_measured_rows_run_under_their_measurements_stack() -> None:
    """A worked-example row that quotes a shipped measurement names the stack the shipped row
    was measured under: an empty stack runs the hardware's default (SambaStack 2025 on SN40L),
    not SambaStudio 2024, which Argonne measured."""
    docs = (REPO / "docs" / "calibration.md").read_text()
    block = re.search(r"<!-- worked example -->\n```csv\n(.*?)```", docs, re.S)
    assert block is not None
    shipped = {
        (
            p.hardware,
            p.model,
            p.tp,
            p.batch,
            p.input_tokens,
            p.output_tokens,
            p.metric,
            p.measured,
        ): p.stack
        for path in shipped_files()
        for p in read_points(path)
    }
    quoted = 0
    for p in _read_text(block.group(1)):
        key = (p.hardware, p.model, p.tp, p.batch, p.input_tokens, p.output_tokens, p.metric)
        stack = shipped.get((*key, p.measured))
        if stack is not None:
            quoted += 1
            assert p.stack == stack, f"{p.label}: stack {p.stack!r}, measured under {stack!r}"
    assert quoted == 3


def _read_text(text: str) -> list[MeasuredPoint]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "example.csv"
        path.write_text(text)
        return read_points(path)


COLUMNS = (*REQUIRED, "measured", "measured_s", *OPTIONAL, "bogus")
CELLS = st.one_of(
    st.sampled_from(
        ["sn40l", "dgx-h100", "llama-3.2-1b", "1", "2", "auto", "0", "-1", "1e-300", "5e-324",
         "e2e_s", "ttft_s", "tpot_s", "output_tokens_per_s", "fp8", "bf16", "none", "",
         "1_000", "nan", "inf", "1e999", '"', '""', "\t", "١٢", "99999999999999999999"]
    ),
    st.text(max_size=12),
)  # fmt: skip


@settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    header=st.lists(st.sampled_from(COLUMNS), min_size=0, max_size=14),
    rows=st.lists(st.lists(CELLS, max_size=14), max_size=4),
    comment=st.booleans(),
)
def test_any_file_reads_or_fails_with_one_clean_error(
    header: list[str], rows: list[list[str]], comment: bool
) -> None:
    """Whatever the file holds, the reader returns points or raises one ConfigError naming
    the file (never another exception)."""
    lines = [",".join(header), *(",".join(cells) for cells in rows)]
    text = ("# c\n" if comment else "") + "\n".join(lines) + "\n"
    try:
        points = _read_text(text)
    except ConfigError as exc:
        assert "example.csv" in str(exc)
        return
    for point in points:
        assert point.metric in METRICS and point.measured > 0 and point.tp >= 1


def test_check_points_names_every_bad_row_up_to_a_bound(tmp_path: Path) -> None:
    """``check_points`` (rdu-sim check) names each bad row, read or resolved, in line order;
    past ``MAX_ROW_ISSUES`` the rest are counted, not listed."""
    from rdu_sim.config.errors import MAX_ROW_ISSUES
    from rdu_sim.validate.measurement_file import check_points

    bad = ROW.replace("llama-3.2-1b", "llama-9")
    path = _write(tmp_path, f"{HEADER}\n{ROW}\n{bad}\n{ROW.replace(',2,', ',x,')}\n")
    with pytest.raises(ConfigError) as caught:
        check_points(path)
    assert [(i.file, i.field) for i in caught.value.issues] == [
        (f"{path}:3", "model"),
        (f"{path}:4", "batch"),
    ]
    many = _write(tmp_path, HEADER + "\n" + f"{bad}\n" * (MAX_ROW_ISSUES + 5), "many.csv")
    with pytest.raises(ConfigError) as caught:
        check_points(many)
    issues = caught.value.issues
    assert len(issues) == MAX_ROW_ISSUES + 1
    assert issues[-1].message == "and 5 more bad row(s) not shown"
    with pytest.raises(ConfigError, match=r"m.csv:4: batch") as first:
        read_points(path)  # the reader the runs use: the first bad cell only, resolving none
    assert len(first.value.issues) == 1


def test_rows_past_the_bound_are_counted_in_their_own_files() -> None:
    """The rows past ``MAX_ROW_ISSUES`` are counted per file they lie in, each count naming
    its file, not the file of the last row shown."""
    from rdu_sim.config.errors import MAX_ROW_ISSUES, bounded

    def rows(file: str, count: int) -> list[ConfigIssue]:
        return [ConfigIssue(f"{file}:{line}", "batch", "bad") for line in range(2, count + 2)]

    shown = bounded([*rows("a.csv", MAX_ROW_ISSUES), *rows("b.csv", 3), *rows("c.csv", 2)])
    assert [(i.file, i.message) for i in shown[MAX_ROW_ISSUES:]] == [
        ("b.csv", "and 3 more bad row(s) not shown"),
        ("c.csv", "and 2 more bad row(s) not shown"),
    ]
    assert bounded(rows("a.csv", MAX_ROW_ISSUES)) == rows("a.csv", MAX_ROW_ISSUES)


def test_the_worked_examples_full_load_row_runs_at_the_context_the_docs_state() -> None:
    """The docs state the full-load row's ``max_context`` as the code builds it: its length
    (2,000), which its requests reserve in whole pages (32 of TensorRT-LLM's 64 tokens)."""
    docs = (REPO / "docs" / "calibration.md").read_text()
    block = re.search(r"<!-- worked example -->\n```csv\n(.*?)```", docs, re.S)
    assert block is not None
    full = [p for p in _read_text(block.group(1)) if p.batch is None]
    assert len(full) == 1
    prose = docs[block.end() : block.end() + 2000]
    stated = re.search(r"max_context: (\d+)", prose)
    assert stated is not None
    built = full[0].scenario().workload.serving.max_context
    assert int(stated.group(1)) == built == 2000
    assert "so 32 pages" in prose


def test_a_rows_kv_share_replaces_the_stacks_bound_whichever_it_is(tmp_path: Path) -> None:
    """A vLLM row stating its KV share: the row's kv_memory_fraction replaces vLLM's own
    bound (memory_utilization), instead of the two being refused together."""
    text = (
        "hardware,stack,model,tp,batch,input_tokens,output_tokens,metric,measured,"
        "kv_memory_fraction\n"
        "dgx-h100,vllm-2024,llama-3.1-8b,1,4,128,8,e2e_s,0.5,0.8\n"
    )
    (point,) = read_points(_write(tmp_path, text))
    assert point.settings == ["stack.memory_utilization=null", "stack.kv_memory_fraction=0.8"]
    stack = point.scenario().stack
    assert stack.memory_utilization is None and stack.kv_memory_fraction == 0.8
