"""``--out DIR``: result.json, requests.csv (one row per request), timeseries.csv; and the one
way every output file is written.

Files are written only when asked (no side effects elsewhere), with stable column order and
float formatting, so the same run writes byte-identical files. ``write_file`` writes all or
nothing: into a temporary file beside the target, renamed over it only when complete, so a
full disk never leaves half a file or destroys the previous one (the temporary's name
holds this host and process, so the next writer of the target removes one a killed process
left: ``_remove_stale``); ``--out``'s files are one set (``OUT_SET``, ``Staged``), renamed into
place together once all are written, and a member an earlier run left that this run does
not write removed; the folder is created;
any OSError becomes a WriteError naming the path. A target that exists and is not a regular
file (/dev/null, /dev/full, a FIFO) is written in place: it cannot be replaced; a FIFO that
nothing reads is refused at once (opening it would wait for a reader forever).
"""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import math
import os
import socket
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeAlias

from rdu_sim.config.errors import WriteError
from rdu_sim.config.yaml_io import broken_link

if TYPE_CHECKING:
    from numpy.typing import NDArray

RESULT_FILE = "result.json"
REQUESTS_FILE = "requests.csv"
TIMESERIES_FILE = "timeseries.csv"

OUT_SET = (RESULT_FILE, REQUESTS_FILE, TIMESERIES_FILE)
"""The files a run's ``--out DIR`` holds, one set: a run writes those it has (a cluster's
run has no timeseries.csv) and removes those of the set an earlier run left that it does not
write (``stale_members``), so DIR never holds one run's result.json beside another's series
(which ``rdu-sim plot`` would read as this run's)."""


def stale_members(folder: Path, written: Iterable[str]) -> list[Path]:
    """The files of :data:`OUT_SET` in ``folder`` that a run writing ``written`` does not
    write: an earlier run's, removed when this run's set is in place (``write_set``)."""
    kept = set(written)
    return [
        folder / name for name in OUT_SET if name not in kept and os.path.lexists(folder / name)
    ]


def folder_problem(folder: Path) -> str | None:
    """Why `folder` cannot be made, found without making anything: the nearest of it and its
    parents that is there and is not a folder (a file, or a link to nothing: mkdir makes no
    folder at a link's target); None when nothing stands in the way."""
    try:
        blocker = next((p for p in (folder, *folder.parents) if os.path.lexists(p)), None)
        if blocker is None or blocker.is_dir():
            return None
        if blocker.is_symlink() and not blocker.exists():
            return f"{blocker} is {broken_link(blocker)}"
    except (OSError, ValueError):
        return None  # mkdir names what is wrong
    return f"{blocker} exists and is not a folder"


def make_folder(folder: Path, target: Path | None = None) -> None:
    """Create `folder` and its parents; a WriteError naming `target` (default: the folder)
    when it cannot be."""
    named = target if target is not None else folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        problem = folder_problem(folder) or f"{folder} exists and is not a folder"
        raise WriteError.single(str(named), "", f"cannot write: {problem}") from None
    except OSError as exc:
        raise WriteError.from_os(named, exc) from None


def _nearest_existing(path: Path) -> Path | None:
    """``path`` or its nearest parent that exists (None: none does, or it cannot be told)."""
    try:
        return next((p for p in (path, *path.parents) if p.exists()), None)
    except (OSError, ValueError):
        return None


def read_only_medium(path: Path) -> bool:
    """Whether ``path`` (or, not made yet, the nearest folder above it) is on a file system
    mounted read-only, where nothing can be written whatever the permissions say (EROFS)."""
    there = _nearest_existing(path)
    if there is None:
        return False
    try:
        return bool(os.statvfs(there).f_flag & os.ST_RDONLY)
    except (OSError, ValueError):
        return False


