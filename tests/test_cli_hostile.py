"""Every class of hostile input or environment ends `check`, `run`, `step`, `sweep` and `plot`
in a clear `error:` and exit status 2 within seconds, with no traceback, and loses nothing
already computed.

Classes (issue 16): unit strings, extreme positive numbers, overrides and error messages,
request traces, writes (a path below a file, a device that is full, a missing folder), the
sweep database (damaged, foreign, full mid-sweep), duplicate YAML keys, and the order of
sweep exports. Tests run as root, which ignores permission bits: a full disk is /dev/full
or SQLite's page limit, an unwritable folder a path below a regular file.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import rdu_sim.sweep.store as store_module
from rdu_sim.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
HW = ROOT / "hw_configs" / "sn40l.yaml"
SECONDS = 5.0  # "within a few seconds", for each command in-process
POOL_SECONDS = 20.0  # a sweep that starts worker processes: their start is the machine's load


@pytest.fixture(autouse=True)
def _outside_the_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command here runs in a scratch folder: one that succeeds where a failure was
    expected writes its default output (a plot's latency.png) there, not into the checkout."""
    monkeypatch.chdir(tmp_path)


def invoke(*args: str | Path, seconds: float = SECONDS) -> Result:
    start = time.perf_counter()
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert time.perf_counter() - start < seconds, args
    return result


def clean_failure(result: Result, *words: str, lines: int | None = 1) -> str:
    """Exit 2 by SystemExit (no exception escaped), no traceback, `lines` error lines (the
    last lines of stderr; a sweep's plan and progress lines may come before); returns
    stderr."""
    assert result.exit_code == 2, (result.exit_code, result.output[-1500:], result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    stderr = result.stderr
    assert "Traceback" not in stderr
    got = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert got and stderr.splitlines()[-len(got) :] == got, stderr
    if lines is not None:
        assert len(got) == lines, stderr
    for word in words:
        assert word in stderr, (word, stderr)
    return stderr


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A workload and its hardware file side by side, to break at will."""
    (tmp_path / "hw.yaml").write_text(HW.read_text())
    text = LLAMA.read_text()
    hardware_line = next(line for line in text.splitlines() if line.startswith("hardware:"))
    (tmp_path / "wl.yaml").write_text(text.replace(hardware_line, "hardware: hw.yaml"))
    return tmp_path


def spec(tmp_path: Path, body: str, base: Path = LLAMA) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(f"base: {base}\n" + textwrap.dedent(body).lstrip("\n"))
    return path


SYNTHETIC = """
axes:
  serving.batch_slots: [1, 2, 3, 4, 5, 6, 7, 8]
metrics: [decode_tokens_per_s, ttft_s.p50]
evaluator: {name: synthetic, options: {fail_when: {serving.batch_slots: 3}}}
"""


# --- empty paths ---


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("run", ""), "WORKLOAD"),
        (("step", " "), "WORKLOAD"),
        (("check", ""), "FILES"),
        (("sweep", ""), "SPEC"),
        (("plan", ""), "SPEC"),
        (("run", LLAMA, "--out", ""), "--out"),
        (("validate", "--full", ""), "--full"),
    ],
)
def test_an_empty_path_names_the_argument_not_the_working_folder(
    args: tuple[str | Path, ...], named: str
) -> None:
    """click reads "" as Path(""), the working folder: `run ""` said `.: is a directory`."""
    stderr = clean_failure(invoke(*args))
    assert stderr == f"error: {named}: an empty path names nothing; give a path\n"


# --- units ---


def test_bits_are_bits_and_an_ambiguous_case_is_refused(tree: Path) -> None:
    result = invoke("step", LLAMA, "--set", "hw.system.intra_node_link.bandwidth=400 Gb/s")
    assert result.exit_code == 0, result.output
    hw = tree / "hw.yaml"
    hw.write_text(hw.read_text().replace("bandwidth: 1.8 TB/s", "bandwidth: 1.8 tb/s", 1))
    for args in (("check", hw), ("run", tree / "wl.yaml")):
        clean_failure(invoke(*args), "'TB/s' (terabytes per second)", "'Tb/s'", lines=None)
    clean_failure(
        invoke("plot", "roofline", LLAMA, "--set", "hw.socket.hbm.bandwidth=2 gb/s"),
        "ambiguous",
        lines=None,
    )


def test_a_backtracking_unit_string_is_refused_at_once(tree: Path) -> None:
    hw = tree / "hw.yaml"
    hw.write_text(hw.read_text().replace("latency: 500 ns", "latency: 1" + " " * 50_000 + "x", 1))
    for args in (("check", hw), ("run", tree / "wl.yaml")):
        clean_failure(invoke(*args), "socket.hbm.latency", "at most 64", lines=None)


# --- extreme but positive numbers ---


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("hw.socket.hbm.bandwidth=1 MB/s", "serving clock's range"),
        ("hw.socket.pcu.peak_flops=1000 FLOP/s", "serving clock's range"),
        ("hw.socket.pcu.vector_flops=5e-324", "must be at least 1 FLOP/s, got 4.94e-324 FLOP/s"),
        ("hw.socket.pcu.count=1", "leaves no usable PCU"),
        ("serving.arrival={process: poisson, rate: 1e-7}", "serving.arrival.rate"),
    ],
)
def test_extreme_numbers_end_in_one_clear_error(override: str, words: str) -> None:
    result = invoke("run", LLAMA, "--set", override, "--set", "serving.requests=4")
    clean_failure(result, words, lines=None)


# --- overrides and error messages ---


@pytest.mark.parametrize(
    "value",
    ["[" * 1000 + "]" * 1000, "9" * 5000, "0x" + "f" * 5000, ":".join(["59"] * 3000)],
)
def test_hostile_set_values(value: str) -> None:
    for command in ("run", "step"):
        clean_failure(invoke(command, LLAMA, "--set", f"serving.requests={value}"), "--set")
    # plot latency sets serving.requests itself (after --set): a field it leaves alone
    clean_failure(invoke("plot", "latency", LLAMA, "--set", f"serving.seed={value}"), "--set")


@pytest.mark.parametrize(
    ("overrides", "blamed"),
    [
        (["serving.batch_slots=4", "serving=1"], "serving"),  # the field itself, not a child
        (["serving.requests=4", "serving.batch_slots=x"], "serving.batch_slots"),
        (["serving={requests: 4}", "serving.arrival={rate: 0}"], "serving.arrival"),
    ],
)
def test_an_error_names_the_set_that_caused_it(overrides: list[str], blamed: str) -> None:
    args = [part for override in overrides for part in ("--set", override)]
    stderr = clean_failure(invoke("run", LLAMA, *args), lines=None)
    assert all(f"(from --set {blamed})" in line for line in stderr.splitlines()), stderr


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("kv.policy=nope", "kv.policy"),  # the KV policy's registry
        ("model=nope", "model"),  # the model presets
        ("parallelism.tp=3", "parallelism.tp"),  # tp against the model's heads
        ("serving.max_context=1000000", "serving.max_context"),  # against the model's context
        ("hardware=nope", "hardware"),  # the hardware file
        ("serving.batch_slots=-1", "serving.batch_slots"),  # a pydantic issue, for comparison
    ],
)
def test_a_rule_after_validation_names_the_set_as_validation_does(
    override: str, field: str
) -> None:
    """A rule checked after validation (across files) at a field a --set gave says so and
    gives no line, as a pydantic issue does: the file's line holds the value it replaced."""
    stderr = clean_failure(invoke("run", LLAMA, "--set", override))
    where = f"error: {LLAMA}: {field}: "  # no ':LINE'
    assert stderr.startswith(where) and stderr.rstrip().endswith(f"(from --set {field})"), stderr


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("serving.batch_slots=\udcff", "serving.batch_slots"),
        ("serving.\udcff=1", "serving.\\udcff"),
    ],
)
def test_an_override_of_bytes_that_are_not_utf8_names_the_set(override: str, field: str) -> None:
    """A shell passes bytes; Python decodes those that are not UTF-8 to surrogates (\\udcff),
    which failed later as "text that is not valid Unicode", naming neither --set nor the field."""
    stderr = clean_failure(invoke("run", LLAMA, "--set", override), "--set", "not valid UTF-8")
    assert field in stderr, stderr


