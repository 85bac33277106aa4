"""SQLite storage of sweep results: one row per point in table `results`, keyed by config hash.

Only the sweep's parent process writes. A statement that finds the database locked by
another process (another sweep's write, a SQL shell's open transaction) waits for it, up to
``BUSY_TIMEOUT_S``; past ``NOTICE_AFTER_S`` (brief contention between two sweeps passes
unseen) the store tells its ``waiting`` callback once per wait, so a user sees why nothing
moves instead of a silent minute. Every write is one transaction (`BEGIN IMMEDIATE` ...
`COMMIT`) in WAL mode, so a sweep killed at any instant leaves every row either fully written
or absent: resume then reruns exactly the points without a finished row. A store writes
only what changes (a resume with nothing to run only reads, so another process's open write
transaction, a SQL shell's, does not stop it).

Table `claims` holds, per point being computed, the process computing it (``claims``):
claimed (``Store.claim``) before it runs, and given back in the transaction that stores its
row (``Store.record``), so two sweeps sharing the database compute each point once.

The table's columns are fixed (metrics live in a JSON column), so one database can hold
sweeps with different metrics. For SQL users a view, `results_flat`, spreads the current
spec's axes and metrics into columns with json_extract; it is rebuilt on each run and never
holds data of its own.

Every SQLite failure (a file that is not a database, one damaged in the middle, a `results`
table that is not rdu-sim's, a full disk) is a StoreError naming the database and what was
being done; rows already committed stay, so a rerun resumes. Rows come back in a stable
order: the order of the keys asked for (a spec's grid order), else by sweep and key, never
by completion time, so a serial and a parallel sweep read and export the same rows alike.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdu_sim import human
from rdu_sim.config import json_text
from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.config.yaml_io import file_problem
from rdu_sim.report.files import made_through_link, make_folder, read_only_medium
from rdu_sim.sim_warnings import RduSimWarning, warn
from rdu_sim.sweep.claims import Owner

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key       TEXT PRIMARY KEY,          -- sha256 of the resolved config (rdu_sim.sweep.key)
    sweep     TEXT NOT NULL,             -- name of the spec that ran it last
    overrides TEXT NOT NULL,             -- JSON: axis path -> value of this point
    config    TEXT NOT NULL,             -- JSON: resolved workload, hardware, model
    metrics   TEXT,                      -- JSON: metric path -> value (NULL when failed)
    status    TEXT NOT NULL CHECK (status IN ('done', 'failed')),
    error     TEXT,                      -- exception type, message and traceback tail
    version   TEXT NOT NULL,             -- rdu_sim version (+g<commit> when known) that ran it
    worker    TEXT,                      -- host:pid that ran it
    wall_s    REAL,                      -- seconds the evaluation took
    started   TEXT,                      -- ISO 8601 UTC
    finished  TEXT,                      -- ISO 8601 UTC
    attempts  INTEGER NOT NULL DEFAULT 1 -- times this point was run to completion or failure
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS claims (
    key   TEXT PRIMARY KEY,              -- a point being computed (no row stored yet)
    host  TEXT NOT NULL,                 -- the process computing it (rdu_sim.sweep.claims)
    pid   INTEGER NOT NULL,
    token TEXT NOT NULL,                 -- that process's start time, '' when unknown
    seen  REAL NOT NULL                  -- when it last refreshed its claims (Unix seconds)
);
"""


_TEXT: tuple[type, ...] = (str,)
_OPTIONAL_TEXT: tuple[type, ...] = (str, type(None))
_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "key": (_TEXT, "text"),
    "sweep": (_TEXT, "text"),
    "overrides": (_TEXT, "JSON text"),
    "config": (_TEXT, "JSON text"),
    "metrics": (_OPTIONAL_TEXT, "JSON text or NULL"),
    "status": (_TEXT, "'done' or 'failed'"),
    "error": (_OPTIONAL_TEXT, "text or NULL"),
    "version": (_TEXT, "text"),
    "worker": (_OPTIONAL_TEXT, "text or NULL"),
    "wall_s": ((int, float, type(None)), "a number or NULL"),
    "started": (_OPTIONAL_TEXT, "text or NULL"),
    "finished": (_OPTIONAL_TEXT, "text or NULL"),
    "attempts": ((int,), "an integer"),
}
"""What each column of a row must hold as read back (SQLite stores any type in any column)."""
COLUMNS = tuple(_TYPES)
"""The results table's columns, in the table's order."""
_META_COLUMNS = ("name", "value")
_CLAIM_COLUMNS = ("key", "host", "pid", "token", "seen")
_JSON_DEPTH = 64  # a stored config or metric is a few levels deep; deeper is damage


