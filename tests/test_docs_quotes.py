"""The docs cannot go stale: every number README.md and docs/ quote from a command
(docs/quotes.yaml) is what the command prints now, to the doc's rounding.

The check (tests/docs_quotes.py) reruns each command once in this process; the quotes of
the slow commands (the calibration suites, DeepSeek-R1's speculative prefill) run in the
slow lane. A quote that moved fails here naming its file, line, the doc's text and the
command's; `python tests/docs_quotes.py --refresh` rewrites them all.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from docs_quotes import (
    ROOT,
    QuoteError,
    Registry,
    check_file,
    load_registry,
    pattern_of,
    run,
)


@pytest.fixture(scope="module")
def printed() -> dict[str, str]:
    """What the fast lane's commands print (filled by the first test that runs them)."""
    return {}


def _stale(findings: list[object]) -> str:
    shown = "\n".join(map(str, findings))
    return f"stale quotes (run `python tests/docs_quotes.py --refresh`):\n{shown}"


def test_every_quoted_number_is_what_its_command_prints(printed: dict[str, str]) -> None:
    findings = run(lane="fast", outputs=printed)
    assert not findings, _stale(findings)


@pytest.mark.slow
def test_every_slow_quoted_number_is_what_its_command_prints() -> None:
    findings = run(lane="slow")
    assert not findings, _stale(findings)


def _registry_of(file: str) -> Registry:
    registry = load_registry()
    return Registry(registry.commands, [q for q in registry.quotes if q.file == file])


def test_a_changed_quoted_number_fails_and_refresh_restores_it(
    tmp_path: Path, printed: dict[str, str]
) -> None:
    """docs/serving.md's speculation figures and docs/gpu.md's compare block: a number
    changed in the doc fails the check (file, line, both texts); --refresh restores the
    doc byte for byte."""
    run(lane="fast", outputs=printed)  # the commands' outputs (already run: no cost)
    for file, old, new in (
        ("docs/serving.md", "3.36), per-user ", "3.36), per-user 9"),
        (
            "docs/gpu.md",
            "│ kernel calls per step" + " " * 28 + "│" + " " * 50 + "3 │",
            "│ kernel calls",
        ),
    ):
        registry = _registry_of(file)
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / file, tmp_path / file)
        original = (tmp_path / file).read_text()
        assert old in original
        (tmp_path / file).write_text(original.replace(old, new, 1))
        check = {"root": tmp_path, "registry": registry, "outputs": printed, "lane": "fast"}
        findings = run(**check)  # the fast lane's quotes: no command runs twice
        assert findings and all(f.file == file for f in findings)
        line = 1 + original[: original.index(old)].count("\n")
        assert any(abs(f.line - line) <= 1 for f in findings)
        assert run(**check, refresh=True)
        assert (tmp_path / file).read_text() == original
        assert run(**check) == []


def test_a_quote_whose_words_are_gone_is_an_error(printed: dict[str, str]) -> None:
    run(lane="fast", outputs=printed)
    registry = _registry_of("docs/serving.md")
    text = (ROOT / "docs/serving.md").read_text().replace("without speculation.", "alone.")
    with pytest.raises(QuoteError, match=r"the quoted words .* are not found"):
        for quote in registry.quotes:
            check_file(text, "docs/serving.md", [quote], printed, registry.commands)


def test_quoted_words_match_across_a_wrapped_line() -> None:
    registry = load_registry()
    quote = next(
        q for q in registry.quotes if q.text and "per-user {user} tokens/s (p50)" in q.text
    )
    pattern = pattern_of(quote)
    wrapped = (
        "batch 1: `accepted_tokens_per_step` 3.36 (formula\n  3.36), per-user 428 tokens/s "
        "(p50) against 176 without speculation."
    )
    match = pattern.search(wrapped)
    assert match is not None and match.group("user") == "428" and match.group("plain") == "176"