def test_an_alias_bomb_in_a_sweep_axis_is_refused_cheaply(tmp_path: Path) -> None:
    laughs = ["x0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    laughs += [f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    path = spec(tmp_path, "\n".join(laughs) + "\naxes:\n  serving.batch_slots: *a8\n")
    for args in (("check", path), ("sweep", path, "--workers", "1")):
        clean_failure(invoke(*args), "aliases are expanded", lines=None)


def test_a_huge_integer_is_never_printed(tmp_path: Path) -> None:
    path = spec(tmp_path, "axes:\n  serving.batch_slots: [" + "9" * 3000 + "]\n")
    stderr = clean_failure(invoke("sweep", path, "--workers", "1"), "at most 40", lines=None)
    assert len(stderr) < 2000
    hex_text = spec(tmp_path, "axes:\n  serving.batch_slots: [0x" + "f" * 3000 + "]\n")
    stderr = clean_failure(invoke("sweep", hex_text, "--workers", "1"), "integer", lines=None)
    assert len(stderr) < 2000


# --- request traces ---

TRACES = {
    "digits.csv": "prompt_tokens,output_tokens\n١٢,5\n",
    "newline.csv": 'prompt_tokens,output_tokens\n"1\n2",5\n',
    "wide.csv": 'prompt_tokens,output_tokens,note\n1,2,"' + "x" * 200_000 + '"\n',
    "deep.jsonl": "[" * 100_000 + "]" * 100_000 + "\n",
    "late.csv": "arrival_s,prompt_tokens,output_tokens\n1e9,1,1\n",
}


@pytest.mark.parametrize("name", [*TRACES, "latin1.csv", "missing.csv", "fifo.csv"])
def test_hostile_traces(tree: Path, name: str) -> None:
    trace = tree / name
    if name == "latin1.csv":
        trace.write_bytes("prompt_tokens,output_tokens\n1,2 caf\u00e9\n".encode("latin-1"))
    elif name == "fifo.csv":
        os.mkfifo(trace)
    elif name in TRACES:
        trace.write_text(TRACES[name])
    workload = tree / "wl.yaml"
    text = workload.read_text().replace("serving:\n", f"serving:\n  trace: {name}\n", 1)
    workload.write_text(text)
    for command in ("check", "run"):
        clean_failure(invoke(command, workload), str(tree), lines=None)
    sweep_spec = spec(tree, "axes:\n  serving.batch_slots: [1, 2]\n", base=workload)
    clean_failure(invoke("sweep", sweep_spec, "--db", tree / "s.sqlite"), str(tree), lines=None)
    assert not (tree / "s.sqlite").exists()  # refused before anything ran


# --- JSON inputs: a model's config.json, a run's JSON for plot ---

JSONS = {
    "digits": '{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}",
    "deep": "[" * 100_000 + "]" * 100_000,
    "nan": '{"model_type": "llama", "hidden_size": NaN}',
    "latin1": b'{"model_type": "caf\xe9"}',
}


@pytest.mark.parametrize("name", sorted(JSONS))
def test_hostile_json_inputs(tree: Path, name: str) -> None:
    path = tree / "config.json"
    payload = JSONS[name]
    path.write_bytes(payload if isinstance(payload, bytes) else payload.encode())
    clean_failure(invoke("inspect", "model", path), str(path))
    workload = tree / "wl.yaml"
    text = workload.read_text().replace("model: llama-3.1-8b", "model: {config_json: config.json}")
    workload.write_text(text)
    clean_failure(invoke("run", workload), str(path), lines=None)
    clean_failure(invoke("plot", "capacity", path, "-o", tree / "x.png"), str(path))


# --- writes ---


@pytest.fixture
def blocker(tmp_path: Path) -> Path:
    """A regular file, so that a path below it cannot be created (ENOTDIR, even as root)."""
    path = tmp_path / "a-file"
    path.write_text("x")
    return path


def full_disk(folder: Path, name: str) -> Path:
    """A file name with the right suffix on a full disk: a link to /dev/full (ENOSPC)."""
    link = folder / name
    link.symlink_to("/dev/full")
    return link


def test_run_out_that_cannot_be_written_keeps_the_report(blocker: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    full_disk(out, "result.json")  # found only when written
    result = invoke("run", LLAMA, "--set", "serving.requests=2", "--json", "--out", out)
    clean_failure(result, str(out / "result.json"), "the report above is complete")
    assert '"decode_tokens_per_s"' in result.stdout  # printed before the failed write
    full = Path("/dev/full")
    below = (blocker / "out", blocker / "deeper" / "out")
    for target, there in [(blocker, blocker), (full, full), *((b, blocker) for b in below)]:
        result = invoke("run", LLAMA, "--set", "serving.requests=2", "--out", target)
        clean_failure(result, f"{target}: cannot write: {there} exists and is not a folder")
        assert result.stdout == ""  # refused before simulating


def test_run_out_is_one_set_a_full_disk_leaves_the_older_one_whole(tmp_path: Path) -> None:
    """The disk fills at --out's last file: result.json was replaced and the CSVs were an
    older run's, and the error did not say so. The three are written as one set: all are the
    older run's still, no temporary file is left, and the error line says none was written."""
    out = tmp_path / "out"
    out.mkdir()
    for name in ("result.json", "requests.csv"):
        (out / name).write_text(f"older {name}\n")
    full_disk(out, "timeseries.csv")
    result = invoke("run", LLAMA, "--set", "serving.requests=2", "--json", "--out", out)
    clean_failure(
        result,
        f"{out / 'timeseries.csv'}: cannot write: No space left on device (none of result.json, "
        f"requests.csv, timeseries.csv in {out} was written: they are replaced together or "
        "not at all) (the report above is complete)",
    )
    assert '"decode_tokens_per_s"' in result.stdout
    for name in ("result.json", "requests.csv"):
        assert (out / name).read_text() == f"older {name}\n"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["result.json", "requests.csv", "timeseries.csv"]
    )


def test_a_temporary_file_a_killed_writer_left_is_removed_by_the_next(tmp_path: Path) -> None:
    """A writer killed outright leaves its temporary file (a 107 MB `.tr.json.*.tmp`). The
    next write of the same target removes those of its host whose process is gone, and
    leaves a live process's, another host's and any other name alone."""
    import socket

    from rdu_sim.report.files import write_file

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    stale = tmp_path / f".tr.json.{host}.{gone.pid}.abc123.tmp"
    kept = [
        tmp_path / f".tr.json.{host}.1.abc123.tmp",  # init: alive
        tmp_path / f".tr.json.another-host.{gone.pid}.abc123.tmp",
        tmp_path / ".tr.json.abc123.tmp",  # an older rdu-sim's name: whose, unknown
        tmp_path / f".other.json.{host}.{gone.pid}.abc123.tmp",
    ]
    for path in (stale, *kept):
        path.write_text("partial")
    write_file(tmp_path / "tr.json", lambda handle: handle.write("{}"))
    assert (tmp_path / "tr.json").read_text() == "{}"
    assert not stale.exists() and all(path.exists() for path in kept)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["tr.json", *(p.name for p in kept)]
    )


