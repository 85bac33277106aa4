"""SIGINT and SIGTERM as one clean stop, raised in Python code, never inside C code.

A command stopped by a signal raises :class:`Interrupted` (a ``KeyboardInterrupt``, so code
that cleans up on one cleans up on this); the CLI's boundary prints it as one line and exits
128 + the signal (130 for SIGINT, 143 for SIGTERM).

Why not Python's own SIGINT handler: it raises wherever CPython checks for signals, and
CPython checks inside C functions too (big-integer multiplication and division check at
every step of their loops). The compiled core (mypyc) multiplies picosecond times through
CPython's big-integer code (any factor of 2^30 or more takes mypyc's slow path) and takes a
failure of that call for an exhausted heap: it prints ``fatal: out of memory`` and aborts
(SIGABRT, nothing saved). So, in a process that called :func:`install`:

- outside :func:`native` regions the handler raises :class:`Interrupted` where the signal is
  handled, as Python's does: between two bytecodes, or out of a blocking wait (a pool's
  results, a FIFO with no reader);
- inside them (where the compiled core runs: the event loops of ``des``, an engine's step)
  the handler is a C function that only queues the signal, and a helper thread raises
  :class:`Interrupted` in the main thread as an asynchronous exception
  (``PyThreadState_SetAsyncExc``), which CPython raises only between two bytecodes of Python
  code, never inside a C function. Compiled code passes the exception on like any other
  from the Python code it calls. Handlers are switched at the outermost region's ends only
  (~20 us; a call inside a region costs nothing more);
- :func:`deferred` sections (a row being written) are not cut: a signal arriving in one is
  raised as it ends;
- with ``once`` (a sweep's pool worker: the terminal's SIGINT and the one its parent forwards
  must stop it once) signals after the first are ignored, but a SIGTERM ends the process;
  with ``hold`` the whole process is a deferred section but for its :func:`raising` ones (a
  pool worker stops in a batch, never while it waits for one);
- a process started inside :func:`blocked` starts with the signals blocked (a pool's worker
  and its fork server: the terminal's signal must not end them before their handlers are in
  place, nor end the fork server the pool needs to see its workers end), until
  :func:`install` unblocks them.

:func:`received` is the first signal, so work that goes on after it (a pool handing back
what its workers finished) can tell. Signals reach only the main thread: in other threads
(Dask's task threads) nothing here is needed, and :func:`native` does nothing.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from queue import SimpleQueue
from types import FrameType
from typing import Any, ParamSpec, TypeVar, cast

__all__ = [
    "SIGNALS",
    "Interrupted",
    "blocked",
    "deferred",
    "handled",
    "handling",
    "ignore_further",
    "install",
    "keeps_on_stop",
    "kept_on_stop",
    "native",
    "raise_lost",
    "raising",
    "received",
    "run_stoppable",
    "start_worker",
    "stop_children",
    "winding_down",
]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals that stop a command cleanly."""

P = ParamSpec("P")
R = TypeVar("R")
Handler = Callable[[int, FrameType | None], Any] | signal.Handlers


class Interrupted(KeyboardInterrupt):
    """A signal stopped the work: ``signum`` (the first received when not given), and
    ``kept``, what the stopped work saved, in words (a sweep: how many of its points)."""

    def __init__(self, signum: int | None = None, kept: str = "") -> None:
        self.signum = int(signum if signum is not None else (_state.received or signal.SIGINT))
        self.kept = kept
        super().__init__(self.signum, kept)

    @property
    def status(self) -> int:
        """The exit status a shell gives a process the signal ended: 128 + the signal."""
        return 128 + self.signum

    def __str__(self) -> str:
        name = signal.Signals(self.signum).name
        return f"interrupted ({name})" + (f": {self.kept}" if self.kept else "")


class _State:
    """This process's handling (signals are the process's: one state, in the main thread)."""

    def __init__(self) -> None:
        self.installed = False
        self.once = False
        self.main = threading.main_thread().ident
        self.handled: tuple[signal.Signals, ...] = ()  # those not ignored when installed
        self.received: int | None = None  # the first signal
        self.native = False  # the main thread is in a native region
        self.held = 0  # deferred sections open
        self.pending: int | None = None  # a signal a deferred section holds
        self.queue: SimpleQueue[int] = SimpleQueue()
        self.helper: threading.Thread | None = None
        self.delivering = False  # the helper thread is raising a signal in the main thread
        self.winding = 0  # sections handing over what a caught stop leaves (winding_down)


_state = _State()


