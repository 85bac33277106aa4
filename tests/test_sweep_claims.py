"""Two sweeps on one database compute each point once (``rdu_sim.sweep.claims``).

Two `rdu-sim sweep` processes on the same database (the same spec, or two specs sharing
points) each computed every point neither had stored. Now a point another live process has
claimed is left to it and taken over only if that process dies or gives it back, and the
rows, exported, are the same bytes as a serial run's.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rdu_sim.sweep import expand, load_spec, run_sweep
from rdu_sim.sweep.store import Store

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"


def write_spec(tmp_path: Path, name: str, slots: list[int], sleep_s: float = 0.4) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"base: {BASE}\n"
        + textwrap.dedent(f"""\
        axes:
          serving.batch_slots: {slots}
        metrics: [decode_tokens_per_s, ttft_s.p50]
        evaluator: {{name: synthetic, options: {{sleep_s: {sleep_s}}}}}
        """)
    )
    return path


def start(spec: Path, db: Path, export: Path) -> subprocess.Popen[str]:
    """`rdu-sim sweep SPEC --db DB --export EXPORT` in a process of its own."""
    args = ["sweep", str(spec), "--db", str(db), "--workers", "1", "--no-progress"]
    code = "import sys; from rdu_sim.cli.main import main; sys.argv[0] = 'rdu-sim'; main()"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args, "--export", str(export)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def attempts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        return {str(k): int(n) for k, n in conn.execute("SELECT key, attempts FROM results")}


class Told:
    """A reporter that keeps the sweep's messages."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def message(self, text: str) -> None:
        self.messages.append(text)

    def start(self, name: str, total: int) -> None: ...
    def advance(self, outcome: object) -> None: ...
    def close(self) -> None: ...


def finish(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    return out


def claimed(db: Path, timeout_s: float = 120.0) -> None:
    """Return once a process has claimed points in ``db``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if db.is_file():
            try:
                with sqlite3.connect(db) as conn:
                    if conn.execute("SELECT count(*) FROM claims").fetchone()[0]:
                        return
            except sqlite3.OperationalError:  # not made yet, or locked a moment
                pass
        time.sleep(0.05)
    raise AssertionError(f"no process claimed points in {db}")


def test_two_processes_on_one_spec_compute_each_point_once(tmp_path: Path) -> None:
    # the second starts once the first holds its points (5 s of work): however loaded the
    # machine, it finds them claimed by a live process
    spec = write_spec(tmp_path, "spec", [1, 2, 3, 4, 5], sleep_s=1.0)
    db = tmp_path / "shared.sqlite"
    first = start(spec, db, tmp_path / "a.csv")
    claimed(db)
    second = start(spec, db, tmp_path / "b.csv")
    outputs = [finish(first), finish(second)]
    assert list(attempts(db).values()) == [1] * 5, attempts(db)  # each computed once
    assert any("run by another process" in out for out in outputs), outputs
    alone = tmp_path / "alone"  # the same spec without the sleep: the same rows, at once
    alone.mkdir()
    run_sweep(
        write_spec(alone, "spec", [1, 2, 3, 4, 5], sleep_s=0.0),
        db=tmp_path / "serial.sqlite",
        workers=1,
    )
    serial = tmp_path / "serial.csv"
    from rdu_sim.sweep import export, load

    export(load(tmp_path / "serial.sqlite", sweep="spec"), serial)
    assert (tmp_path / "a.csv").read_bytes() == serial.read_bytes()
    assert (tmp_path / "b.csv").read_bytes() == serial.read_bytes()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM claims").fetchone() == (0,)  # all given back


def test_two_specs_sharing_points_compute_the_shared_ones_once(tmp_path: Path) -> None:
    low, high = (
        write_spec(tmp_path, "low", [1, 2, 3, 4]),
        write_spec(tmp_path, "high", [3, 4, 5, 6]),
    )
    db = tmp_path / "shared.sqlite"
    procs = [start(low, db, tmp_path / "low.csv"), start(high, db, tmp_path / "high.csv")]
    for proc in procs:
        finish(proc)
    assert list(attempts(db).values()) == [1] * 6, attempts(db)
    for spec in (low, high):
        alone = tmp_path / f"alone-{spec.stem}.sqlite"
        run_sweep(spec, db=alone, workers=1)
        from rdu_sim.sweep import export, load

        export(load(alone, sweep=spec.stem), tmp_path / f"alone-{spec.stem}.csv")
        together = (tmp_path / f"{spec.stem}.csv").read_bytes()
        assert together == (tmp_path / f"alone-{spec.stem}.csv").read_bytes()


def test_a_dead_owners_points_are_taken_over_and_a_live_ones_waited_for(
    tmp_path: Path,
) -> None:
    """A claim of a process that has ended is taken over at once; one of a live process is
    left to it, waited for, and taken over when that process ends without storing it."""
    spec = write_spec(tmp_path, "spec", [1, 2, 3], sleep_s=0.0)
    db = tmp_path / "claimed.sqlite"
    Store(db).close()  # the tables
    keys = [p.key for p in expand(load_spec(spec)).points]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    host = socket.gethostname()
    with sqlite3.connect(db) as conn:
        conn.executemany(
            "INSERT INTO claims (key, host, pid, token, seen) VALUES (?, ?, ?, '', ?)",
            [(keys[0], host, dead.pid, time.time()), (keys[1], host, live.pid, time.time())],
        )
    threading.Timer(1.5, live.kill).start()
    told = Told()
    messages = told.messages

    started = time.monotonic()
    summary = run_sweep(spec, db=db, workers=1, progress=told)  # type: ignore[arg-type]
    live.wait()
    assert time.monotonic() - started >= 1.4  # it waited for the live owner
    assert summary.ran == 3 and summary.done == 3
    assert attempts(db) == dict.fromkeys(keys, 1)
    assert f"1 being run by another process ({host}:{live.pid}), waited for" in messages[0]
    assert any(m.startswith("waiting for 1 point another process") for m in messages), messages


def test_a_point_stored_while_this_sweep_claims_is_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds a point when this sweep claims, and stores it before this one
    reads the rows again: it is already done, not also 'being run by another process' (the
    plan line said 7 of 6)."""
    spec = write_spec(tmp_path, "spec", [1, 2, 3], sleep_s=0.0)
    one = write_spec(tmp_path, "one", [1], sleep_s=0.0)
    db = tmp_path / "race.sqlite"
    Store(db).close()
    keys = [p.key for p in expand(load_spec(spec)).points]
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO claims (key, host, pid, token, seen) VALUES (?, ?, ?, '', ?)",
            (keys[0], socket.gethostname(), live.pid, time.time()),
        )
    real = Store.claim

    def claim(self: Store, *args: Any, **kwargs: Any) -> Any:
        held = real(self, *args, **kwargs)
        if keys[0] in held:  # the other process stores its point, ending its claim
            with sqlite3.connect(db) as conn:
                conn.execute("DELETE FROM claims WHERE key = ?", (keys[0],))
            run_sweep(one, db=db, workers=1)
        return held

    monkeypatch.setattr(Store, "claim", claim)
    told = Told()
    messages = told.messages

    try:
        summary = run_sweep(spec, db=db, workers=1, progress=told)  # type: ignore[arg-type]
    finally:
        live.kill()
        live.wait()
    assert messages[0] == "spec: 3 points; 1 already done, 2 to run", messages
    assert (summary.ran, summary.already_done, summary.elsewhere) == (2, 1, 0)