@pytest.mark.parametrize("trace", ["result.json", "requests.csv", "timeseries.csv"])
def test_run_outputs_that_are_one_file_are_refused_before_anything_runs(
    tmp_path: Path, trace: str
) -> None:
    """`run --out cf --trace cf/result.json`: the trace replaced the result, exit 0."""
    out = tmp_path / "cf"
    result = invoke(
        "run", LLAMA, "--set", "serving.requests=2", "--out", out, "--trace", out / trace
    )
    clean_failure(result, f"{out / trace}: --trace: is also written by --out; write elsewhere")
    assert result.stdout == "" and not out.exists()


def test_run_out_that_is_a_broken_link_is_named_as_one(tmp_path: Path) -> None:
    """--out a link to a folder that is gone (or a folder below one): not "exists and is
    not a folder" (it is a link to nothing), and said before anything runs."""
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "moved")
    for target in (link, link / "sub"):
        result = invoke("run", LLAMA, "--set", "serving.requests=2", "--out", target)
        words = f"{link} is a link to '{tmp_path / 'moved'}', which does not exist"
        clean_failure(result, f"{target}: cannot write: {words}")
        assert result.stdout == ""  # refused before simulating
    assert not (tmp_path / "moved").exists()


def test_out_creates_missing_folders_and_leaves_no_partial_files(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b"
    assert invoke("run", LLAMA, "--set", "serving.requests=2", "--out", out).exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "requests.csv",
        "result.json",
        "timeseries.csv",
    ]