def unwritable_problem(path: Path) -> str | None:
    """Why a file cannot be written at ``path``, found before any work and without making
    anything (a folder in the way, a read-only medium, a folder this process may not
    write); None when nothing is known to stand in the way."""
    problem = folder_problem(path.parent)
    if problem is not None:
        return problem
    folder = _nearest_existing(path.parent)
    if folder is None:
        return None
    if read_only_medium(folder):
        return f"{folder} is on a read-only file system"
    if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is a folder this user may not write to"
    return None


def _in_place(path: Path) -> bool:
    """True for an existing target that is not a regular file (a device, a FIFO)."""
    try:
        return path.exists() and not path.is_file()
    except (OSError, ValueError):
        return False


def _created_mode() -> int:
    """The permission bits `open()` would give a new file (0666 less the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _open(file: int | Path, binary: bool) -> IO[Any]:
    if binary:
        return open(file, "wb")
    return open(file, "w", encoding="utf-8", newline="")


def _open_in_place(target: Path, binary: bool) -> IO[Any]:
    """An existing device or FIFO opened for writing; a FIFO with no reader is a WriteError
    (a blocking open would wait for one forever)."""
    if not stat.S_ISFIFO(target.stat().st_mode):
        return _open(target, binary)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            raise
        raise WriteError.single(
            str(target), "", "cannot write: a FIFO that nothing reads (start its reader first)"
        ) from None
    os.set_blocking(fd, True)
    return _open(fd, binary)


def made_through_link(path: Path) -> bool:
    """Whether `path` is a link to a file not made yet in a folder that exists: an output
    (a sweep's database too: SQLite writes through a link) is made there, as an existing
    file is written through its link (a file kept on another disk from its first run). A
    loop, or a link into a missing folder, is not."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return path.is_symlink() and Path(os.path.realpath(path)).parent.is_dir()
    except (OSError, ValueError):
        return False
    return False


def _through_link(link: Path) -> Path:
    """The file an output named by a symbolic link is written to: the link's target, the
    link kept (what a user who links an output expects), made there when it is not yet but
    its folder is (``made_through_link``); a loop, or a link into a missing folder, is a
    WriteError."""
    if link.exists() or made_through_link(link):
        return Path(os.path.realpath(link))
    raise WriteError.single(str(link), "", f"cannot write: {broken_link(link)}")


_TEMPORARY_SUFFIX = ".tmp"


def _host() -> str:
    """This host's name as a temporary file's name holds it (``_temporary_prefix``)."""
    return socket.gethostname().replace("/", "_") or "localhost"


def _temporary_prefix(target: Path) -> str:
    """The start of the name of a temporary file this process writes ``target`` through:
    ``.NAME.HOST.PID.`` (then mkstemp's random part and ``.tmp``), so a later writer of the
    same target can tell one a killed process left (``_remove_stale``)."""
    return f".{target.name}.{_host()}.{os.getpid()}."


def _remove_stale(target: Path) -> None:
    """Remove the temporary files of ``target`` that a process of this host, now gone, left
    (killed outright while it wrote: a 100 MB trace's stays beside it). Only names of
    ``_temporary_prefix``'s pattern for this target are touched, and only those whose
    process no longer runs here: another host's, or a live process's, are in use."""
    start = f".{target.name}."
    host = _host()
    try:
        names = [
            entry.name
            for entry in os.scandir(target.parent)
            if entry.name.startswith(start) and entry.name.endswith(_TEMPORARY_SUFFIX)
        ]
    except OSError:
        return
    for name in names:
        parts = name[len(start) : -len(_TEMPORARY_SUFFIX)].rsplit(".", 2)
        if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
            continue
        pid = int(parts[1])
        if pid == os.getpid() or _running(pid):
            continue
        with contextlib.suppress(OSError):
            (target.parent / name).unlink()


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


class Staged:
    """Files written as one set (``write_file(staged=...)``): each is written whole to its
    temporary file, and all are renamed into place by ``commit`` only once every one was
    written; ``discard`` removes the temporaries (a failure or a stop before the last),
    leaving every target as it was."""

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path, Path]] = []  # temporary, target, named

    def add(self, temporary: Path, target: Path, named: Path) -> None:
        self._pending.append((temporary, target, named))

    def discard(self) -> None:
        for temporary, _, _ in self._pending:
            with contextlib.suppress(OSError):
                temporary.unlink()
        self._pending.clear()

    def commit(self) -> None:
        """Rename every temporary over its target (renames in one folder: they do not fail
        for want of room); a WriteError naming what was and was not replaced if one does."""
        done: list[str] = []
        try:
            for temporary, target, named in self._pending:
                try:
                    os.replace(temporary, target)
                except OSError as exc:
                    error = WriteError.from_os(named, exc)
                    kept = f"; replaced: {', '.join(done)}" if done else "; none was replaced"
                    raise WriteError(
                        [replace(i, message=i.message + kept) for i in error.issues]
                    ) from None
                done.append(str(named))
        finally:
            self.discard()