def stop_within(exc: BaseException) -> Interrupted | None:
    """The :class:`Interrupted` that ``exc`` wraps, if any: Python 3.11 turns what a
    descriptor's ``__set_name__`` raises into a RuntimeError, so a signal landing while an
    import builds a (pydantic) class arrives as one, with the stop as its cause."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, Interrupted):
            return current
        seen.add(id(current))
        current = current.__cause__
    return None


def received() -> int | None:
    """The first signal this process received (None: none yet)."""
    return _state.received


def _counts(signum: int) -> bool:
    """Record ``signum``; False when it is to be ignored (``once``, after the first). A
    second SIGTERM ends the process at once (what ``Process.terminate`` means after a
    SIGTERM). A SIGTERM after a SIGINT is the same stop arriving late: a group's SIGTERM and
    the parent's SIGINT (``stop_children``) both pending are delivered SIGINT first, and
    ending there could leave a pool's result queue locked by a worker that died writing."""
    first = _state.received is None
    if first:
        _state.received = signum
    elif _state.once and signum == signal.SIGTERM == _state.received:
        os._exit(128 + signum)
    return first or not _state.once


def _raise(signum: int, frame: FrameType | None) -> None:
    """The handler outside native regions: raise here (or as a deferred section ends)."""
    if not _counts(signum):
        return
    if _state.held:
        _state.pending = signum
        return
    raise Interrupted(signum)


def _deliver() -> None:
    """The helper thread: raise each queued signal in the main thread, asynchronously (at its
    next bytecode of Python code), or leave it to the deferred section the main thread is in."""
    set_async_exc: Any = None
    while True:
        signum = _state.queue.get()
        _state.delivering = True  # until raised: raise_lost must not raise it a second time
        try:
            if not _counts(signum):
                continue
            if _state.held:
                _state.pending = signum
                continue
            if set_async_exc is None:  # loaded at the first signal: most runs never need it
                import ctypes

                set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
                set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
            set_async_exc(_state.main, Interrupted)
        finally:
            _state.delivering = False


def raise_lost() -> None:
    """Raise :class:`Interrupted` if a signal arrived and its exception was lost: code that
    catches every error from the Python it calls swallows it (pydantic-core, serializing a
    tagged union, takes an exception from the callable that names the member for a failed
    lookup, warns and goes on). Called where work may stop (a sweep, between two points),
    so a lost stop costs at most one point. Nothing while a deferred section holds it, while
    the helper thread is raising it, while a caught stop winds down (:func:`winding_down`),
    or with ``once`` (a worker, or a command already ending: :func:`ignore_further`)."""
    held = _state.held or _state.pending is not None or _state.winding or _state.delivering
    if _state.installed and not _state.once and not held and _state.received is not None:
        raise Interrupted(_state.received)


@contextmanager
def winding_down() -> Iterator[None]:
    """The section in which code that caught a stop hands over what the stopped work left (an
    executor yielding what its workers finished before it raises the stop again): the stop
    is being handled, so :func:`raise_lost` leaves it alone."""
    _state.winding += 1
    try:
        yield
    finally:
        _state.winding -= 1


def ignore_further() -> None:
    """Ignore signals from now on: the command is ending (printing its last line, or done).
    Where :func:`install` handles them they are then ignored by the system, so that one
    arriving while the interpreter shuts down (which restores the default action of a
    handled signal) cannot change the exit status either."""
    _state.once = True
    _state.received = _state.received or signal.SIGINT
    if _state.installed and threading.current_thread() is threading.main_thread():
        _switch(signal.SIG_IGN)


def _switch(handler: Handler) -> None:
    for signum in _state.handled:
        signal.signal(signum, handler)


def install(once: bool = False, hold: bool = False) -> None:
    """Handle SIGINT and SIGTERM as the module says, in this process (from its main thread).
    A signal the process was started ignoring (a background job's SIGINT) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("signal handlers are installed from the main thread")
    _state.main = threading.main_thread().ident
    _state.once = once
    _state.received = _state.pending = None
    _state.held = int(hold)
    _state.handled = tuple(s for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN)
    _switch(_raise)
    _state.installed = True
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


@contextmanager
def blocked() -> Iterator[None]:
    """SIGINT and SIGTERM blocked in this thread for the block (one arriving meanwhile is
    handled as it ends): what starts a process starts it with them blocked."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


@contextmanager
def handling(once: bool = False) -> Iterator[None]:
    """:func:`install` for the block; the handlers before it are restored after it."""
    before = {s: signal.getsignal(s) for s in SIGNALS}
    install(once)
    try:
        yield
    finally:
        _state.installed = False
        for signum, handler in before.items():
            signal.signal(signum, handler)


@contextmanager
def handled() -> Iterator[None]:
    """:func:`handling` for the block when this process has not installed it (a script's or
    a notebook's call of the API, where Ctrl-C or a kernel's interrupt would be a bare
    ``KeyboardInterrupt`` cutting work anywhere, its finished results lost): a stop is then
    the :class:`Interrupted` the CLI's is, keeping what the work finished. Nothing when
    installed already, or outside the main thread (which no signal reaches)."""
    if _state.installed or threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        with handling():
            yield
    finally:
        _state.received = _state.pending = None  # the next call starts afresh