@pytest.mark.parametrize(
    "args",
    [
        ("run", "--trace", "chat.csv"),  # a Perfetto trace over the request trace replayed
        ("run", "--out", "."),  # requests.csv written over a trace of that name
        ("run", "--trace", "wl.yaml"),
        ("run", "--trace", "hw.yaml"),
        ("step", "--trace", "chat.csv"),
        ("inspect graph", "--dot", "wl.yaml"),
    ],
)
def test_an_output_never_replaces_an_input(
    tree: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    command, option, target = args
    trace = "requests.csv" if option == "--out" else "chat.csv"
    (tree / trace).write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,200,20\n")
    workload = tree / "wl.yaml"
    workload.write_text(workload.read_text().replace("serving:\n", f"serving:\n  trace: {trace}\n"))
    before = {path.name: path.read_bytes() for path in tree.iterdir()}
    monkeypatch.chdir(tree)
    result = invoke(*command.split(), "wl.yaml", option, target)
    clean_failure(result, "is one of the", "inputs; write elsewhere")
    assert {path.name: path.read_bytes() for path in tree.iterdir()} == before


@pytest.mark.parametrize("target", ["chat.csv", "spec.csv", "db.csv"])
def test_a_sweep_export_never_replaces_an_input(
    tree: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    (tree / "chat.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n")
    workload = tree / "wl.yaml"
    workload.write_text(workload.read_text().replace("serving:\n", "serving:\n  trace: chat.csv\n"))
    path = spec(tree, "axes:\n  serving.batch_slots: [1, 2]\n", base=workload)
    if target == "spec.csv":  # a spec named like an export
        target = path.rename(tree / target).name
    before = {p.name: p.read_bytes() for p in tree.iterdir()}
    monkeypatch.chdir(tree)
    result = invoke(
        "sweep",
        target if target == "spec.csv" else path,
        "--export",
        target,
        "--db",
        target if target == "db.csv" else "s.sqlite",  # the export would replace every row
        "--workers",
        "1",
        "--no-progress",
    )
    clean_failure(result, "is one of the sweep's inputs")
    assert {p.name: p.read_bytes() for p in tree.iterdir()} == before  # nothing ran


def test_a_cluster_s_out_never_replaces_its_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "requests.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n")
    (tmp_path / "c.yaml").write_text(
        f"name: c\npools:\n  serve: {{workload: {LLAMA}, replicas: 1}}\n"
        "router: {policy: least_outstanding}\ntraffic: {trace: requests.csv}\n"
        "slo: {ttft: 500 ms, tpot: 40 ms, attainment: 0.95}\n"
    )
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    monkeypatch.chdir(tmp_path)
    clean_failure(invoke("run", "c.yaml", "--out", "."), "is one of the run's inputs")
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before


def test_trace_and_dot_and_plot_outputs(blocker: Path, tmp_path: Path) -> None:
    for target in (blocker / "t.json", Path("/dev/full")):
        result = invoke("step", LLAMA, "--trace", target, "--json")
        clean_failure(result, "cannot write")
        assert '"step_s"' in result.stdout
        if target == Path("/dev/full"):  # found only in writing: after the step's report
            clean_failure(result, "No space left on device (the report above is complete)")
        clean_failure(invoke("inspect", "graph", LLAMA, "--dot", target), "cannot write")
    run_json = tmp_path / "run.json"
    result = invoke("run", LLAMA, "--set", "serving.requests=2", "--json")
    run_json.write_text(result.stdout)
    for target in (blocker / "x.png", full_disk(tmp_path, "x.png")):
        clean_failure(invoke("plot", "capacity", run_json, "-o", target), "cannot write")


def test_sweep_export_and_db_paths(blocker: Path, tmp_path: Path) -> None:
    path = spec(tmp_path, SYNTHETIC)
    clean_failure(invoke("sweep", path, "--db", blocker / "x.sqlite"), "not a folder")
    db = tmp_path / "r.sqlite"
    # an export below a file is refused before anything runs (it was found after the sweep)
    result = invoke("sweep", path, "--db", db, "--workers", "1", "--export", blocker / "x.csv")
    clean_failure(result, f"{blocker / 'x.csv'}: cannot write: {blocker} exists and is not a")
    assert not db.exists() and result.stdout == ""
    # a full disk is found only when written: the rows are kept, and the error says so
    target = full_disk(tmp_path, "x.csv")
    result = invoke("sweep", path, "--db", db, "--workers", "1", "--export", target)
    clean_failure(result, "cannot write", f"the rows are kept in {db}")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM results").fetchone() == (8,)


def test_stdout_on_a_full_disk() -> None:
    """A subprocess: the output itself fails (`> /dev/full`), said once, exit 2."""
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "rdu_sim.cli.main", "check", str(HW)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 2
    assert result.stderr == "error: <stdout>: No space left on device\n"


def test_stdout_on_a_disk_that_fills_mid_write(tmp_path: Path) -> None:
    """A file-size limit reached inside a flush (`ulimit -f`, a disk filling): write(2) takes
    part, and Python's buffered stdout dropped the rest without an error (a cut JSON, exit
    0). The limit falls 5.5 KB short of the schema's 71 KB, inside one buffer's tail."""
    import resource

    schema = invoke("schema", "workload").output.encode()
    limit = len(schema) - 5500
    out = tmp_path / "schema.json"
    with out.open("wb") as sink:
        result = subprocess.run(
            [sys.executable, "-m", "rdu_sim.cli.main", "schema", "workload"],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
            # no bytecode written: under the limit a cached module would be cut short too
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
        )
    assert out.stat().st_size == limit
    assert (result.returncode, result.stderr) == (2, "error: <stdout>: File too large\n")


def _with_stdout(stdout: int | None, *args: str, close: bool = False) -> tuple[int, str]:
    """Run the CLI in a subprocess with standard output `stdout` (closed in the child when
    `close`); its status and stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rdu_sim.cli.main", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: os.close(1)) if close else None,
    )
    _, stderr = proc.communicate(timeout=60)
    return proc.returncode, stderr


@pytest.mark.parametrize(
    "args",
    [
        ("check", str(HW)),
        ("schema", "workload"),
        ("inspect", "model", "llama-3.1-8b"),
        ("examples",),
    ],
)
def test_stdout_a_pipe_nobody_reads(args: tuple[str, ...]) -> None:
    """A pipe whose reader is gone (`| head -1` once head has left): no failure, so nothing
    is said, and the status is SIGPIPE's (141, as `cat` under head), whether the command
    prints through click or through rich (whose own answer is a silent exit 1, what a
    sweep's failed points exit with). It printed `error: <stdout>: Broken pipe`, exit 2."""
    read, write = os.pipe()
    os.close(read)
    try:
        status, stderr = _with_stdout(write, *args)
    finally:
        os.close(write)
    assert (status, stderr) == (141, ""), stderr


def test_a_sweeps_export_is_written_though_stdouts_reader_left(tmp_path: Path) -> None:
    """`sweep --export x.csv | head -1`: the reader leaving ends the command (141), and the
    export is already written (it was skipped, the table printed first)."""
    path, db, out = spec(tmp_path, SYNTHETIC), tmp_path / "r.sqlite", tmp_path / "x.csv"
    read, write = os.pipe()
    os.close(read)
    try:
        args = ("sweep", str(path), "--db", str(db), "--workers", "1", "--no-progress")
        status, stderr = _with_stdout(write, *args, "--export", str(out))
    finally:
        os.close(write)
    assert status == 141 and "error" not in stderr, stderr
    with out.open(newline="") as rows:
        assert len(list(csv.reader(rows))) == 1 + 8  # a header, every point


@pytest.mark.parametrize("where", ["full", "gone"])
def test_a_runs_files_are_written_though_stdout_fails(tmp_path: Path, where: str) -> None:
    """`run --out DIR --trace FILE > /dev/full` (or `| true`): the report was printed first
    and its failure ended the command, so neither the --out files nor the trace were
    written. Now they are, then the failure ends it as before (2 naming <stdout>, or 141)."""
    out, trace = tmp_path / "out", tmp_path / "tr.json"
    args = ("run", str(LLAMA), "--set", "serving.requests=4", "--out", str(out))
    args += ("--trace", str(trace))
    if where == "full":
        with open("/dev/full", "w") as full:
            status, stderr = _with_stdout(full.fileno(), *args)
        assert (status, stderr) == (2, "error: <stdout>: No space left on device\n")
    else:
        read, write = os.pipe()
        os.close(read)
        try:
            status, stderr = _with_stdout(write, *args)
        finally:
            os.close(write)
        assert (status, stderr) == (141, "")
    names = ["requests.csv", "result.json", "timeseries.csv"]
    assert sorted(p.name for p in out.iterdir()) == names
    assert json.loads((out / "result.json").read_text())["requests"] == 4
    assert b"traceEvents" in trace.read_bytes()


def _with_stderr(stderr: int, *args: str) -> tuple[int, str]:
    """Run the CLI in a subprocess with standard error `stderr`; its status and stdout."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rdu_sim.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    stdout, _ = proc.communicate(timeout=120)
    return proc.returncode, stdout


def _with_failing_stderr(where: str, *args: str) -> tuple[int, str]:
    """Run the CLI with standard error ``full`` (/dev/full) or ``gone`` (a pipe whose
    reader left); its status and stdout."""
    if where == "full":
        with open("/dev/full", "w") as full:
            return _with_stderr(full.fileno(), *args)
    read, write = os.pipe()
    os.close(read)
    try:
        return _with_stderr(write, *args)
    finally:
        os.close(write)


@pytest.mark.parametrize("where", ["full", "gone"])
def test_a_sweep_whose_stderr_fails_runs_and_exports_and_says_so_by_its_status(
    tmp_path: Path, where: str
) -> None:
    """Standard error that cannot take the plan line and the progress (`2>/dev/full`, or
    `2>&1 | head -1` once head has left): the sweep stopped at its first line with status
    1 (a point's failure) and ran nothing, or after its points without its export. Now every
    point runs, the export and stdout's table are written, and the status says what was
    lost: 2 for a full stderr (as for a full stdout; a point failed here too, but its
    warning is lost: never 1), 141 for a reader that left (as for stdout's)."""
    path, db, out = spec(tmp_path, SYNTHETIC), tmp_path / "r.sqlite", tmp_path / "x.csv"
    args = ("sweep", str(path), "--db", str(db), "--workers", "1", "--export", str(out))
    status, stdout = _with_failing_stderr(where, *args)
    assert status == (2 if where == "full" else 141), stdout
    assert "ran 8 points" in stdout and f"wrote 8 rows to {out}" in stdout
    with out.open(newline="") as rows:
        assert len(list(csv.reader(rows))) == 1 + 8
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM results").fetchone() == (8,)


@pytest.mark.parametrize("where", ["full", "gone"])
def test_a_calibration_whose_stderr_fails_fits_and_writes_and_says_so_by_its_status(
    tmp_path: Path, where: str
) -> None:
    """Standard error that cannot take the progress line of each evaluation: the fit goes
    on, its overlay, fit.json and stdout's JSON are written, and the status says what was
    lost (2 for a full stderr, 141 for a reader that left), as a sweep's does. The line
    went to Python's stderr unguarded: the fit stopped at its first evaluation."""
    rows = [f"sn40l,llama-3.2-1b,1,{b},64,{o},e2e_s,{0.01 * o}" for b, o in ((1, 16), (2, 8))]
    measured = tmp_path / "m.csv"
    head = "hardware,model,tp,batch,input_tokens,output_tokens,metric,measured"
    measured.write_text("\n".join([head, *rows]) + "\n")
    out = tmp_path / "fitted"
    fit = "sambastack-2025:stack.host.serial_per_step=0:1ms"
    args = ("calibrate", str(measured), "--fit", fit, "--max-evaluations", "1")
    args += ("-o", str(out), "--json")
    status, stdout = _with_failing_stderr(where, *args)
    assert status == (2 if where == "full" else 141), stdout
    fitted = json.loads(stdout)
    assert fitted["evaluations"] >= 1
    assert {"fit.json", *fitted["files"]} <= {p.name for p in out.iterdir()}


def test_stdout_closed() -> None:
    """`>&-`: Python starts with no standard output (sys.stdout is None); said, exit 2."""
    status, stderr = _with_stdout(None, "check", str(HW), close=True)
    assert (status, stderr) == (2, "error: <stdout>: Bad file descriptor\n")


# --- the sweep database ---


@pytest.fixture
def swept(tmp_path: Path) -> tuple[Path, Path]:
    path, db = spec(tmp_path, SYNTHETIC), tmp_path / "r.sqlite"
    result = invoke("sweep", path, "--db", db, "--workers", "1", "--no-progress")
    assert result.exit_code == 1, result.output  # one point fails on purpose
    return path, db


def test_a_database_damaged_in_the_middle(swept: tuple[Path, Path]) -> None:
    path, db = swept
    data = bytearray(db.read_bytes())
    rng = random.Random(16)
    for i in range(len(data) // 4, 3 * len(data) // 4):
        data[i] = rng.randrange(256)
    db.write_bytes(bytes(data))
    clean_failure(invoke("sweep", path, "--db", db), str(db), "damaged")
    clean_failure(invoke("plot", "throughput", db), str(db), "damaged")


def test_a_damaged_page_behind_a_valid_header_is_refused_at_open(
    swept: tuple[Path, Path],
) -> None:
    """A page of 0xff behind a valid header: SQLite's quick_check at open refuses it, naming
    the file and the page, with the way out, before any point runs (it was found when the
    sweep stored its first point, after simulating every one); a plot refuses it too."""
    path, db = swept
    data = bytearray(db.read_bytes())
    assert len(data) >= 3 * 4096
    data[8192 : 8192 + 4096] = b"\xff" * 4096
    db.write_bytes(bytes(data))
    more = spec(path.parent, SYNTHETIC.replace("[1, 2, 3, 4, 5, 6, 7, 8]", "[9, 10]"))
    stderr = clean_failure(
        invoke("sweep", more, "--db", db, "--no-progress"),
        f"error: {db}: damaged (sqlite's quick_check: *** in database main *** Page 3: ",
        "move it aside (or use another database file) and rerun",
    )
    assert "to run" not in stderr and "cannot store" not in stderr
    clean_failure(invoke("plot", "sweep", db), "damaged (sqlite's quick_check", "move it aside")


@pytest.mark.parametrize("table", ["results", "meta"])
def test_a_foreign_results_table(tmp_path: Path, table: str) -> None:
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute(f"CREATE TABLE {table} (id INTEGER, score REAL)")
    path = spec(tmp_path, SYNTHETIC)
    own = {"results": "key, sweep, overrides, config, metrics, status, error, version, ...",
           "meta": "name, value"}[table]  # fmt: skip
    words = (
        f"holds a '{table}' table that is not a sweep's (without the column(s): {own}; with "
        "column(s) a sweep's has not: id, score)"
    )
    clean_failure(invoke("sweep", path, "--db", db), words)
    clean_failure(invoke("plot", "throughput", db), words)
    with sqlite3.connect(db) as conn:  # untouched
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert names == {table}


def test_a_results_table_missing_a_column_names_it(tmp_path: Path) -> None:
    """A sweep's results table without its metrics column: the message names it (it listed
    the eight first columns it has)."""
    from rdu_sim.sweep.store import COLUMNS

    db = tmp_path / "cut.sqlite"
    with sqlite3.connect(db) as conn:
        kept = ", ".join(c for c in COLUMNS if c != "metrics")
        conn.execute(f"CREATE TABLE results ({kept})")
    conn.close()
    clean_failure(
        invoke("plot", "sweep", db),
        "holds a 'results' table that is not a sweep's (without the column(s): metrics)",
    )


def test_a_database_of_another_tools_tables_is_left_alone(tmp_path: Path) -> None:
    """A SQLite file with neither a results nor a meta table is another tool's: a sweep
    refuses it and adds nothing to it (an empty file is a new database)."""
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE scores (id INTEGER, score REAL)")
    path = spec(tmp_path, SYNTHETIC)
    words = "holds another tool's tables (scores), not a sweep's; use another database file"
    clean_failure(invoke("sweep", path, "--db", db), words)
    with sqlite3.connect(db) as conn:  # untouched
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert names == {"scores"}


def test_a_database_path_that_is_a_dangling_link_is_named_as_one(tmp_path: Path) -> None:
    """A --db link to a file that is gone is named as a broken link, for a sweep and a plot,
    and nothing is made at the link's target."""
    db, target = tmp_path / "results.sqlite", tmp_path / "moved" / "results.sqlite"
    db.symlink_to(target)
    path = spec(tmp_path, SYNTHETIC)
    words = f"a link to '{target}', which does not exist"
    sweep = invoke("sweep", path, "--db", db, "--no-progress")
    clean_failure(sweep, f"{db}: cannot open the database: {words}")
    clean_failure(invoke("plot", "sweep", db), f"{db}: {words}")
    clean_failure(invoke("run", db), f"{db}: {words}")
    assert not target.parent.exists() and db.is_symlink()


def test_a_database_link_to_a_file_not_made_yet_makes_it_there(tmp_path: Path) -> None:
    """A --db link to a database on another disk, before its first run: the folder the link
    points into exists, so the sweep makes the database there (SQLite writes through the
    link), as a link to an existing database is opened through it."""
    db, target = tmp_path / "results.sqlite", tmp_path / "disk" / "results.sqlite"
    target.parent.mkdir()
    db.symlink_to(target)
    body = "axes: {serving.batch_slots: [1, 2]}\nevaluator: {name: synthetic}\n"
    sweep = invoke("sweep", spec(tmp_path, body), "--db", db, "--no-progress")
    assert sweep.exit_code == 0, sweep.output
    assert db.is_symlink() and target.is_file()
    assert invoke("plot", "sweep", db, "-o", tmp_path / "s.png").exit_code == 0


def test_a_link_in_a_loop_or_to_a_dangling_link_is_named_for_what_it_is(tmp_path: Path) -> None:
    """A link whose target is itself a link is not "a link to X, which does not exist" (X
    does): a loop says so, and a chain names the missing file at its end."""
    (tmp_path / "loop.yaml").symlink_to("loop.yaml")
    (tmp_path / "gone.yaml").symlink_to("missing.yaml")
    (tmp_path / "chain.yaml").symlink_to("gone.yaml")
    loop = invoke("check", tmp_path / "loop.yaml")
    clean_failure(loop, "a link to 'loop.yaml' in a loop of symbolic links", lines=None)
    missing = tmp_path / "missing.yaml"
    chain = invoke("check", tmp_path / "chain.yaml")
    words = f"a link to 'gone.yaml', which leads to '{missing}', which does not exist"
    clean_failure(chain, words, lines=None)


def test_a_database_another_process_holds_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.5)
    path, db = spec(tmp_path, SYNTHETIC), tmp_path / "held.sqlite"
    with sqlite3.connect(db, isolation_level=None) as holder:
        holder.execute("CREATE TABLE t (a)")
        holder.execute("BEGIN EXCLUSIVE")
        result = invoke("sweep", path, "--db", db, "--workers", "1", "--no-progress")
        holder.execute("ROLLBACK")
    stderr = clean_failure(result, str(db), "database is locked: another process")
    assert "held it for" in stderr and "--db" not in stderr  # the library's words: no flags
    # said at once, before the wait's error (it was a silent minute)
    notice = f"waiting for the database lock held by another process: {db}"
    assert [line for line in stderr.splitlines() if notice in line] == [
        store_module.waiting_notice(db)
    ], stderr


@pytest.fixture
def small_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """SQLite's own full-disk path: every connection may grow to 12 pages of 4 KiB."""
    real = sqlite3.connect

    def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
        conn = real(*args, **kwargs)  # type: ignore[arg-type]
        conn.execute("PRAGMA max_page_count = 12")
        return conn

    monkeypatch.setattr(store_module.sqlite3, "connect", connect)
    yield


def test_a_full_disk_mid_sweep_keeps_the_rows_stored(tmp_path: Path, small_disk: None) -> None:
    path, db = spec(tmp_path, SYNTHETIC), tmp_path / "r.sqlite"
    result = invoke("sweep", path, "--db", db, "--workers", "1", "--no-progress")
    stderr = clean_failure(result, "database or disk is full", "a rerun resumes", lines=None)
    stored = int(stderr.split(" of the 8 points")[0].rsplit("(", 1)[1])
    assert 0 < stored < 8
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM results").fetchone() == (stored,)


# --- duplicate keys ---


def test_duplicate_keys_name_both_lines(tree: Path) -> None:
    workload = tree / "wl.yaml"
    text = workload.read_text().replace("serving:\n", "serving:\n  seed: 1\n  seed: 2\n", 1)
    workload.write_text(text)
    line = text.splitlines().index("  seed: 1") + 1
    for command in ("check", "run"):
        clean_failure(
            invoke(command, workload),
            f"duplicate key 'seed' (lines {line} and {line + 1})",
            lines=2 if command == "check" else 1,  # check adds "1 of 1 file(s) failed"
        )


# --- sweep export order ---


def test_serial_and_parallel_sweeps_export_the_same_bytes(tmp_path: Path) -> None:
    path = spec(tmp_path, SYNTHETIC.replace("fail_when", "sleep_s: 0.02, fail_when"))
    exports = []
    for workers in ("1", "3"):
        out = tmp_path / f"w{workers}.csv"
        result = invoke(
            "sweep",
            path,
            "--db",
            tmp_path / f"w{workers}.sqlite",
            "--workers",
            workers,
            "--export",
            out,
            "--no-progress",
            seconds=POOL_SECONDS if workers != "1" else SECONDS,
        )
        assert result.exit_code == 1, result.output  # the one failing point
        exports.append(out.read_bytes())
    assert exports[0] == exports[1]
    rows = list(csv.reader(io.StringIO(exports[0].decode())))
    assert [r[3] for r in rows[1:]] == [str(n) for n in range(1, 9)]  # grid order
    assert rows[3][2] == "failed" and "synthetic failure" in rows[3][6]
    assert "wall_s" not in rows[0] and "worker" not in rows[0]
    with_provenance = tmp_path / "p.csv"
    invoke(
        "sweep", path, "--db", tmp_path / "w1.sqlite", "--export", with_provenance, "--provenance"
    )
    assert "wall_s" in with_provenance.read_text().splitlines()[0]


# --- issue 45: options a suite does not use, non-finite swept values, published traces ---


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--tolerance", "bogus=1"], "--tolerance"),
        (["--snapstream", "/dev/zero", "--full", "nope.yaml"], "--snapstream, --full"),
        (["--quick"], "--quick"),
    ],
)
def test_the_deployment_suite_refuses_the_figures_suites_options(
    options: list[str], named: str
) -> None:
    result = invoke("validate", "--suite", "deployment", *options)
    clean_failure(result, f"error: {named}: the figures suite's (--suite figures)")


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "1e999", '"inf"'])
def test_a_sweep_plot_of_a_non_finite_swept_value_names_the_point(
    swept: tuple[Path, Path], value: str
) -> None:
    _, db = swept
    with sqlite3.connect(db) as conn:  # what a hand edit or another writer could leave
        conn.execute(
            "UPDATE results SET overrides = ? WHERE overrides = ?",
            (f'{{"serving.batch_slots": {value}}}', '{"serving.batch_slots": 4}'),
        )
    clean_failure(
        invoke("plot", "sweep", db, "-o", db.with_suffix(".png")),
        "the point serving.batch_slots=",
        "batch_slots must be a finite number, got",
    )
    assert not db.with_suffix(".png").exists()


BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


@pytest.mark.parametrize(
    ("stamps", "line"), [(("", ""), 2), (("", "5"), 2), (("1", ""), 3), (("1", " "), 3)]
)
def test_a_published_trace_needs_its_arrival_column(
    tree: Path, stamps: tuple[str, str], line: int
) -> None:
    """Each row without its time is named (one error line a bad row, the first shown)."""
    bad = sum(not stamp.strip() for stamp in stamps)
    rows = "".join(
        f"{t},ChatGPT,{100 + i},20,{120 + i},Conversation log\n" for i, t in enumerate(stamps)
    )
    (tree / "burst.csv").write_text(BURSTGPT_HEADER + rows)
    workload = tree / "wl.yaml"
    workload.write_text(
        workload.read_text().replace("serving:\n", "serving:\n  trace: burst.csv\n", 1)
    )
    for command in ("check", "run"):
        clean_failure(
            invoke(command, workload),
            f"burst.csv:{line}: Timestamp: missing value (every burstgpt trace row has one)",
            lines=bad + 1 if command == "check" else bad,
        )


# --- issue 45's hostile pass: FIFOs, read-only media, work that scales with an option ---


def test_an_output_fifo_that_nothing_reads_is_refused_at_once(
    swept: tuple[Path, Path], tmp_path: Path
) -> None:
    path, db = swept
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    (tmp_path / "out").mkdir()
    os.mkfifo(tmp_path / "out" / "result.json")
    refused = "cannot write: a FIFO that nothing reads (start its reader first)"
    for args in (
        ("step", LLAMA, "--trace", fifo),
        ("run", LLAMA, "--set", "serving.requests=4", "--trace", fifo),
        ("run", LLAMA, "--set", "serving.requests=4", "--out", tmp_path / "out"),
        ("plot", "sweep", db, "-o", fifo.with_suffix(".png")),
        ("sweep", path, "--db", db, "--export", fifo.with_suffix(".csv"), "--no-progress"),
    ):
        target = args[-1] if args[0] != "sweep" else args[-2]
        if not os.path.exists(target) and args[0] != "run":
            os.mkfifo(target)
        clean_failure(invoke(*args), refused)


