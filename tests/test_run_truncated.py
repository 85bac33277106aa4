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
