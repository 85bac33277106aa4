"""The calibration's evaluation cache: one JSON line per simulated unit, read back as input.

Each line is ``{"key": SHA256, "unit": NAME, "kind": "row"|"figures", "values": [...],
"batch_slots": [...]}``: the unit's key (``rdu_sim.validate.targets``: everything its result
depends on, hashed) and what the simulation gave. A line is appended (and flushed) as soon as
its unit is simulated, so a fit stopped at any moment keeps every finished simulation, and
the same command run again replays them and goes on. The cache is input, so it is checked
like input: a regular file, bounded, every complete line a JSON object of that shape with
values a simulation could give (a row's finite and inside (0, 1e12]; a figure's finite or
null for "not measured"), or one ConfigError naming the file and line (remove that line, or
the file). A last line cut short (no newline: the process stopped while writing it, or a
crash left NUL bytes) is dropped with a one-line warning, the lines before it reused, and
it is cut off before the next append: an interrupted run loses nothing it had finished.
"""

from __future__ import annotations

import json
import math
import re
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

from rdu_sim.config.errors import ConfigError, WriteError
from rdu_sim.config.yaml_io import file_problem, read_complete_lines
from rdu_sim.interrupts import deferred
from rdu_sim.sim_warnings import RduSimWarning, warn
from rdu_sim.validate.targets import Evaluated

MAX_CACHE_BYTES = 256 << 20
MAX_VALUE = 1e12
"""Largest magnitude a cached value may have (a simulated second count or tokens/s far
beyond any run)."""
_KEY = re.compile(r"[0-9a-f]{64}")
KINDS = ("row", "figures")


class CutLineWarning(RduSimWarning):
    """A cache's last line cut short, dropped (the CLI prints it as one `warning:` line)."""


class EvaluationCache:
    """The cache file at ``path`` (None: kept in memory only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, tuple[str, Evaluated, int]] = {}  # key -> kind, values, line
        self._complete_bytes = 0  # where the last complete line ends
        self._lines = 0  # complete lines in the file: simulations a rerun reuses
        self._stream: IO[str] | None = None
        if path is not None:
            self._read(path)

    def _fail(self, line: int, message: str) -> ConfigError:
        return ConfigError.single(
            f"{self.path}:{line}",
            "",
            f"{message} (an evaluation cache: remove that line to reuse the others, or "
            "delete the file to simulate everything again)",
        )

    def _read(self, path: Path) -> None:
        try:
            if not path.exists():
                return
        except (OSError, ValueError) as exc:
            raise ConfigError.single(str(path), "", f"cannot open: {exc}") from None
        text, cut = read_complete_lines(path, MAX_CACHE_BYTES, "an evaluation cache")
        lines = text.splitlines()
        self._complete_bytes = len(text.encode("utf-8"))  # the complete lines, as read
        self._lines = sum(1 for line in lines if line.strip())
        for number, line in enumerate(lines, start=1):
            if line.strip():
                self._entry(line, number)
        if cut:  # no newline at its end: the process stopped while writing it
            warn(
                CutLineWarning(
                    f"{path}:{len(lines) + 1}: the last line was cut short (a run stopped "
                    f"while writing it): dropped; the {len(self.entries)} simulation(s) "
                    "before it are reused"
                )
            )

    def _entry(self, line: str, number: int) -> None:
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            raise self._fail(number, "not a JSON line") from None
        if not isinstance(entry, dict):
            raise self._fail(number, "not a JSON object")
        key, kind = entry.get("key"), entry.get("kind")
        values, slots = entry.get("values"), entry.get("batch_slots", [])
        if not (isinstance(key, str) and _KEY.fullmatch(key)):
            raise self._fail(number, "key is not a SHA-256 digest")
        if kind not in KINDS:
            raise self._fail(number, f"kind must be one of {KINDS}, got {kind!r}")
        if not isinstance(values, list) or not values or len(values) > 1000:
            raise self._fail(number, "values is not a list of 1 to 1000 numbers")
        read = tuple(self._checked_value(v, kind, number) for v in values)
        if not (
            isinstance(slots, list)
            and all(
                isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= 1 << 31 for s in slots
            )
            and len(slots) in (0, len(values))
        ):
            raise self._fail(number, "batch_slots is not a list of counts, one per value")
        self.entries[key] = (str(kind), Evaluated(read, tuple(slots)), number)

    def _checked_value(self, value: Any, kind: str, number: int) -> float:
        if value is None and kind == "figures":
            return math.nan  # a figure the suite could not measure
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._fail(number, f"a value is {value!r}, not a number")
        read = float(value)
        low = 0.0 if kind == "row" else -MAX_VALUE
        if not (math.isfinite(read) and low < read <= MAX_VALUE):
            where = "(0, 1e12]" if kind == "row" else "[-1e12, 1e12]"
            raise self._fail(number, f"a value is {read!r}, outside {where}")
        return read

    def get(self, key: str, kind: str, size: int) -> Evaluated | None:
        """The unit's cached result, or None; a ConfigError when the line under its key is
        of another kind or holds another number of values."""
        found = self.entries.get(key)
        if found is None:
            return None
        cached_kind, evaluated, number = found
        if cached_kind != kind or len(evaluated.values) != size:
            raise self._fail(
                number,
                f"holds {len(evaluated.values)} {cached_kind} value(s) where this {kind} "
                f"unit has {size}",
            )
        return evaluated

    def ready(self) -> None:
        """Open the file for appending now (creating it), so that a path that cannot be
        written fails before anything is simulated."""
        if self.path is not None:
            try:
                self._open()
            except OSError as exc:
                raise WriteError.from_os(self.path, exc) from None

    def put(self, key: str, kind: str, unit: str, evaluated: Evaluated) -> None:
        """Keep a result, and append it to the file at once."""
        self.entries[key] = (kind, evaluated, 0)
        if self.path is None:
            return
        values = [None if math.isnan(v) else v for v in evaluated.values]
        line = {
            "key": key,
            "unit": unit,
            "kind": kind,
            "values": values,
            "batch_slots": list(evaluated.batch_slots),
        }
        text = json.dumps(line) + "\n"
        try:
            stream = self._open()
            with deferred():  # a signal does not cut the line
                stream.write(text)
                stream.flush()
        except OSError as exc:
            raise self._write_error(exc) from None
        self._complete_bytes += len(text.encode("utf-8"))
        self._lines += 1

    def _write_error(self, exc: OSError) -> WriteError:
        """The error of a write that failed (a full disk), naming the file and what it
        kept; the stream is dropped, its unwritten line with it (closing it would only
        fail again: the next open cuts the file back to its last complete line)."""
        if self._stream is not None:
            with suppress(OSError):
                self._stream.close()  # the file is closed even when the flush fails
            self._stream = None
        kept = (
            f"; the {self._lines} simulation(s) stored before it are kept: free space and "
            "run the same command again to resume from them"
        )
        return WriteError.from_os(self.path, exc, kept)

    def _open(self) -> IO[str]:
        assert self.path is not None
        if self._stream is None:
            problem = file_problem(self.path) if self.path.exists() else None
            if problem is not None:
                raise ConfigError.single(str(self.path), "", f"the evaluation cache: {problem}")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            stream = self.path.open("a", encoding="utf-8")
            stream.truncate(self._complete_bytes)  # a line cut short is dropped
            self._stream = stream
        return self._stream

    def close(self) -> None:
        """Close the file (every line is already flushed)."""
        if self._stream is not None:
            try:
                self._stream.close()
            except OSError as exc:
                raise self._write_error(exc) from None
            self._stream = None