def test_an_output_fifo_with_a_reader_gets_the_file(tmp_path: Path) -> None:
    fifo, copy = tmp_path / "trace.fifo", tmp_path / "copy.json"
    os.mkfifo(fifo)
    with copy.open("wb") as sink, subprocess.Popen(["cat", str(fifo)], stdout=sink) as reader:
        deadline = time.monotonic() + 10
        while invoke("step", LLAMA, "--trace", fifo).exit_code != 0:  # until cat has opened it
            assert time.monotonic() < deadline
            time.sleep(0.05)
        reader.wait(timeout=30)
    data = copy.read_bytes()
    assert data.startswith(b"{") and b"traceEvents" in data


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A read-only file system (a tmpfs remounted read-only): what root cannot write."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)],
            capture_output=True,
            check=False,
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


def test_a_finished_sweep_on_a_read_only_medium_is_read(
    swept: tuple[Path, Path], read_only_folder: Path
) -> None:
    path, db = swept
    copy = read_only_folder / db.name
    copy.write_bytes(db.read_bytes())
    subprocess.run(["mount", "-o", "remount,ro", str(read_only_folder)], check=True)
    out = db.with_suffix(".png")
    result = invoke("plot", "sweep", copy, "-o", out)
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 0
    dry = invoke("sweep", path, "--db", copy, "--dry-run")
    assert dry.exit_code == 0 and "7 already done" in dry.stderr + dry.output, dry.output
    # a resume with nothing to run and its export only read (the export was refused at open)
    csv_out = db.with_suffix(".csv")
    exported = invoke(
        "sweep", path, "--db", copy, "--workers", "1", "--export", csv_out, "--no-progress"
    )
    assert exported.exit_code == 1, exported.output  # its failed point, as when writable
    assert "7 already done" in exported.stderr and csv_out.stat().st_size > 0
    assert sorted(p.name for p in read_only_folder.iterdir()) == [db.name]  # nothing written
    # one that must write names the file, not its folder
    rerun = invoke("sweep", path, "--db", copy, "--workers", "1", "--rerun", "--no-progress")
    clean_failure(rerun, str(copy), "readonly database (it is on a read-only file system")
    # a new database there, and an export there, are named as on a read-only file system
    # (not "check the folder's permissions"); the export before anything runs
    fresh = invoke("sweep", path, "--db", read_only_folder / "new.sqlite", "--no-progress")
    clean_failure(fresh, str(read_only_folder / "new.sqlite"), "read-only file system")
    there = read_only_folder / "x.csv"
    refused = invoke("sweep", path, "--db", db, "--rerun", "--export", there, "--no-progress")
    clean_failure(
        refused, f"{there}: cannot write: {read_only_folder} is on a read-only file system"
    )
    assert refused.stdout == "" and "to run" not in refused.stderr  # nothing ran


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["kv-demo", "--prompt-tokens", "65536", "--decode-steps", "64"], "token-steps a budget"),
        (["kv-demo", *[f"--budget={64 * i}" for i in range(1, 10)]], "--budget given 9 values"),
        (
            ["plot", "throughput", LLAMA, "--contexts", ",".join(map(str, range(1, 3000)))],
            "--contexts lists 2999 values; a plot simulates at most 64",
        ),
    ],
)
def test_work_that_scales_with_an_option_is_bounded_before_it_starts(
    args: list[str], words: str
) -> None:
    clean_failure(invoke(*args), words)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["run", LLAMA, "--trace"], "--trace"),
        (["step", LLAMA, "--trace"], "--trace"),
        (["inspect", "graph", LLAMA, "--dot"], "--dot"),
        (["sweep", "llama8b-batch", "--db"], "--db"),
        (["sweep", "llama8b-batch", "--export"], "--export"),
        (["plan", "llama3.1-8b-chat", "--db"], "--db"),
        (["plot", "memory", LLAMA, "-o"], "--output"),
    ],
)
def test_a_folder_given_for_a_file_is_one_error_line(
    tmp_path: Path, args: list[str | Path], option: str
) -> None:
    """`run --trace DIR` (and every option naming a file to write) printed click's
    three-line "Usage: ... Error: Invalid value" instead of the project's one line."""
    result = invoke(*args, tmp_path)
    stderr = clean_failure(result, f"{tmp_path}: a folder, not a file: {option} takes a file")
    assert "Usage:" not in stderr and "Invalid value" not in stderr
    # a name ending in a slash is a folder's, made or not (it wrote a file without the slash)
    named = f"{tmp_path / 'out.csv'}/"
    stderr = clean_failure(invoke(*args, named), f"{named}: a folder, not a file: {option} takes")
    assert not (tmp_path / "out.csv").exists()


