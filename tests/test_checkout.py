"""The checkout's commit (rdu_sim.checkout): git's answers, started early or late, read once
per process, a forked worker asking its own."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rdu_sim import checkout, tree_digest

REPO = Path(__file__).resolve().parents[1]

needs_git = pytest.mark.skipif(
    shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout"
)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkout, "_started", None)
    monkeypatch.setattr(checkout, "_answered", {})


@needs_git
@pytest.mark.parametrize("started_early", [False, True])
def test_the_commit_is_gits(started_early: bool) -> None:
    if started_early:
        checkout.start()
        assert checkout._started is not None
    found = checkout.commit()
    status = _git(*tree_digest.STATUS_ARGS)
    assert found == checkout.Commit(
        _git("rev-parse", "HEAD").strip(),
        bool(status.strip()),
        tree_digest.changes_digest(checkout.top(), status),
    )
    assert checkout._started is None  # the processes were read and let go


@needs_git
def test_it_is_read_once_and_never_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    first = checkout.commit()

    def no_git(*args: str) -> None:
        raise AssertionError(f"git {args} started again")

    monkeypatch.setattr(checkout, "_spawn", no_git)
    checkout.start()
    assert checkout.commit() == first


@needs_git
def test_a_forked_worker_asks_its_own() -> None:
    """A worker forked after its parent started the lookup cannot wait for the parent's
    processes: it starts its own and gets the same answer."""
    checkout.start()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        os.close(read)
        found = checkout.commit()
        os.write(write, (found.head if found else "none").encode())
        os._exit(0)
    os.close(write)
    answer = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(child, 0)
    assert answer == _git("rev-parse", "HEAD").strip()
    assert checkout.commit() is not None  # the parent still reads its own


def test_outside_a_checkout_there_is_no_commit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(checkout, "top", lambda: tmp_path)
    checkout.start()
    assert checkout._started is None
    assert checkout.commit() is None


def test_git_failing_means_no_commit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A folder with a ``.git`` git does not accept (or no git at all): no commit."""
    (tmp_path / ".git").write_text("not a repository\n")
    monkeypatch.setattr(checkout, "top", lambda: tmp_path)
    assert checkout.commit() is None


@pytest.mark.skipif(
    shutil.which("git") is None or not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="gives a checkout to another user: needs git and root",
)
def test_a_checkout_another_user_owns_gives_the_same_commit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """git refuses a repository another user owns ("dubious ownership"): the commit was
    dropped from the version, and a sweep said its rows came "from another build". The
    commit does not depend on who runs rdu-sim."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f").write_text("x\n")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    head = subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    for path in (repo, *repo.rglob("*")):
        os.lchown(path, 65534, 65534)
    refused = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True)
    assert refused.returncode != 0  # git's own check, which the lookup passes by
    monkeypatch.setattr(checkout, "top", lambda: repo)
    assert checkout.commit() == checkout.Commit(head, False)


def _repo_digest(repo: Path) -> str | None:
    """The digest of ``repo``'s changes, from real git's answer (the command the checkout
    and setup.py run)."""
    status = subprocess.run(
        ["git", "-C", str(repo), *tree_digest.STATUS_ARGS],
        capture_output=True,
        text=True,
        errors="surrogateescape",
        check=True,
    ).stdout
    return tree_digest.changes_digest(repo, status)


@needs_git
def test_each_edit_of_a_commit_has_its_own_digest(tmp_path: Path) -> None:
    """In a real repository: two different edits of a file have different digests (a sweep's
    rows of one are not taken for the other's, the newcomer trial's scheduler edits), the
    same edit the same; a name git would quote (``é.py``) is read as it is on disk, not
    counted as gone whatever it holds; a rename and a deletion change it; a tracked file
    replaced by a FIFO is digested by its kind without reading it (a read would block);
    a clean tree has none."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    for name in ("a.py", "é.py", "pipe.md"):
        (repo / name).write_text("x = 0\n")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "c"], check=True)
    assert _repo_digest(repo) is None
    digests = []
    for text in ("x = 1\n", "x = 2\n"):
        (repo / "é.py").write_text(text)
        digests.append(_repo_digest(repo))
    assert None not in digests and digests[0] != digests[1]
    assert _repo_digest(repo) == digests[1]
    subprocess.run(["git", "-C", str(repo), "mv", "a.py", "b.py"], check=True)
    renamed = _repo_digest(repo)
    assert renamed not in (None, *digests)
    (repo / "pipe.md").unlink()
    gone = _repo_digest(repo)
    assert gone not in (None, renamed)
    os.mkfifo(repo / "pipe.md")
    assert _repo_digest(repo) not in (None, gone)  # and it returned: the FIFO was not read


def test_a_wheels_baked_record_gives_its_digest() -> None:
    """A wheel built from an edited checkout records the edit's digest (setup.py), and the
    simulator it runs labels its rows with it; an older record without one still reads."""
    from rdu_sim.provenance import baked_simulator

    record = '{"commit": "0123456789abcdef", "dirty": true, "changes": "9c0e13a2"}'
    assert baked_simulator(record).label == "0.1.0+g0123456789ab.dirty.9c0e13a2"
    older = '{"commit": "0123456789abcdef", "dirty": true}'
    assert baked_simulator(older).label == "0.1.0+g0123456789ab.dirty"


def test_a_dirty_label_names_the_edit() -> None:
    from rdu_sim.provenance import Simulator

    edited = Simulator("0.1.0", "0123456789abcdef", True, False, "9c0e13a2")
    assert edited.label == "0.1.0+g0123456789ab.dirty.9c0e13a2"
    assert edited.to_dict()["changes"] == "9c0e13a2"
    assert Simulator("0.1.0", "0123456789abcdef", True).label == "0.1.0+g0123456789ab.dirty"
    assert Simulator("0.1.0", "0123456789abcdef", False).label == "0.1.0+g0123456789ab"
