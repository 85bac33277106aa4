"""Fuzz: where output goes and what is already there. Every write to a path that cannot take
it is a WriteError naming the path, leaving the previous file whole and no temporary file
behind; every sweep database damaged at random reads back or is a StoreError naming it."""

from __future__ import annotations

import errno
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rdu_sim.report.files as files
from rdu_sim.config.errors import WriteError
from rdu_sim.report.files import write_file, write_outputs
from rdu_sim.sweep import load, run_sweep
from rdu_sim.sweep.store import Store, StoreError

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
COLUMNS = {"a": np.arange(5), "b": np.linspace(0, 1, 5)}


def _target(root: Path, kind: str) -> Path:
    """An output path of the given kind below `root`."""
    blocker = root / "a-file"
    blocker.write_text("x")
    full = root / "full.json"
    full.symlink_to("/dev/full")
    return {
        "below-a-file": blocker / "out.json",
        "deep-below-a-file": blocker / "x" / "y" / "out.json",
        "full-disk": full,
        "a-folder": root,
        "missing-folders": root / "new" / "deeper" / "out.json",
        "plain": root / "out.json",
    }[kind]


WRITERS: dict[str, Callable[[Path], object]] = {
    "text": lambda p: write_file(p, lambda h: h.write("hello\n" * 1000)),
    "binary": lambda p: write_file(p, lambda h: h.write(b"\x00" * 70_000), binary=True),
    "outputs": lambda p: write_outputs(p, {"x": 1}, COLUMNS, COLUMNS),
}


@SETTINGS
@given(
    kind=st.sampled_from(
        ["below-a-file", "deep-below-a-file", "full-disk", "a-folder", "missing-folders", "plain"]
    ),
    writer=st.sampled_from(sorted(WRITERS)),
)
def test_writes_succeed_or_name_the_path(tmp_path: Path, kind: str, writer: str) -> None:
    root = tmp_path / f"{kind}-{writer}"
    root.mkdir()
    target = _target(root, kind)
    try:
        WRITERS[writer](target)
    except WriteError as exc:
        assert kind not in ("missing-folders", "plain") and not (
            writer == "outputs" and kind == "a-folder"
        )
        assert str(exc).startswith(str(target)) or "not a folder" in str(exc)
    else:
        assert kind in ("missing-folders", "plain") or (writer == "outputs" and kind == "a-folder")
    assert not list(root.rglob(".*.tmp"))  # no temporary file left behind


@pytest.mark.parametrize("failing", ["write", "replace"])
def test_a_failed_write_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """ENOSPC at the OS boundary, mid-write or at the rename: the old file stays whole."""
    target = tmp_path / "result.json"
    target.write_text("previous result\n")

    def no_space(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def write(handle: IO[Any]) -> None:
        handle.write("partial")
        if failing == "write":
            no_space()

    if failing == "replace":
        monkeypatch.setattr(files.os, "replace", no_space)
    with pytest.raises(WriteError, match="No space left on device"):
        write_file(target, write)
    assert target.read_text() == "previous result\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


@pytest.fixture(scope="module")
def sweep_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("db")
    spec = folder / "spec.yaml"
    spec.write_text(
        f"base: {LLAMA}\naxes:\n  serving.batch_slots: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
        "evaluator: {name: synthetic}\n"
    )
    return run_sweep(spec, db=folder / "good.sqlite", workers=1).db


@SETTINGS
@given(
    spans=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 4096)), min_size=1, max_size=4),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_damaged_database_reads_or_names_itself(
    tmp_path: Path, sweep_db: Path, spans: list[tuple[float, int]], seed: int
) -> None:
    db = tmp_path / "d.sqlite"
    shutil.copyfile(sweep_db, db)
    data = bytearray(db.read_bytes())
    rng = random.Random(seed)
    for where, length in spans:
        at = int(where * len(data))
        data[at : at + length] = rng.randbytes(min(length, len(data) - at))
    db.write_bytes(bytes(data))
    try:
        with Store(db) as store:
            store.existing()
            store.rows()
        load(db)
    except StoreError as exc:
        assert str(exc).startswith(str(db))
        assert len(str(exc)) < 1000