def flat_name(name: str, column: str) -> str:
    """The column an axis (`column` "overrides") or metric ("metrics") takes in a flat view
    of the results: its own name, or ``column.name`` when that is one of the table's own
    columns (a metric named ``version``), so bookkeeping and results never share a name."""
    return f"{column}.{name}" if name in COLUMNS else name


class StoreError(ConfigError):
    """The sweep database cannot be read or written (it names the file and the operation)."""


class DamagedRowWarning(RduSimWarning):
    """A stored row one of whose columns holds what rdu-sim never writes there, read as a
    point not computed (the CLI prints it as one `warning:` line)."""


class _Damage(Exception):
    """A column of a row holding what rdu-sim never writes there (``_parsed``)."""

    def __init__(self, column: str, problem: str) -> None:
        super().__init__(column, problem)
        self.column = column
        self.problem = problem


def _damaged(writer: bool) -> str:
    """What to do with a database that cannot be used as it is, in words for the CLI and the
    library alike (no option names): a writer (a sweep, a plan) moves it aside and runs
    again; a reader (a plot, ``load``) has nothing to run but the sweep that wrote it."""
    if writer:
        return "move it aside (or use another database file) and rerun"
    return "move it aside and run its sweep again"


def _text_file(path: Path) -> str | None:
    """What a file SQLite calls not a database is when it is text (a spec given as the
    database, `sweep sp.yaml --db sp.yaml`): words for it, else None."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
        head.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not head or b"\0" in head:
        return None
    if path.suffix.lower() in (".yaml", ".yml"):
        return "a YAML file (a spec given as the database?), not a sweep database"
    return "a text file, not a sweep database"


_MEMBERS = "points of "
"""The meta table's name of a sweep's recorded points (``points of NAME``: a JSON list)."""

_POLL_S = 0.05
"""How often a statement SQLite refused at once (without its busy wait) is tried again."""

BUSY_TIMEOUT_S = 60.0
"""How long a statement waits for another process's lock on the database before failing."""

NOTICE_AFTER_S = 0.2
"""How long a statement waits for a lock silently: a row another sweep writes takes
milliseconds; longer, the wait is said (``Store(waiting=...)``) and goes on to
``BUSY_TIMEOUT_S``."""


def waiting_notice(path: Path) -> str:
    """What a store tells its ``waiting`` callback when a statement waits for a lock."""
    return (
        f"waiting for the database lock held by another process: {path} "
        f"(up to {BUSY_TIMEOUT_S:g} s)"
    )


def _busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite gave up waiting for another connection's lock (SQLITE_BUSY and its
    extended codes)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF == sqlite3.SQLITE_BUSY
    return "database is locked" in str(exc)


def _busy_ms(seconds: float) -> str:
    return f"PRAGMA busy_timeout = {max(0, int(seconds * 1000))}"


def _problem(
    exc: sqlite3.Error, path: Path, waited: float | None = None, writer: bool = True
) -> str:
    """SQLite's complaint about the database ``path`` in words a user can act on
    (``waited``: how long a statement refused as busy waited for the lock, when it did;
    ``writer``: a sweep's or a plan's store, not a reader's)."""
    text = str(exc)
    if "not a database" in text and (kind := _text_file(path)) is not None:
        other = "use another database file" if writer else "give a sweep's database"
        return f"{kind}: {other}"
    if "malformed" in text or "not a database" in text or "file is encrypted" in text:
        return f"damaged, or not a sweep database (sqlite: {text}); {_damaged(writer)}"
    if "disk is full" in text or "disk I/O" in text:
        return f"{text}; the rows already stored are kept: free space and rerun to resume"
    if "database is locked" in text:
        held = "holds it" if waited is None else f"held it for {human.duration(waited, 2)}"
        return (
            f"{text}: another process (a sweep or a plan on this database?) {held}; "
            "rerun once it is done, or use another database file"
        )
    if "readonly" in text or "unable to open" in text:
        if read_only_medium(path):
            return f"{text} (it is on a read-only file system: use a database elsewhere)"
        if os.path.exists(path) and not os.access(path, os.W_OK):
            return f"{text} (the file is read-only: check its permissions, or its medium's)"
        return f"{text} (check the folder's permissions: SQLite writes its journal there)"
    return text