def write_file(
    path: Path | str,
    write: Callable[[IO[Any]], object],
    binary: bool = False,
    staged: Staged | None = None,
) -> Path:
    """Call ``write(handle)`` to produce ``path`` all or nothing; return the path. A path
    that is a symbolic link is written through it (``_through_link``). With ``staged``, the
    file is renamed into place with the rest of its set (``Staged.commit``), not now."""
    named = Path(path)
    try:  # a name too long, a link in a loop: "cannot write" as any other write problem
        target = _through_link(named) if named.is_symlink() else named
        if target.is_dir():
            raise WriteError.single(str(named), "", "cannot write: is a folder")
    except OSError as exc:
        raise WriteError.from_os(named, exc) from None
    make_folder(target.parent, named)
    try:
        if _in_place(target):
            with _open_in_place(target, binary) as handle:
                write(handle)
            return target
        _remove_stale(target)
        fd, name = tempfile.mkstemp(
            dir=target.parent, prefix=_temporary_prefix(target), suffix=_TEMPORARY_SUFFIX
        )
        temporary = Path(name)
        try:
            os.chmod(fd, _created_mode())  # mkstemp makes 0600; a new file is 0666 - umask
            with _open(fd, binary) as handle:
                write(handle)
            if staged is not None:
                staged.add(temporary, target, named)
            else:
                os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise
    except OSError as exc:
        raise WriteError.from_os(named, exc) from None
    return named


def _cell(value: Any) -> str:
    """A CSV cell of a Python value (``tolist()`` turns numpy's into these; no numpy import
    here, so a command writing one file does not load it)."""
    if isinstance(value, float):
        return "" if not math.isfinite(value) else f"{value:.12g}"
    return str(value)


Columns: TypeAlias = "Mapping[str, NDArray[Any]]"

ROWS_PER_BLOCK = 65_536
"""Rows turned into Python values at a time when writing CSV: a million-row file holds one
block of Python floats (~20 MB), not every cell (~400 MB), beside its numpy columns."""


def write_columns(
    path: Path, columns: Columns | Iterable[Columns], staged: Staged | None = None
) -> None:
    """Write equal-length columns as CSV with a header row, a block of rows at a time; or
    blocks of such columns one after the other (the header from the first block)."""
    blocks = iter([columns] if isinstance(columns, Mapping) else columns)

    def rows(handle: IO[Any]) -> None:
        writer = csv.writer(handle, lineterminator="\n")
        for number, block in enumerate(blocks):
            names = list(block)
            if number == 0:
                writer.writerow(names)
            lengths = {len(block[name]) for name in names}
            if len(lengths) > 1:
                raise ValueError(f"columns of unequal lengths {sorted(lengths)} for {path}")
            total = lengths.pop() if lengths else 0
            for start in range(0, total, ROWS_PER_BLOCK):
                part = [block[name][start : start + ROWS_PER_BLOCK].tolist() for name in names]
                for row in zip(*part, strict=True):
                    writer.writerow([_cell(v) for v in row])

    write_file(path, rows, staged=staged)


