"""A lone run counts the requests it cut to fit the context, in its JSON and with the reason
in its text report (a slot holds the whole sequence, so prompt + output <= max_context)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from test_api_run import FakeBackend

from rdu_sim import api
from rdu_sim.report.console import print_report

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"

ROWS = [  # arrival_s, prompt_tokens, output_tokens; max_context 4,096
    (0.0, 1000, 100),
    (0.1, 4000, 200),  # over: 4,200
    (0.2, 3000, 1096),  # exactly 4,096: fits
    (0.3, 5000, 10),  # over: the prompt alone
    (0.4, 200, 50),
]


def _run(folder: Path, max_context: int) -> tuple[dict[str, object], str]:
    (folder / "w.yaml").write_text(
        LLAMA.read_text().replace("../hw_configs/", str(ROOT / "hw_configs") + "/")
    )
    lines = ["arrival_s,prompt_tokens,output_tokens"] + [",".join(map(str, r)) for r in ROWS]
    (folder / "t.csv").write_text("\n".join(lines) + "\n")
    overrides = {"serving.trace": "t.csv", "serving.max_context": max_context}
    result = api.run(folder / "w.yaml", overrides, backend=FakeBackend())
    out = io.StringIO()
    print_report(result.summary(), Console(file=out, width=200))
    return result.to_dict(), out.getvalue()


def _row(report: str, label: str) -> str | None:
    """The value of the report's row ``label`` (None when it has none)."""
    for line in report.splitlines():
        cells = [cell.strip() for cell in line.strip("│ ").split("│")]
        if len(cells) == 2 and cells[0] == label:
            return cells[1]
    return None


def test_requests_cut_to_the_context_are_counted_with_their_reason(tmp_path: Path) -> None:
    data, report = _run(tmp_path, 4096)
    over = sum(p + o > 4096 for _, p, o in ROWS)
    assert data["requests_truncated"] == over == 2
    assert data["requests_completed"] == data["requests"] == len(ROWS)
    # (4,000, 200) keeps its prompt and 96 output tokens; (5,000, 10) keeps 4,095 and 1
    assert data["prompt_tokens_truncated"] == 5000 - 4095
    assert data["output_tokens_truncated"] == (200 - 96) + (10 - 1)
    assert data["output_tokens"] == sum(o for _, _, o in ROWS) - data["output_tokens_truncated"]
    assert _row(report, "requests truncated") == (
        "2 (prompt + output over serving.max_context, 4,096 tokens), cut to fit: 905 prompt "
        "and 113 output tokens not served"
    )


def test_a_run_that_cuts_nothing_says_nothing(tmp_path: Path) -> None:
    data, report = _run(tmp_path, 8192)
    assert data["requests_truncated"] == 0
    assert data["prompt_tokens_truncated"] == data["output_tokens_truncated"] == 0
    assert _row(report, "requests truncated") is None
    assert _row(report, "requests completed") == "5 of 5 requests"


def _workload(folder: Path, serving: str) -> Path:
    """The shipped 8B workload with its ``serving`` lengths replaced (hardware path made
    absolute)."""
    text = LLAMA.read_text().replace("../hw_configs/", str(ROOT / "hw_configs") + "/")
    text = text.replace("  max_context: 8192\n", "")
    text = text.replace("  prompt_tokens: {dist: uniform, low: 512, high: 4096}\n", "")
    text = text.replace("  output_tokens: {dist: uniform, low: 128, high: 1024}\n", serving)
    text = text.replace("requests: 200", "requests: 4")
    path = folder / "bad3.yaml"
    path.write_text(text)
    return path


EVERY_ONE_OVER = (
    "  max_context: 2048\n"
    "  prompt_tokens: {dist: fixed, value: 4000}\n"
    "  output_tokens: {dist: fixed, value: 10}\n"
)
CUT_WORDS = (
    "4 of 4 requests (100%) ask for more than serving.max_context (2,048 tokens, prompt + "
    "output; up to 4,010 asked) and were cut to fit, 7,812 prompt and 36 output tokens not "
    "served: the run measures shorter requests than the workload's; raise "
    "serving.max_context (to 4,010 to serve them whole) or shorten the prompts and outputs"
)


def test_a_run_that_cuts_every_request_warns_what_to_change(tmp_path: Path) -> None:
    """Every prompt past the context: each request is served as 2,047 + 1 tokens. The run
    says so as a warning of its kind (in its JSON's ``warnings`` and its text report), with
    how many were cut, from what to what, and what to change; a run cutting nothing, or
    fewer than ``TRUNCATED_SHARE`` of its requests, does not (the report's row says it)."""
    import warnings

    from rdu_sim.serving.requests import TRUNCATED_SHARE, TruncatedRequestsWarning

    workload = _workload(tmp_path, EVERY_ONE_OVER)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = api.run(workload, backend=FakeBackend())
    data = result.to_dict()
    assert data["requests_truncated"] == 4 and data["output_tokens"] == 4
    assert data["warnings"] == [CUT_WORDS]
    said = [str(w.message) for w in caught if w.category is TruncatedRequestsWarning]
    assert said == [f"{workload}: {CUT_WORDS}"]
    out = io.StringIO()
    print_report(result.summary(), Console(file=out, width=2000))
    assert f"warning: {CUT_WORDS}" in out.getvalue()

    assert TRUNCATED_SHARE == 0.1  # one request of the 5 below is 20%; of 20, 5%
    data, _ = _run(tmp_path, 4096)  # 2 of 5 cut
    assert [w for w in data["warnings"] if "max_context" in str(w)] != []
    few = ROWS + [(0.5 + i / 10, 100, 10) for i in range(15)]  # 2 of 20 cut: 10%, warns
    lines = ["arrival_s,prompt_tokens,output_tokens"] + [",".join(map(str, r)) for r in few]
    fewer = [*lines[:4], *lines[5:], "9.0,100,10"]  # 1 of 20 cut: 5%, the row says it
    for rows, warned in ((lines, True), (fewer, False)):
        (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
        overrides = {"serving.trace": "t.csv", "serving.max_context": 4096}
        data = api.run(tmp_path / "w.yaml", overrides, backend=FakeBackend()).to_dict()
        assert data["requests_truncated"] == (2 if warned else 1)
        assert any("serving.max_context" in w for w in data["warnings"]) is warned


def test_check_says_a_workload_whose_requests_cannot_fit_the_context(tmp_path: Path) -> None:
    """`rdu-sim check` draws the requests the run would and says the run's warning: a
    `warning:` line naming the workload, exit 0 (the run serves them, cut)."""
    from click.testing import CliRunner

    from rdu_sim.cli.main import cli

    workload = _workload(tmp_path, EVERY_ONE_OVER)
    result = CliRunner().invoke(cli, ["check", str(workload)])
    assert result.exit_code == 0, result.output
    assert f"warning: {workload}: {CUT_WORDS}" in " ".join(result.stderr.split())
    assert result.stdout.startswith("OK")
    fits = _workload(tmp_path, EVERY_ONE_OVER.replace("2048", "8192"))
    result = CliRunner().invoke(cli, ["check", str(fits)])
    assert result.exit_code == 0 and "warning" not in result.output, result.output