@dataclass(frozen=True)
class Row:
    """One point's result, as written."""

    key: str
    sweep: str
    overrides: str  # JSON
    config: str  # JSON
    metrics: str | None  # JSON
    status: str  # 'done' | 'failed'
    error: str | None
    version: str
    worker: str | None
    wall_s: float | None
    started: str | None
    finished: str | None


@dataclass(frozen=True)
class Existing:
    """What the database already holds about a point."""

    status: str
    metric_keys: frozenset[str]
    version: str = ""  # the simulator that computed it (``provenance.Simulator.label``)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _json_path(name: str) -> str:
    return "'$." + json.dumps(name).replace("'", "''") + "'"


def _read_only(path: Path) -> sqlite3.Connection:
    """``path`` opened for reading only (``Store(create=False)``: a plot, a dry run). A
    database on a medium or in a folder this process cannot write (a finished sweep on a
    read-only mount) is opened ``immutable`` when it cannot be opened otherwise: SQLite
    cannot make the index a WAL database is read through there, and no writer can be at work
    (one would have made it)."""
    uri = "file:" + urllib.parse.quote(str(path.absolute())) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=NOTICE_AFTER_S, isolation_level=None)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError as exc:
        if _busy(exc):  # a writer holds it: the store's statements wait for it, saying so
            return conn
        conn.close()
        if os.access(path.parent, os.W_OK):
            raise
        conn = sqlite3.connect(uri + "&immutable=1", uri=True, isolation_level=None)
    return conn


