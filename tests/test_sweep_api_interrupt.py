"""A sweep called from Python (a script, a notebook) without the CLI's signal handling:
Ctrl-C keeps every finished point and says so, as the command's does."""

from __future__ import annotations

import os
import signal
import sqlite3
import textwrap
import threading
import time
from pathlib import Path

import pytest

from rdu_sim import interrupts
from rdu_sim.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"


@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_in_the_api_keeps_the_finished_points_and_says_how_many(
    tmp_path: Path, workers: int
) -> None:
    # before: a bare KeyboardInterrupt after the pool finished its batches, none kept
    assert threading.current_thread() is threading.main_thread()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    spec = tmp_path / "slow.yaml"
    spec.write_text(
        f"base: {BASE}\n"
        + textwrap.dedent(
            """
            set: {serving.requests: 4}
            axes: {serving.batch_slots: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}
            metrics: [decode_tokens_per_s]
            evaluator: {name: synthetic, options: {sleep_s: 0.4}}
            """
        )
    )
    db = tmp_path / "slow.sqlite"

    def ctrl_c() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # once some points are stored
            time.sleep(0.1)
            if db.is_file():
                try:
                    with sqlite3.connect(db) as conn:
                        stored = conn.execute("SELECT count(*) FROM results").fetchone()[0]
                except sqlite3.OperationalError:  # the file exists before its table does
                    continue
                if stored >= 2:
                    break
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt) as caught:
        run_sweep(spec, db=db, workers=workers)
    stopped_in = time.monotonic() - start
    assert isinstance(caught.value, interrupts.Interrupted)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT status FROM results").fetchall()
    assert 2 <= len(rows) < 12 and {status for (status,) in rows} == {"done"}
    assert str(caught.value) == (
        f"interrupted (SIGINT): {len(rows)} of 12 points are saved in {db} "
        f"({len(rows)} finished now); run the same command again to resume"
    )
    assert stopped_in < 12 * 0.4  # it did not run the rest first
    # the caller's handling is as it was, and the next call resumes
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    summary = run_sweep(spec, db=db, workers=1)
    assert (summary.ran, summary.already_done) == (12 - len(rows), len(rows))
