"""Standard error that may fail without stopping the work it reports on.

Progress, plan lines, warnings and error lines go to standard error. When it cannot take
them (``2>/dev/full``, a disk that filled behind ``2>log``, ``2>&1 | head -1`` once head has
left), a sweep stopped at its first progress line (status 1, as if a point had failed, and
its export never written) or after its last point. Here the first write standard error
refuses is kept (``lost``), that stream is pointed at /dev/null (so nothing more is tried,
and the interpreter's own flush at exit cannot fail again: CPython would end with status
120), and every later line is dropped: the work goes on, its files are written, and the CLI
ends with the status that says the diagnostics were lost (``cli.errors``).

Rich consoles write here through :data:`STDERR` (a stand-in for ``sys.stderr``, whichever
stream that is when written: a test's captured one too).
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any, cast


class QuietStderr:
    """``sys.stderr`` for a rich Console: writes go through until one fails, then none."""

    def __init__(self) -> None:
        self.lost: OSError | None = None

    def reset(self) -> None:
        """Forget a loss (a new command in the same process: a test's CLI runner)."""
        self.lost = None

    @property
    def encoding(self) -> str:
        return str(getattr(sys.stderr, "encoding", None) or "utf-8")

    def isatty(self) -> bool:
        try:
            return bool(sys.stderr.isatty())
        except (OSError, ValueError, AttributeError):
            return False

    def fileno(self) -> int:
        return int(sys.stderr.fileno())

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                sys.stderr.write(text)
            except (OSError, ValueError, AttributeError) as exc:  # no stderr: AttributeError
                self._lose(exc)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                sys.stderr.flush()
            except (OSError, ValueError, AttributeError) as exc:
                self._lose(exc)

    def _lose(self, exc: Exception) -> None:
        """Keep the loss, and point standard error's descriptor at /dev/null so what its
        buffer still holds is flushed there, not tried again at exit."""
        self.lost = exc if isinstance(exc, OSError) else OSError(str(exc))
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stderr.fileno())
            os.close(devnull)
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass

    def __getattr__(self, name: str) -> Any:  # what else a console asks of its file
        return getattr(sys.stderr, name)


STDERR = QuietStderr()
"""The process's standard error as the CLI and the sweep's progress write it."""


def console_file() -> IO[str]:
    """:data:`STDERR` as the file a rich Console writes (it uses only write, flush, isatty,
    fileno and encoding)."""
    return cast("IO[str]", STDERR)