class Store:
    """An open results database. Use as a context manager; close() when done. ``waiting``
    is told (:func:`waiting_notice`) when a statement waits for another process's lock
    longer than ``NOTICE_AFTER_S`` (a sweep prints it; the library says nothing by itself)."""

    def __init__(
        self,
        path: Path,
        *,
        create: bool = True,
        waiting: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self._waiting = waiting
        self._patient = True  # a busy statement waits for the lock (release(wait=False): not)
        existed = path.is_file()
        problem = file_problem(path) if os.path.lexists(path) else None  # a broken link too
        if problem is not None and not (create and made_through_link(path)):
            raise StoreError.single(str(path), "", f"cannot open the database: {problem}")
        if not create and not existed:
            raise StoreError.single(str(path), "", "no such sweep database")
        if create and not existed:
            make_folder(path.parent, path)  # as for every output: a WriteError naming it
        self._writer = create
        self._warned: set[str] = set()  # the damaged rows said once (``_checked``)
        self._wal = False  # switched to WAL (``transaction``: before this store's first write)
        self._waited: float | None = None  # how long the last busy statement waited
        try:
            self._conn = (
                sqlite3.connect(str(path), timeout=NOTICE_AFTER_S, isolation_level=None)
                if create
                else _read_only(path)
            )
        except sqlite3.Error as exc:
            raise StoreError.single(
                str(path), "", f"cannot open the database: {_problem(exc, path, writer=create)}"
            ) from None
        try:
            with self._guard("open the database"):
                self._conn.execute(_busy_ms(min(NOTICE_AFTER_S, BUSY_TIMEOUT_S)))
                self._check_tables(existed)
                if existed:
                    self._check_pages()
                if create:
                    self._execute("PRAGMA synchronous = NORMAL")  # this connection's: no lock
                if create and not self._has_schema():
                    with self.transaction():
                        for statement in _SCHEMA.split(";"):
                            if statement.strip():
                                self._execute(statement)
                        self._execute(
                            "INSERT OR IGNORE INTO meta (name, value) VALUES ('schema_version', ?)",
                            (str(SCHEMA_VERSION),),
                        )
                self._check_schema()
        except BaseException:
            self._conn.close()
            raise

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """``sql`` run, waiting for another process's lock silently for ``NOTICE_AFTER_S``,
        then saying so (``waiting``) and waiting up to ``BUSY_TIMEOUT_S`` in all (then the
        busy error stands: ``_guard`` names the file and the time waited). A statement
        SQLite refused as busy did nothing, so it is run again as it was; one it refused at
        once, without waiting (a journal-mode switch; SQLite's rule against deadlock: a
        reader that would write), is tried again until the time is up, so every wait is
        real."""
        start = time.monotonic()
        self._waited = None
        try:
            return self._conn.execute(sql, params)
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or BUSY_TIMEOUT_S <= NOTICE_AFTER_S or not self._patient:
                self._waited = time.monotonic() - start if _busy(exc) else None
                raise
        if self._waiting is not None:
            self._waiting(waiting_notice(self.path))
        try:
            while True:
                tried = time.monotonic()
                left = BUSY_TIMEOUT_S - (tried - start)
                self._conn.execute(_busy_ms(left))
                try:
                    return self._conn.execute(sql, params)
                except sqlite3.OperationalError as exc:
                    now = time.monotonic()
                    if not _busy(exc) or now - start >= BUSY_TIMEOUT_S:
                        self._waited = now - start if _busy(exc) else None
                        raise
                    if now - tried < _POLL_S:  # refused at once: SQLite did not wait
                        time.sleep(min(_POLL_S, BUSY_TIMEOUT_S - (now - start)))
        finally:
            self._conn.execute(_busy_ms(NOTICE_AFTER_S))

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """Turn any SQLite failure inside into a StoreError naming the file and `doing`."""
        try:
            yield
        except sqlite3.Error as exc:
            problem = _problem(exc, self.path, self._waited, self._writer)
            raise StoreError.single(str(self.path), "", f"cannot {doing}: {problem}") from None
        except (ValueError, TypeError) as exc:  # a row's JSON that does not parse
            raise StoreError.single(
                str(self.path),
                "",
                f"cannot {doing}: a stored row is not valid ({exc}); {_damaged(self._writer)}",
            ) from None

    def _check_tables(self, existed: bool) -> None:
        """Existing `results` and `meta` tables must be this schema's, and a database with
        tables holds at least one of them: a sweep never adds its tables to another tool's."""
        if not existed:
            return
        tables = [
            str(r[0]) for r in self._execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        if tables and not {"results", "meta"} & set(tables):
            shown = ", ".join(sorted(tables)[:8]) + (", ..." if len(tables) > 8 else "")
            raise StoreError.single(
                str(self.path),
                "",
                f"holds another tool's tables ({shown}), not a sweep's{self._another()}",
            )
        for table, columns in (
            ("results", COLUMNS),
            ("meta", _META_COLUMNS),
            ("claims", _CLAIM_COLUMNS),
        ):
            found = [r[1] for r in self._execute(f"PRAGMA table_info({table})")]
            if found and tuple(found) != columns:
                missing = [c for c in columns if c not in found]
                extra = [c for c in found if c not in columns]
                what = [
                    f"{words}: {_listed(items)}"
                    for items, words in (
                        (missing, "without the column(s)"),
                        (extra, "with column(s) a sweep's has not"),
                    )
                    if items
                ] or [f"its columns in another order: {_listed(found)}"]
                raise StoreError.single(
                    str(self.path),
                    "",
                    f"holds a '{table}' table that is not a sweep's ({'; '.join(what)})"
                    f"{self._another()}",
                )

    def _check_pages(self) -> None:
        """SQLite's ``quick_check`` of the database's pages (its b-trees, not its indexes'
        order), at open: a damaged page behind a valid header was found only when a sweep
        stored its first point, after simulating every one. It reads the file once: O(size),
        measured 1.3 ms for 1,000 rows (4 MB), 0.25 s for 100,000 (400 MB), page cache warm."""
        found = [str(r[0]) for r in self._execute("PRAGMA quick_check(5)")]
        if found != ["ok"]:
            said = "; ".join(" ".join(f.split()) for f in found)[:300]
            raise StoreError.single(
                str(self.path),
                "",
                f"damaged (sqlite's quick_check: {said}); {_damaged(self._writer)}",
            )

    def _another(self) -> str:
        """The advice that ends a message about another tool's database: a writer (a sweep,
        a plan) can use another file; a reader was given the wrong one."""
        return "; use another database file" if self._writer else ""

    def _check_schema(self) -> None:
        tables = {r[0] for r in self._execute("SELECT name FROM sqlite_master")}
        if "meta" not in tables:
            raise StoreError.single(str(self.path), "", "not a sweep database (no meta table)")
        row = self._execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        if row is None or str(row[0]) != str(SCHEMA_VERSION):
            found = "none" if row is None else str(row[0])[:20]
            raise StoreError.single(
                str(self.path),
                "",
                f"sweep database schema {found}, this rdu-sim writes schema {SCHEMA_VERSION}",
            )

    def _has_schema(self) -> bool:
        """Whether the tables and schema version are there already: a database a sweep
        made is opened without writing (a resume with nothing to run only reads, beside
        another process's open write transaction)."""
        tables = {r[0] for r in self._execute("SELECT name FROM sqlite_master")}
        if not {"results", "meta", "claims"} <= tables:
            return False
        query = "SELECT 1 FROM meta WHERE name = 'schema_version'"
        return self._execute(query).fetchone() is not None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """`with store.transaction():` runs its statements atomically: BEGIN IMMEDIATE on
        entry (waiting for a lock as the store's statements do); COMMIT on success, ROLLBACK
        on any exception. A writer's first one switches the database to WAL (a reader is
        not blocked by a write, nor a write by a reader), so a store that only reads never
        needs the write lock."""
        if self._writer and not self._wal:
            self._execute("PRAGMA journal_mode = WAL")
            self._wal = True
        self._execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            with suppress(sqlite3.Error):  # SQLite may have rolled back already
                self._conn.execute("ROLLBACK")  # (a full disk): the first error is the one
            raise
        try:
            self._execute("COMMIT")
        except BaseException:  # a lock held past the wait: nothing of it is kept
            with suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
            raise

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (committed data is already safe on disk). A writer that is
        the last one open puts the database back in rollback-journal mode first, so a
        finished sweep is one file: a reader (plot, export) opens it read-only and cannot
        checkpoint a write-ahead log, and would leave its ``-wal`` and ``-shm`` beside it.
        With another connection open the mode stays (SQLite refuses at once), for it."""
        if self._writer:
            with suppress(sqlite3.Error):
                self._conn.execute("PRAGMA busy_timeout = 0")
                self._conn.execute("PRAGMA journal_mode = DELETE")
        self._conn.close()

    def existing(self, keys: Iterable[str] | None = None) -> dict[str, Existing]:
        """Status, stored metric names and computing simulator of the given keys (all rows
        when None)."""
        wanted = None if keys is None else set(keys)
        with self._guard("read the stored points"):
            query = f"SELECT {', '.join(COLUMNS)} FROM results"
            stored = [dict(zip(COLUMNS, r, strict=True)) for r in self._execute(query)]
        found: dict[str, Existing] = {}
        for row in stored:
            if wanted is not None and row["key"] not in wanted:
                continue  # another sweep's row stays apart, damaged or not
            checked = self._checked(row)  # as `rows` reads it: a damaged row not computed
            if checked is None:
                continue
            names = frozenset(checked["metrics"]) if checked["metrics"] else frozenset()
            found[checked["key"]] = Existing(checked["status"], names, checked["version"])
        return found

    def claim(
        self, keys: Iterable[str], owner: Owner, alive: Callable[[Owner, float], bool]
    ) -> dict[str, Owner]:
        """Claim ``keys`` for ``owner`` in one transaction (``claims``), but for those another
        owner holds that is ``alive`` (given the owner and when it last refreshed its
        claims): returned, key -> owner. A dead owner's claim is taken over."""
        wanted = set(keys)
        held: dict[str, Owner] = {}
        now = time.time()
        with self._guard("claim the points to run"), self.transaction():
            for key, host, pid, token, seen in self._execute(
                "SELECT key, host, pid, token, seen FROM claims"
            ).fetchall():
                other = Owner(str(host), int(pid), str(token))
                if key in wanted and other != owner and alive(other, float(seen)):
                    held[key] = other
            self._conn.executemany(
                "INSERT INTO claims (key, host, pid, token, seen) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET host = excluded.host, pid = excluded.pid, "
                "token = excluded.token, seen = excluded.seen",
                [
                    (key, owner.host, owner.pid, owner.token, now)
                    for key in sorted(wanted - set(held))
                ],
            )
        return held

    def release(
        self, owner: Owner, keys: Iterable[str] | None = None, *, wait: bool = True
    ) -> None:
        """Give back ``owner``'s claims (of ``keys``; all when None): points it will not
        compute, which another process may then take. Without ``wait``, a lock another
        process holds fails it at once (after the database failed: a dead owner's claims
        are taken over anyway)."""
        where = "host = ? AND pid = ? AND token = ?"
        with self._guard("give back the claimed points"):
            mine = f"SELECT 1 FROM claims WHERE {where} LIMIT 1"
            if self._execute(mine, _owner_params(owner)).fetchone() is None:
                return  # nothing to give back: no write, no lock needed
        if not wait:
            assert keys is None, "without waiting, all of the owner's claims go back"
            self._conn.execute(_busy_ms(0))
            self._patient = False
            try:
                with self._guard("give back the claimed points"), self.transaction():
                    self._conn.execute(f"DELETE FROM claims WHERE {where}", _owner_params(owner))
            finally:
                self._patient = True
                self._conn.execute(_busy_ms(NOTICE_AFTER_S))
            return
        with self._guard("give back the claimed points"), self.transaction():
            if keys is None:
                self._execute(f"DELETE FROM claims WHERE {where}", _owner_params(owner))
            else:
                self._conn.executemany(
                    f"DELETE FROM claims WHERE key = ? AND {where}",
                    [(key, *_owner_params(owner)) for key in keys],
                )

    def refresh(self, owner: Owner) -> None:
        """Say ``owner`` is still at work on its claims (``claims.alive``, another host)."""
        with self._guard("refresh the claimed points"), self.transaction():
            self._refresh(owner)

    def _refresh(self, owner: Owner) -> None:
        self._execute(
            "UPDATE claims SET seen = ? WHERE host = ? AND pid = ? AND token = ?",
            (time.time(), *_owner_params(owner)),
        )

    def record(self, row: Row, owner: Owner | None = None) -> None:
        """Insert or replace one point's row in one transaction (attempts counts reruns);
        ``owner``'s claim of the point ends in it (its other claims are refreshed)."""
        values = (
            row.key,
            row.sweep,
            row.overrides,
            row.config,
            row.metrics,
            row.status,
            row.error,
            row.version,
            row.worker,
            row.wall_s,
            row.started,
            row.finished,
        )
        with self._guard(f"store point {row.key[:12]}"), self.transaction():
            self._execute(
                """INSERT INTO results (key, sweep, overrides, config, metrics, status, error,
                       version, worker, wall_s, started, finished, attempts)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)
                   ON CONFLICT (key) DO UPDATE SET
                       sweep = excluded.sweep, overrides = excluded.overrides,
                       config = excluded.config, metrics = excluded.metrics,
                       status = excluded.status, error = excluded.error,
                       version = excluded.version, worker = excluded.worker,
                       wall_s = excluded.wall_s, started = excluded.started,
                       finished = excluded.finished,
                       attempts = CASE typeof(results.attempts)
                           WHEN 'integer' THEN results.attempts + 1 ELSE 1 END""",
                values,
            )
            if owner is not None:
                self._execute(
                    "DELETE FROM claims WHERE key = ? AND host = ? AND pid = ? AND token = ?",
                    (row.key, *_owner_params(owner)),
                )
                self._refresh(owner)

    def sweeps(self) -> list[str]:
        """The names of the sweeps (and plans) whose points the database holds, sorted: the
        spec that ran each row last, and each sweep that recorded points the database holds."""
        with self._guard("read the stored points"):
            found = self._execute("SELECT DISTINCT sweep FROM results")
            names = {str(row[0]) for row in found}
            stored = {str(row[0]) for row in self._execute("SELECT key FROM results")}
            recorded = self._execute(
                "SELECT name FROM meta WHERE substr(name, 1, ?) = ?", (len(_MEMBERS), _MEMBERS)
            )
            for (name,) in list(recorded):
                sweep = str(name)[len(_MEMBERS) :]
                if any(key in stored for key in self._members(sweep) or {}):
                    names.add(sweep)
        return sorted(names)

    def set_members(self, sweep: str, points: Sequence[tuple[str, str]]) -> None:
        """Record ``points`` (each key and its axis values as JSON, in grid order) as sweep
        ``sweep``'s: what reading the sweep back by name returns, in that order and with
        those axis values. A row another spec ran last (the same point: it may have swept
        other axes) is still this one's; one an earlier version of this spec ran, and this
        one does not, is not."""
        value = json.dumps(dict(points))
        with self._guard("record the sweep's points"):
            query = "SELECT value FROM meta WHERE name = ?"
            stored = self._execute(query, (_MEMBERS + sweep,)).fetchone()
            if stored is not None and stored[0] == value:  # as recorded: no write
                return
            with self.transaction():
                self._execute(
                    "INSERT INTO meta (name, value) VALUES (?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    (_MEMBERS + sweep, value),
                )

    def members(self, sweep: str) -> dict[str, str] | None:
        """Key -> axis values (JSON) of every point ``sweep``'s spec has, as last run
        (:meth:`set_members`, recorded before any point runs: the stored rows of an
        interrupted sweep are fewer), in grid order; None when none were recorded (a plan's
        points, or an older database's)."""
        with self._guard("read the sweep's points"):
            return self._members(sweep)

    def _members(self, sweep: str) -> dict[str, str] | None:
        """Key -> axis values (JSON) of the points ``sweep`` recorded, in grid order, or None
        (a plan's, or an older database's: its rows are those whose ``sweep`` column names
        it)."""
        row = self._execute("SELECT value FROM meta WHERE name = ?", (_MEMBERS + sweep,)).fetchone()
        if row is None:
            return None
        points = json_text.loads(str(row[0]), _JSON_DEPTH, constants=False)
        if not isinstance(points, dict) or not all(isinstance(v, str) for v in points.values()):
            raise ValueError(f"the points recorded for sweep {sweep!r} are not keys and values")
        return points

    def rows(
        self, keys: Sequence[str] | None = None, sweep: str | None = None
    ) -> list[dict[str, Any]]:
        """Rows as dicts, each column checked against its type and the JSON columns parsed
        (overrides and config objects, metrics an object or None): `keys`' when given, in
        their order (a spec's grid order; with `sweep`, those it recorded read as its own,
        as below); else a sweep's recorded points
        (:meth:`set_members`) in their order, each with the sweep's name and its own axis
        values, or (none recorded) the rows its name ran last, by key; else every row, by
        sweep and key."""
        if sweep is not None and keys is None:
            with self._guard("read the stored points"):
                members = self._members(sweep)
                query = (
                    f"SELECT {', '.join(COLUMNS)} FROM results "
                    "WHERE sweep = ? AND typeof(key) != 'text'"
                )
                damaged = self._execute(query, (sweep,)).fetchone()
            if damaged is not None:  # one it ran, no point of it now: named, not left out
                self._checked(dict(zip(COLUMNS, damaged, strict=True)))
            if members is not None:  # each row as this sweep's: its name, its axis values
                return self._as_sweep(self._unchecked(list(members)), sweep, members)
        if keys is not None:
            return self._as_sweep(self._unchecked(keys), sweep)
        query = f"SELECT {', '.join(COLUMNS)} FROM results"
        params: list[str] = []
        if sweep is not None:
            query += " WHERE sweep = ?"
            params.append(sweep)
        query += " ORDER BY sweep, key"
        with self._guard("read the stored points"):
            found = [dict(zip(COLUMNS, r, strict=True)) for r in self._execute(query, params)]
        return [row for row in map(self._checked, found) if row is not None]

    def _as_sweep(
        self,
        rows: list[dict[str, Any]],
        sweep: str | None,
        members: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """``rows`` checked, a damaged one left out (``_checked``); with ``sweep``, a row
        another spec ran last (or ran at the same time: whichever stored it) as one of
        ``sweep``'s recorded points (``members``, else read), with its name and axis values,
        so a sweep's rows read the same however the work was shared."""
        if members is None and sweep is not None:
            with self._guard("read the stored points"):
                members = self._members(sweep)
        found = []
        for row in rows:
            own = dict(row)
            checked = self._checked(row)
            if checked is None:
                continue
            if members is not None and checked["sweep"] != sweep and own["key"] in members:
                own["overrides"] = members[own["key"]]
                theirs = self._checked(own)  # the recorded axis values, as stored
                if theirs is None:
                    continue
                checked.update(sweep=sweep, overrides=theirs["overrides"])
            found.append(checked)
        return found

    def _unchecked(self, keys: Sequence[str]) -> list[dict[str, Any]]:
        """The rows of ``keys`` in their order, as stored (only these are checked then:
        another sweep's rows stay apart)."""
        query = f"SELECT {', '.join(COLUMNS)} FROM results"
        with self._guard("read the stored points"):
            found = [dict(zip(COLUMNS, r, strict=True)) for r in self._execute(query)]
        by_key = {row["key"]: row for row in found}
        return [by_key[key] for key in dict.fromkeys(keys) if key in by_key]

    def _checked(self, row: dict[str, Any]) -> dict[str, Any] | None:
        """`row` (all of the table's columns, or some with the key) with its JSON columns
        parsed, or None when a column holds what rdu-sim never writes there: that point
        counts as not computed (a sweep runs it again, a reader leaves it out), every
        other row kept, and one ``DamagedRowWarning`` names the point and the column. A key
        that is not text names no point: a StoreError. The one rule for reading a stored
        row (``rows``, ``existing``)."""
        try:
            return self._parsed(row)
        except _Damage as damage:
            if damage.column == "key":
                point = f"point {str(row['key'])[:12]}"
                raise self._bad_row(point, damage.column, damage.problem) from None
            key = str(row["key"])
            if key not in self._warned:
                self._warned.add(key)
                then = "runs again" if self._writer else "is left out (its sweep runs it again)"
                warn(
                    DamagedRowWarning(
                        f"{self.path}: point {key[:12]}: column {damage.column} holds "
                        f"{damage.problem}; the point counts as not computed and {then}"
                    )
                )
            return None

    @staticmethod
    def _parsed(row: dict[str, Any]) -> dict[str, Any]:
        """`row` with its columns checked against their types and its JSON columns parsed;
        ``_Damage`` naming the first column that holds what rdu-sim never writes there."""
        for column, (types, expected) in _TYPES.items():
            if column not in row:
                continue
            value = row[column]
            bad = not isinstance(value, types) or isinstance(value, bool)
            if bad or (column == "status" and value not in ("done", "failed")):
                raise _Damage(column, f"{_shown(value)}, expected {expected}")
        for column in ("overrides", "config", "metrics"):
            text = row.get(column)
            if text is None:
                continue
            try:
                value = json_text.loads(text, _JSON_DEPTH, constants=True)
            except ValueError as exc:  # JSONDecodeError, JsonLimitError
                raise _Damage(column, f"not valid JSON ({exc})") from None
            if not isinstance(value, dict):
                got = f"JSON {type(value).__name__} {_cut(repr(value))}"
                raise _Damage(column, f"{got}, expected a JSON object")
            row[column] = value
        return row

    def _bad_row(self, point: str, column: str, problem: str) -> StoreError:
        message = f"{point}: column {column} holds {problem}; {_damaged(self._writer)}"
        return StoreError([ConfigIssue(str(self.path), "", message)])

    def make_view(self, axes: Sequence[str], metrics: Sequence[str]) -> None:
        """(Re)build the `results_flat` view: one column per axis and metric (named by
        :func:`flat_name`)."""
        columns = ["key", "sweep", "status"]
        columns += [
            f"json_extract(overrides, {_json_path(a)}) AS {_quote(flat_name(a, 'overrides'))}"
            for a in axes
        ]
        columns += [
            f"json_extract(metrics, {_json_path(m)}) AS {_quote(flat_name(m, 'metrics'))}"
            for m in metrics
            if m not in axes
        ]
        columns += ["error", "wall_s", "version", "started", "finished"]
        create = f"CREATE VIEW results_flat AS SELECT {', '.join(columns)} FROM results"
        with self._guard("rebuild the results_flat view"):
            query = "SELECT sql FROM sqlite_master WHERE type = 'view' AND name = 'results_flat'"
            stored = self._execute(query).fetchone()
            if stored is not None and stored[0] == create:  # the same view: no write
                return
            with self.transaction():
                self._execute("DROP VIEW IF EXISTS results_flat")
                self._execute(create)


def _owner_params(owner: Owner) -> tuple[str, int, str]:
    return owner.host, owner.pid, owner.token


def _listed(names: Sequence[str]) -> str:
    """Column names as a message lists them, the first eight."""
    return ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")


def _cut(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def _shown(value: object) -> str:
    """A stored value as an error quotes it: its SQLite type and its text (long ones cut)."""
    kind = {str: "text", int: "integer", float: "real", bytes: "blob"}.get(type(value), "")
    return f"{kind} {_cut(repr(value))}".strip()