def native(function: Callable[P, R]) -> Callable[P, R]:
    """Run ``function`` as a native region: where the compiled core runs (see the module).
    Nested regions, other threads and a process without :func:`install` cost one test."""

    @functools.wraps(function)
    def region(*args: P.args, **kwargs: P.kwargs) -> R:
        if _state.native or not _state.installed or threading.get_ident() != _state.main:
            return function(*args, **kwargs)
        if _state.helper is None:  # started by the first region: most commands have none
            _state.helper = threading.Thread(target=_deliver, name="rdu-sim signals", daemon=True)
            _state.helper.start()
        _state.native = True
        try:
            # a C function (put(signum, block=frame)): no bytecode runs in the handler
            _switch(cast(Handler, _state.queue.put))
            return function(*args, **kwargs)
        finally:  # cut in here, a handler left queueing is safe anywhere (it cannot raise)
            _state.native = False
            _switch(_raise)

    return region


@contextmanager
def raising() -> Iterator[None]:
    """A section a signal stops, in a process installed with ``hold``: a signal held before
    it is raised as it starts."""
    held, _state.held = _state.held, 0
    try:
        if _state.pending is not None:
            signum, _state.pending = _state.pending, None
            raise Interrupted(signum)
        yield
    finally:
        _state.held = held


ORPHAN_POLL_S = 1.0
"""How often a pool worker looks whether the process that started its pool still runs."""


def pool_owner() -> tuple[int, str]:
    """This process as the owner of a pool it starts (``initargs`` of :func:`start_worker`):
    its id and start token (``processes``)."""
    from rdu_sim.processes import start_token

    pid = os.getpid()
    return pid, start_token(pid)


def start_worker(owner: tuple[int, str] | None = None) -> None:
    """A pool worker's initializer (its process started inside :func:`blocked`): a signal
    stops the task it runs (a :func:`raising` section: :func:`run_stoppable`, a sweep's
    batch), once, and is held while it waits for one, so an idle worker never dies of it.
    With the pool's ``owner`` (:func:`pool_owner`), the worker leaves when that process no
    longer runs (:func:`leave_with`): one killed outright (SIGKILL) cannot shut its pool
    down, and its workers, holding their signals, would wait for tasks forever."""
    install(once=True, hold=True)
    if owner is not None:
        leave_with(owner)


def leave_with(owner: tuple[int, str]) -> None:
    """End this pool worker when its pool's ``owner`` (:func:`pool_owner`) no longer runs
    (a thread that looks every :data:`ORPHAN_POLL_S`): nothing it computes could be kept."""
    threading.Thread(target=_leave_when_gone, args=owner, daemon=True).start()


def _leave_when_gone(pid: int, token: str) -> None:
    from rdu_sim.processes import running

    while running(pid, token):
        time.sleep(ORPHAN_POLL_S)
    os._exit(1)


def run_stoppable(function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``function(*args, **kwargs)`` in a pool worker (:func:`start_worker`) as a section a
    signal stops; once one has, every later task stops before it starts."""
    if _state.received is not None:
        raise Interrupted()
    with raising():
        return function(*args, **kwargs)


def stop_children() -> None:
    """Send SIGINT to this process's pool workers (``multiprocessing``'s children): each
    stops the task it runs (:func:`start_worker`), so a pool can shut down at once."""
    import multiprocessing

    for child in multiprocessing.active_children():
        if child.pid is not None:
            with suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGINT)


@contextmanager
def kept_on_stop(kept: str | Callable[[], str]) -> Iterator[None]:
    """An :class:`Interrupted` raised in the block that does not say what was kept says
    ``kept`` (a run: nothing was written), or what ``kept()`` says at the stop (what only
    the stop can tell: which of a run's files were written)."""
    try:
        yield
    except Interrupted as stop:
        if stop.kept:
            raise
        raise Interrupted(stop.signum, kept if isinstance(kept, str) else kept()) from None


def keeps_on_stop(kept: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A command whose every stop says ``kept`` (:func:`kept_on_stop` around its body), for
    commands that write their output only once they finish."""

    def wrap(body: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(body)
        def stopped_saying(*args: P.args, **kwargs: P.kwargs) -> R:
            with kept_on_stop(kept):
                return body(*args, **kwargs)

        return stopped_saying

    return wrap


@contextmanager
def deferred() -> Iterator[None]:
    """A section a signal does not cut (a row being written): one arriving in it is raised
    as it ends."""
    _state.held += 1
    try:
        yield
    finally:
        _state.held -= 1
        if not _state.held and _state.pending is not None:
            signum, _state.pending = _state.pending, None
            raise Interrupted(signum)
