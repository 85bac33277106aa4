"""Stopping on SIGINT or SIGTERM at a safe point: what a long command does with Ctrl-C.

Inside :func:`stop_requests`, the first SIGINT or SIGTERM only records the request; the
command checks it between units of work (:meth:`StopRequest.check`, which raises
:class:`Interrupted` there), so nothing is cut in the middle of a write or inside compiled
code. A second signal raises at once. The command catches :class:`Interrupted`, says in one
line what it kept, and exits with :attr:`Interrupted.status` (128 + the signal's number:
130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """A signal asked the command to stop (a BaseException: no ``except Exception`` keeps
    the command going)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def status(self) -> int:
        """The exit status a shell expects after this signal."""
        return 128 + self.signum

    @property
    def name(self) -> str:
        """SIGINT, SIGTERM."""
        return signal.Signals(self.signum).name


class StopRequest:
    """The signal received, if any."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def check(self) -> None:
        """Raise :class:`Interrupted` when a stop was asked."""
        if self.signum is not None:
            raise Interrupted(self.signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            raise Interrupted(signum)  # a second signal: stop now
        self.signum = signum


@contextlib.contextmanager
def stop_requests() -> Iterator[StopRequest]:
    """Record SIGINT and SIGTERM while inside (main thread only; elsewhere nothing
    changes); the handlers before are restored on the way out."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {sig: signal.signal(sig, request._handle) for sig in SIGNALS}
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
