"""A trace file's lines, read as a stream: bounded memory, strict UTF-8, errors with places.

Each physical line is read with a length limit (``MAX_LINE_BYTES``), so a file of one
500 MB line costs a megabyte, not 500; decoded as UTF-8 on its own (a newline byte never
occurs inside a UTF-8 sequence), so a bad byte is reported with its line and its byte
offset in the file; a UTF-8 byte-order mark at the start is dropped; a NUL byte is
refused. At most ``MAX_TRACE_LINES`` lines are read, so a file of blank lines ends fast.
A last line without a line end, in a file whose lines above end with one, is refused as
cut short (a copy or download that stopped inside it: ``...,527,66`` cut to ``...,527,6``
parses as a row with another value), before any reader parses it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from rdu_sim.config.errors import MAX_ROW_ISSUES, ConfigError, ConfigIssue, more_bad_rows
from rdu_sim.config.text import not_text

MAX_LINE_BYTES = 2**20
"""Longest physical line of a trace (1 MiB)."""

MAX_TRACE_LINES = 4_000_000
"""Most physical lines read from one trace (rows, blank lines and continuations)."""

_BOM = "\ufeff"


class NotTextError(ConfigError):
    """The file's bytes are not text (``config.text``): a problem of the file whatever the
    format it is read as, so no note on how the format was chosen is added."""


class TraceLines:
    """Iterate the decoded lines of an open binary stream (line ends kept, as csv needs).

    ``line`` is the number of the last line yielded (1-based); ``error`` builds a
    ConfigError naming the file and a line. A row's own problem is noted (``bad_row``) and
    the reading goes on, so one error names every bad row (``bad_rows``), as the YAML loader
    names every bad field; a problem of the file as a whole is raised where it is found.
    """

    def __init__(self, stream: BinaryIO, file: str) -> None:
        self._stream = stream
        self.file = file
        self.line = 0
        self.offset = 0  # bytes before the current line
        self.issues: list[ConfigIssue] = []  # the first ``MAX_ROW_ISSUES`` bad rows
        self.bad = 0  # every bad row, those past the issues kept counted only

    def error(self, message: str, field: str = "", line: int | None = None) -> ConfigError:
        """A ConfigError at `line` (default: the current one) of this file."""
        return ConfigError.single(self.file, field, message, line if line else self.line or 1)

    def bad_row(self, message: str, field: str = "", line: int | None = None) -> None:
        """Note a bad row at `line` (default: the current one); the reader skips it and reads
        on (memory: at most ``MAX_ROW_ISSUES`` issues, the rest counted)."""
        self.bad += 1
        if len(self.issues) < MAX_ROW_ISSUES:
            self.issues.extend(self.error(message, field, line).issues)

    def bad_rows(self) -> list[ConfigIssue]:
        """An issue per bad row noted, in line order, the ones past ``MAX_ROW_ISSUES``
        counted in one (``config.errors.bounded``'s words)."""
        more = self.bad - len(self.issues)
        return [*self.issues, *([more_bad_rows(self.file, more)] if more else [])]

    def _read(self) -> bytes:
        try:
            return self._stream.readline(MAX_LINE_BYTES + 1)
        except OSError as exc:
            raise self.error(f"cannot read: {exc.strerror or exc}", line=self.line + 1) from None

    def __iter__(self) -> Iterator[str]:
        while True:
            raw = self._read()
            if not raw:
                return
            self.line += 1
            if self.line > MAX_TRACE_LINES:
                raise self.error(
                    f"more than {MAX_TRACE_LINES:,} lines read before the trace's rows "
                    "ended; a trace is at most that many lines"
                )
            if len(raw) > MAX_LINE_BYTES:
                raise self.error(f"line is longer than {MAX_LINE_BYTES:,} bytes")
            if self.line > 1 and not raw.endswith(b"\n"):
                raise self.error(
                    "the last line has no line end, as every line above has: the file looks "
                    "truncated (cut short in a copy or download, its last value changed); "
                    "if the line is whole, end the file with a newline"
                )
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                head = raw if self.line == 1 else b""
                problem = not_text(head, self.offset + exc.start, raw[exc.start])
                raise NotTextError(self.error(problem).issues) from None
            if "\x00" in text:
                at = self.offset + raw.index(b"\x00")
                raise self.error(f"not a text file: a NUL byte at byte {at}")
            if self.line == 1 and text.startswith(_BOM):
                text = text[1:]
            self.offset += len(raw)
            yield text
