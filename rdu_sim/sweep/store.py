"""SQLite storage of sweep results: one row per point in table `results`, keyed by config hash.

Only the sweep's parent process writes. Every write is one transaction (`BEGIN IMMEDIATE` ...
`COMMIT`) in WAL mode, so a sweep killed at any instant leaves every row either fully written
or absent: resume then reruns exactly the points without a finished row.

The table's columns are fixed (metrics live in a JSON column), so one database can hold
sweeps with different metrics. For SQL users a view, `results_flat`, spreads the current
spec's axes and metrics into columns with json_extract; it is rebuilt on each run and never
holds data of its own.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdu_sim.config.errors import ConfigError

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
    version   TEXT NOT NULL,             -- rdu_sim version of the process that ran it
    worker    TEXT,                      -- host:pid that ran it
    wall_s    REAL,                      -- seconds the evaluation took
    started   TEXT,                      -- ISO 8601 UTC
    finished  TEXT,                      -- ISO 8601 UTC
    attempts  INTEGER NOT NULL DEFAULT 1 -- times this point was run to completion or failure
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

COLUMNS = (
    "key",
    "sweep",
    "overrides",
    "config",
    "metrics",
    "status",
    "error",
    "version",
    "worker",
    "wall_s",
    "started",
    "finished",
    "attempts",
)


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


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _json_path(name: str) -> str:
    return "'$." + json.dumps(name).replace("'", "''") + "'"


class Store:
    """An open results database. Use as a context manager; close() when done."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = path
        if not create and not path.is_file():
            raise ConfigError.single(str(path), "", "no such sweep database")
        try:
            self._conn = sqlite3.connect(str(path), timeout=60.0, isolation_level=None)
        except sqlite3.Error as exc:
            raise ConfigError.single(str(path), "", f"cannot open the database: {exc}") from None
        try:
            self._conn.execute("PRAGMA busy_timeout = 60000")
            if create:
                self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA synchronous = NORMAL")
                with self.transaction():
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            self._conn.execute(statement)
                    self._conn.execute(
                        "INSERT OR IGNORE INTO meta (name, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
            self._check_schema()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise ConfigError.single(str(path), "", f"not a sweep database: {exc}") from None

    def _check_schema(self) -> None:
        row = self._conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        if row is None or int(row[0]) != SCHEMA_VERSION:
            found = "none" if row is None else row[0]
            raise ConfigError.single(
                str(self.path),
                "",
                f"sweep database schema {found}, this rdu-sim writes schema {SCHEMA_VERSION}",
            )

    def transaction(self) -> _Transaction:
        """`with store.transaction():` runs its statements atomically."""
        return _Transaction(self._conn)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (committed data is already safe on disk)."""
        self._conn.close()

    def existing(self, keys: Iterable[str] | None = None) -> dict[str, Existing]:
        """Status and stored metric names of the given keys (all rows when None)."""
        wanted = None if keys is None else set(keys)
        found: dict[str, Existing] = {}
        for key, status, metrics in self._conn.execute("SELECT key, status, metrics FROM results"):
            if wanted is not None and key not in wanted:
                continue
            names = frozenset(json.loads(metrics)) if metrics else frozenset()
            found[key] = Existing(status, names)
        return found

    def record(self, row: Row) -> None:
        """Insert or replace one point's row in one transaction (attempts counts reruns)."""
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
        with self.transaction():
            self._conn.execute(
                """INSERT INTO results (key, sweep, overrides, config, metrics, status, error,
                       version, worker, wall_s, started, finished, attempts)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)
                   ON CONFLICT (key) DO UPDATE SET
                       sweep = excluded.sweep, overrides = excluded.overrides,
                       config = excluded.config, metrics = excluded.metrics,
                       status = excluded.status, error = excluded.error,
                       version = excluded.version, worker = excluded.worker,
                       wall_s = excluded.wall_s, started = excluded.started,
                       finished = excluded.finished, attempts = results.attempts + 1""",
                values,
            )

    def rows(
        self, keys: Sequence[str] | None = None, sweep: str | None = None
    ) -> list[dict[str, Any]]:
        """Rows as dicts (JSON columns still text), oldest finished first."""
        query = f"SELECT {', '.join(COLUMNS)} FROM results"
        params: list[str] = []
        if sweep is not None:
            query += " WHERE sweep = ?"
            params.append(sweep)
        query += " ORDER BY finished, key"
        wanted = None if keys is None else set(keys)
        return [
            dict(zip(COLUMNS, r, strict=True))
            for r in self._conn.execute(query, params)
            if wanted is None or r[0] in wanted
        ]

    def make_view(self, axes: Sequence[str], metrics: Sequence[str]) -> None:
        """(Re)build the `results_flat` view: one column per axis and metric."""
        columns = ["key", "sweep", "status"]
        columns += [f"json_extract(overrides, {_json_path(a)}) AS {_quote(a)}" for a in axes]
        columns += [
            f"json_extract(metrics, {_json_path(m)}) AS {_quote(m)}"
            for m in metrics
            if m not in axes
        ]
        columns += ["error", "wall_s", "version", "started", "finished"]
        with self.transaction():
            self._conn.execute("DROP VIEW IF EXISTS results_flat")
            self._conn.execute(
                f"CREATE VIEW results_flat AS SELECT {', '.join(columns)} FROM results"
            )


class _Transaction:
    """BEGIN IMMEDIATE on entry; COMMIT on success, ROLLBACK on any exception."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None:
            self._conn.execute("COMMIT")
        else:
            self._conn.execute("ROLLBACK")


def decode(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row with its JSON columns parsed."""
    out = dict(row)
    for column in ("overrides", "config", "metrics"):
        text = out.get(column)
        out[column] = json.loads(text) if text else None
    return out
