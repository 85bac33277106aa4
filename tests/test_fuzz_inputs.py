"""Fuzzed inputs never give a traceback or a hang: always a clear error and exit status 2.

The corpus (tests/fuzz/corpus/, written by tests/fuzz/make_corpus.py) holds broken workloads
(wl-*, wl-trace-* with a broken request trace trace-*), broken hardware files (hw-*) and raw
junk (raw-*). The generators of each class of hostile input, property-based, are
tests/fuzz/test_fuzz_*.py. The CLI runs in subprocesses, as a
user runs it: `check` over the whole corpus in two batches (one per core), `check` file by
file and `run --set serving.requests=1` on samples, and `run` in-process on every workload
file and every bad `--set` of tests/fuzz/bad_overrides.yaml.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rdu_sim.cli.main import cli

REPO = Path(__file__).resolve().parents[1]
FUZZ = REPO / "tests" / "fuzz"
FILES = sorted((FUZZ / "corpus").glob("*.yaml"))
WORKLOAD_FILES = [f for f in FILES if f.name.startswith("wl-")]
BAD_OVERRIDES: list[str] = yaml.safe_load((FUZZ / "bad_overrides.yaml").read_text())
SHIPPED_WORKLOAD = "workloads/llama3.1-8b-1socket.yaml"
RUN_OVERRIDE = "serving.requests=1"
TIMEOUT = 60  # seconds for one CLI process; any longer is a hang


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rdu_sim.cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=TIMEOUT,
        check=False,
    )


def _assert_clean_failure(result: subprocess.CompletedProcess[str], *names: str) -> None:
    """Exit 2, every file named, `error:` lines only, no traceback."""
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert result.stderr.startswith("error: ")
    for name in names:
        assert name in result.stderr, f"{name} not named in: {result.stderr[-2000:]}"


def _sample(files: list[Path], every: int, always: tuple[str, ...] = ()) -> list[Path]:
    """Every `every`-th file plus the named ones: deterministic, all kinds represented."""
    return [f for i, f in enumerate(files) if i % every == 0 or f.stem in always]


def test_corpus_is_large_and_varied() -> None:
    assert len(FILES) >= 200
    names = " ".join(f.stem for f in FILES)
    for kind in (
        "misspell",
        "unknown-key",
        "drop-key",
        "wrong-type",
        "bad-number",
        "bad-unit",
        "nesting",
        "tag",
        "truncated",
        "huge-int",
        "garbage",
        "hardware-path",
        "raw-deep-list",
        "raw-alias-bomb",
        "raw-empty",
        "raw-random-bytes",
        "raw-python-apply-top",
        "dup-key",
        "unit-case",
        "unit-bomb",
        "long-int",
        "tiny-rate",
        "raw-sweep-alias-bomb",
        "raw-duplicate-top-keys",
        "wl-trace-arabic-digits",
        "wl-trace-latin1",
        "wl-trace-wide-field",
        "wl-trace-quoted-newline",
        "wl-trace-deep",
        "wl-trace-late-arrival",
    ):
        assert kind in names, kind
    traces = {p.name for p in (FUZZ / "corpus").glob("trace-*")}
    assert len(traces) >= 15 and {"trace-deep.jsonl", "trace-latin1.csv"} <= traces
    assert (FUZZ / "corpus" / "raw-deep-list.yaml").read_text().startswith("[" * 10_000)
    assert len(BAD_OVERRIDES) >= 30


def test_check_rejects_the_whole_corpus() -> None:
    """Two batches in parallel; every file named in stderr, none reported OK."""
    halves = [FILES[0::2], FILES[1::2]]
    commands = [
        [sys.executable, "-m", "rdu_sim.cli.main", "check", *map(_rel, half)] for half in halves
    ]
    processes = [
        subprocess.Popen(
            command,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
        for command in commands
    ]
    try:
        outputs = [process.communicate(timeout=TIMEOUT) for process in processes]
    finally:
        for process in processes:
            process.kill()
    for half, process, (stdout, stderr) in zip(halves, processes, outputs, strict=True):
        result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        _assert_clean_failure(result, *map(_rel, half))
        assert not [line for line in stdout.splitlines() if line.startswith("OK")]
        assert f"{len(half)} of {len(half)} file(s) failed the check" in stderr
        assert all(line.startswith("error: ") for line in stderr.splitlines())


PER_FILE = _sample(
    FILES,
    20,
    always=(
        "raw-deep-list",
        "raw-deep-map",
        "raw-alias-bomb",
        "raw-python-apply-top",
        "raw-empty",
        "raw-random-bytes-0",
        "raw-nul-bytes",
        "raw-sweep-alias-bomb",
        "wl-hardware-path-04",
        "wl-trace-deep",
        "wl-trace-wide-field",
    ),
)


@pytest.mark.slow
def test_check_rejects_each_file_on_its_own() -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda f: _cli("check", _rel(f)), PER_FILE))
    assert len(results) >= 15
    for path, result in zip(PER_FILE, results, strict=True):
        _assert_clean_failure(result, _rel(path))


@pytest.mark.slow
def test_run_rejects_workload_files_in_subprocesses() -> None:
    sample = _sample(
        WORKLOAD_FILES,
        20,
        always=("wl-hardware-path-00", "wl-hardware-path-09", "wl-trace-latin1", "wl-trace-nul"),
    )
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda f: _cli("run", _rel(f), "--set", RUN_OVERRIDE), sample))
    assert len(results) >= 8
    for path, result in zip(sample, results, strict=True):
        _assert_clean_failure(result, _rel(path))


@pytest.mark.timeout(TIMEOUT)
def test_run_rejects_every_workload_file() -> None:
    """In-process (fast): any exception but SystemExit(2) would be a traceback for a user."""
    runner = CliRunner()
    for path in WORKLOAD_FILES:
        result = runner.invoke(cli, ["run", _rel(path), "--set", RUN_OVERRIDE])
        assert result.exit_code == 2, (path.name, result.output[-2000:], result.exception)
        assert isinstance(result.exception, SystemExit), (path.name, result.exception)
        assert _rel(path) in result.stderr, (path.name, result.stderr[-2000:])


@pytest.mark.timeout(TIMEOUT)
def test_bad_overrides_are_refused() -> None:
    runner = CliRunner()
    for override in BAD_OVERRIDES:
        result = runner.invoke(cli, ["run", SHIPPED_WORKLOAD, "--set", override])
        assert result.exit_code == 2, (override, result.output[-2000:], result.exception)
        assert isinstance(result.exception, SystemExit), (override, result.exception)
        assert result.stderr.startswith("error: ")
        key = override.partition("=")[0].removeprefix("hw.").split(".")[0]
        assert (key or "--set") in result.stderr, (override, result.stderr)


def test_bad_overrides_in_subprocesses() -> None:
    sample = BAD_OVERRIDES[::14]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda o: _cli("run", SHIPPED_WORKLOAD, "--set", o), sample))
    for result in results:
        _assert_clean_failure(result)


def test_corpus_generator_is_deterministic(tmp_path: Path) -> None:
    """Same seed, same files, byte for byte (a small corpus, to stay quick)."""
    outs = [tmp_path / "a", tmp_path / "b"]
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(FUZZ / "make_corpus.py"),
                "--out",
                str(out),
                "--per-base",
                "2",
                "--min-files",
                "40",
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for out in outs
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=TIMEOUT)
        assert process.returncode == 0, stderr.decode(errors="replace")
    outputs = [
        {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        for out in outs
    ]
    assert len(outputs[0]) >= 40
    assert outputs[0] == outputs[1]