def test_a_spec_given_as_its_own_database_is_named_a_yaml_file(tmp_path: Path) -> None:
    """`sweep sp.yaml --db sp.yaml` called the user's spec "damaged, or not a sweep
    database ... move it aside"."""
    path = spec(tmp_path, SYNTHETIC)
    before = path.read_bytes()
    stderr = clean_failure(invoke("sweep", path, "--db", path), str(path), "a YAML file")
    assert "damaged" not in stderr and "move it aside" not in stderr
    assert path.read_bytes() == before


def test_plot_of_a_damaged_or_missing_database_speaks_of_databases(
    swept: tuple[Path, Path], tmp_path: Path
) -> None:
    """`plot sweep trunc.sqlite` advised "give another --db", a flag plot does not have;
    `plot sweep missing.sqlite` said "no shipped workload of that name" and listed the
    workloads."""
    _, db = swept
    trunc = tmp_path / "trunc.sqlite"
    trunc.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    stderr = clean_failure(invoke("plot", "sweep", trunc), str(trunc), "damaged")
    assert "--db" not in stderr and "run its sweep again" in stderr
    missing = tmp_path / "missing.sqlite"
    stderr = clean_failure(invoke("plot", "sweep", missing), f"{missing}: no such sweep database")
    assert "shipped sweeps: " in stderr and "llama8b-batch" in stderr
    assert "workload" not in stderr