def same_file(a: Path, b: Path) -> bool:
    """Whether paths `a` and `b` name one file (through links, relative or absolute)."""
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except (OSError, ValueError, RuntimeError):  # RuntimeError: a link loop (Python < 3.13)
        return False


def refuse_overwrite(
    outputs: Iterable[tuple[str, Path]], inputs: Iterable[Path], reader: str
) -> None:
    """A WriteError, before anything runs, when an output (`option`, `path`) would replace
    one of the files `reader` reads (`run --trace chat.csv` over the request trace it
    replays, `--out .` over a trace named requests.csv), or another of its outputs (`run
    --out cf --trace cf/result.json`: the trace replaced the result)."""
    read = list(inputs)
    written = list(outputs)
    for index, (option, out) in enumerate(written):
        for other, earlier in written[:index]:
            if same_file(out, earlier):
                raise WriteError.single(
                    str(out), "", f"{option}: is also written by {other}; write elsewhere"
                )
    for option, out in written:
        for source in read:
            if same_file(out, source):
                raise WriteError.single(
                    str(out), "", f"{option}: is one of {reader}'s inputs; write elsewhere"
                )


def write_json(path: Path, result: Mapping[str, Any], staged: Staged | None = None) -> None:
    """The result dict as JSON (sorted keys, 2-space indent, trailing newline)."""
    text = json.dumps(result, sort_keys=True, indent=2) + "\n"
    write_file(path, lambda handle: handle.write(text), staged=staged)


def write_outputs(
    out_dir: Path | str,
    result: Mapping[str, Any],
    requests: Columns | Callable[[], Columns | Iterable[Columns]],
    timeseries: Columns | Callable[[], Columns | Iterable[Columns]],
) -> list[Path]:
    """Write the three files into ``out_dir`` (created if needed) as one set: each to its
    temporary file, then all renamed into place, so the folder never holds one run's
    result.json beside another's CSVs (a full disk, or a stop, after the first leaves all
    three as they were, and the error says so); return their paths. ``requests`` and
    ``timeseries`` may be functions giving the columns (or blocks of rows of them), called
    when their file is written, so the two tables are never in memory at once."""
    folder = Path(out_dir)
    paths = [folder / name for name in OUT_SET]
    write_set(
        folder,
        [
            lambda staged: write_json(paths[0], result, staged),
            lambda staged: write_columns(
                paths[1], requests() if callable(requests) else requests, staged
            ),
            lambda staged: write_columns(
                paths[2], timeseries() if callable(timeseries) else timeseries, staged
            ),
        ],
        [path.name for path in paths],
    )
    return paths


def write_set(
    folder: Path, writes: Sequence[Callable[[Staged], object]], names: Sequence[str]
) -> None:
    """Call each of ``writes`` (files ``names`` of :data:`OUT_SET` in ``folder``, created if
    needed) as one set (``Staged``): all are replaced once every one is written, or none is,
    and a WriteError then says so; then the set's other files an earlier run left
    (``stale_members``) are removed, or a WriteError names the one that could not be."""
    make_folder(folder)
    staged = Staged()
    try:
        for write in writes:
            write(staged)
    except WriteError as exc:
        staged.discard()
        note = (
            f" (none of {', '.join(names)} in {folder} was written: they are replaced "
            "together or not at all)"
        )
        raise WriteError([replace(i, message=i.message + note) for i in exc.issues]) from None
    except BaseException:
        staged.discard()
        raise
    staged.commit()
    for stale in stale_members(folder, names):
        try:
            stale.unlink()
        except OSError as exc:
            raise WriteError.single(
                str(stale),
                "",
                f"cannot remove this earlier run's file: {exc.strerror or exc} (this run's "
                f"{', '.join(names)} were written beside it: remove it by hand)",
            ) from None