def test_an_output_that_is_a_link_is_written_through_it(tmp_path: Path) -> None:
    """--trace, -o and --export onto a symbolic link replaced the link with a file: each
    is written to the link's target, the link kept (made there when the target is not yet
    but its folder is, as a sweep's --db); a loop or a link into a missing folder is one
    `cannot write` line."""
    disk = tmp_path / "disk"
    disk.mkdir()
    (disk / "old.json").write_text("{}")
    trace, drawn, made = tmp_path / "t.json", tmp_path / "p.png", tmp_path / "new.json"
    trace.symlink_to(disk / "old.json")
    drawn.symlink_to(disk / "p.png")  # not made yet, its folder there
    made.symlink_to(disk / "new.json")
    ran = invoke("run", LLAMA, "--set", "serving.requests=2", "--trace", trace)
    assert ran.exit_code == 0, ran.output
    assert trace.is_symlink() and json.loads((disk / "old.json").read_text())["traceEvents"]
    assert invoke("plot", "memory", LLAMA, "-o", drawn).exit_code == 0
    assert drawn.is_symlink() and (disk / "p.png").read_bytes()[:4] == b"\x89PNG"
    path = spec(tmp_path, "axes: {serving.batch_slots: [1, 2]}\nevaluator: {name: synthetic}\n")
    exported = tmp_path / "e.csv"
    exported.symlink_to(disk / "e.csv")
    assert invoke("sweep", path, "--export", exported, "--no-progress").exit_code == 0
    assert exported.is_symlink() and (disk / "e.csv").read_text().startswith("key,")
    (tmp_path / "loop.png").symlink_to("loop.png")
    (tmp_path / "gone.png").symlink_to(tmp_path / "moved" / "p.png")
    for name, words in (
        ("loop.png", "a link to 'loop.png' in a loop of symbolic links"),
        ("gone.png", f"a link to '{tmp_path / 'moved' / 'p.png'}', which does not exist"),
    ):
        refused = invoke("plot", "memory", LLAMA, "-o", tmp_path / name)
        clean_failure(refused, f"{tmp_path / name}: cannot write: {words}")
    assert not (tmp_path / "moved").exists()


def test_plot_output_errors_are_the_house_form(tmp_path: Path) -> None:
    """plot -o w.yaml said "output 'w.yaml' must end in ..."; a name too long for the OS
    was "NAME: File name too long" without saying it could not be written."""
    clean_failure(
        invoke("plot", "memory", LLAMA, "-o", tmp_path / "w.yaml"),
        f"error: {tmp_path / 'w.yaml'}: --output: cannot draw to '.yaml': use .png, .svg or .pdf",
    )
    long = tmp_path / ("a" * 300 + ".png")
    for args in (["plot", "memory", LLAMA, "-o", long], ["run", LLAMA, "--trace", long]):
        clean_failure(invoke(*args), f"error: {long}: cannot write: File name too long")
