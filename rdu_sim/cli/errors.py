"""The CLI's one error boundary: `error: <file>: <field>: <problem>` in red on stderr, exit 2.

Every command runs inside `RduGroup.invoke` (and `check` checks each file inside
`boundary_errors()` too). Two kinds of failure end there as one line per problem and
status 2, with no traceback:

- bad input, every `InputError` (``rdu_sim.input_errors``): a typo in a YAML file, a model
  that does not fit in memory, a step too large to simulate. They name the file and field
  themselves. Most are prevented where the input is read (rdu_sim.config, the trace
  reader, the serving clock), not caught after a crash;
- the environment, `ENVIRONMENT_ERRORS`: a file that cannot be read or written (every
  errno: a full disk, a read-only folder, a path below a file), a database SQLite refuses,
  text that is not Unicode, memory or recursion exhausted by an input. Writers and the
  sweep store name their path; `environment_message` names what it can for the rest
  (`<stdout>` when the output itself cannot be written). One end of the output is no
  failure: a reader that has left (`rdu-sim examples | head -1`) ends the command quietly
  with the status SIGPIPE gives a command, 141, as `cat` ends under head. Standard error that
  cannot take a line loses the lines, not the work (``rdu_sim.diagnostics``): the command
  runs to its end and leaves with 141 when its reader left, else 2
  (``EXIT_DIAGNOSTICS_LOST``).

A signal (SIGINT, SIGTERM: ``rdu_sim.interrupts``) ends there too: one line saying what
was kept (``Interrupted.kept``, set by the work that kept it), status 128 + the signal.

Anything else is a bug in rdu-sim and keeps its traceback, so it gets reported and fixed
instead of hidden.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click

from rdu_sim.diagnostics import STDERR, console_file
from rdu_sim.input_errors import InputError
from rdu_sim.interrupts import Interrupted, ignore_further, kept_on_stop, stop_within
from rdu_sim.sim_warnings import RduSimWarning

if TYPE_CHECKING:
    from rich.console import Console

EXIT_INPUT_ERROR = 2  # bad input (click uses 2 for usage errors too)
EXIT_READER_GONE = 128 + 13
"""Standard output's reader has left (a broken pipe): the status of a command SIGPIPE ends
(128 + the signal, as ``rdu_sim.interrupts`` ends on SIGINT and SIGTERM), said by nothing."""

ENVIRONMENT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    UnicodeError,
    MemoryError,
    RecursionError,
)
"""Failures of the machine or a file, whatever raised them (with a database's, below)."""


def _database_error() -> tuple[type[BaseException], ...]:
    """``sqlite3.Error`` once a sweep's store has loaded sqlite3 (none can be raised before;
    found as the input errors are, so that a step does not import sqlite3)."""
    sqlite3 = sys.modules.get("sqlite3")
    return (sqlite3.Error,) if sqlite3 is not None else ()


def boundary_errors() -> tuple[type[BaseException], ...]:
    """Everything the boundary turns into `error: ...` and exit 2."""
    return (InputError, *ENVIRONMENT_ERRORS, *_database_error())


def _writes_stdout(exc: BaseException) -> bool:
    """True when `exc` was raised writing standard output: a stdout stream (or a console
    holding one) is a local of one of the innermost frames (click.echo, rich's console)."""
    streams = {
        id(stream)
        for base in (sys.stdout, sys.__stdout__)
        for stream in (base, getattr(base, "buffer", None))
        if stream is not None
    }
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    rich_console = sys.modules.get("rich.console")  # a Console exists only once it is loaded
    console_type = getattr(rich_console, "Console", None)
    for frame in frames[-3:]:
        for value in frame.f_locals.values():
            if console_type is not None and isinstance(value, console_type):
                value = value.file  # rich's console writes to sys.stdout unless told
            if id(value) in streams:
                return True
    return False


def _stdout_broken(exc: BaseException) -> bool:
    """True when `exc` came from, or standard output cannot take, what is written to it; it
    is then pointed at /dev/null, so the interpreter's own flush at exit cannot fail again."""
    broken = _writes_stdout(exc)
    try:
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):  # AttributeError: no stdout at all
        broken = True
    if broken:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass
    return broken


def _reader_gone(exc: BaseException) -> bool:
    """True when `exc` is standard output's reader having left (`| head -1` once head has
    read its line): not a failure, the end a command piped to head gets. Standard output is
    then pointed at /dev/null (``_stdout_broken``), so nothing more is said."""
    return (
        isinstance(exc, BrokenPipeError)
        and exc.filename is None
        and exc.filename2 is None
        and _stdout_broken(exc)
    )


def _flush_stdout() -> None:
    """Flush standard output; an OSError naming ``<stdout>`` when it cannot take what was
    printed, or when there is none (`>&-`: Python then sets sys.stdout to None, and click
    and rich print to nothing)."""
    if sys.stdout is None:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF), "<stdout>")
    sys.stdout.flush()


def environment_message(exc: BaseException) -> str:
    """One line for a failure of the environment, naming the path where there is one."""
    if isinstance(exc, OSError):
        problem = exc.strerror or errno.errorcode.get(exc.errno or 0) or str(exc)
        paths = [str(p) for p in (exc.filename, exc.filename2) if p is not None]
        if not paths and _stdout_broken(exc):
            paths = ["<stdout>"]
        where = " -> ".join(paths)
        return f"{where}: {problem}" if where else f"input/output error: {problem}"
    if isinstance(exc, _database_error()):
        return f"database error: {exc}"
    if isinstance(exc, UnicodeError):
        return f"text that is not valid Unicode: {exc}"
    if isinstance(exc, MemoryError):
        return "out of memory: the input asks for more than this machine has"
    return "the input is nested too deeply (Python's recursion limit)"


def message_of(exc: BaseException) -> str:
    """What the boundary prints for `exc` (one line per problem)."""
    if isinstance(exc, InputError):
        return str(exc)
    return environment_message(exc)


def _console() -> Console:
    from rich.console import Console

    # soft_wrap: never insert line breaks into messages (scripts and tests grep them); a
    # standard error that cannot take them drops them (``diagnostics``)
    return Console(file=console_file(), soft_wrap=True, highlight=False)


MAX_ERROR_LINE_CHARS = 2000  # a message quoting a 5000-character input names no better


def print_error(message: str) -> None:
    """Print each line of `message` as `error: <line>` in red on stderr (each cut in the
    middle past MAX_ERROR_LINE_CHARS)."""
    from rdu_sim.config.show import cut_middle

    console = _console()
    for line in str(message).splitlines() or [""]:
        console.print(f"error: {cut_middle(line, MAX_ERROR_LINE_CHARS)}", style="red", markup=False)


def print_warning(message: str) -> None:
    """A yellow `warning: <message>` on stderr."""
    _console().print(f"warning: {message}", style="yellow", markup=False)


def print_interrupted(stop: Interrupted) -> None:
    """The one line a stopped command ends with: the signal and what was kept (a signal
    after it is ignored: it would cut the line)."""
    ignore_further()
    _console().print(str(stop), style="yellow", markup=False)


def fail(message: str, status: int = EXIT_INPUT_ERROR) -> NoReturn:
    """Print an error and leave with `status` (2 for bad input)."""
    print_error(message)
    raise SystemExit(status)


_SHOW_WARNING = warnings.showwarning


def _warning_printer() -> Callable[..., None]:
    """A command's ``warnings.showwarning``: rdu-sim's own warnings (``RduSimWarning``s: a
    slow step) as one `warning:` line each, once a command whichever line raised it (a
    calibration's runs warn inside SciPy's search and after it; a worker's come back:
    ``sim_warnings.say``); others as Python's."""
    said: set[str] = set()

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        if not issubclass(category, RduSimWarning):
            _SHOW_WARNING(message, category, filename, lineno, file, line)
        elif str(message) not in said:
            said.add(str(message))
            print_warning(str(message))

    return show


def print_usage_error(exc: click.UsageError) -> None:
    """Click's usage error (a bad option value, a missing argument, an unknown command) as
    the house's one `error:` line, with where help is (click printed a usage line, a hint
    and "Error: ...")."""
    where = exc.ctx.command_path if exc.ctx is not None else "rdu-sim"
    print_error(f"{exc.format_message().rstrip('.')} (see '{where} --help')")


EXIT_DIAGNOSTICS_LOST = EXIT_INPUT_ERROR
"""Standard error could not take what the command said (``diagnostics``: a full disk
behind ``2>log``, ``2>/dev/full``): the work ran and its files were written, but its plan,
warnings or error lines are lost, as a full standard output is a failure of the
environment (status 2); a reader of standard error that left (``2>&1 | head -1``) ends it
as one of standard output does (``EXIT_READER_GONE``). Never 1, which says a point failed."""


def _diagnostics_kept(ctx: click.Context) -> None:
    """Leave with the status that says standard error lost the command's diagnostics, if it
    did (``diagnostics.STDERR.lost``)."""
    lost = STDERR.lost
    if lost is not None:
        gone = isinstance(lost, BrokenPipeError)
        ctx.exit(EXIT_READER_GONE if gone else EXIT_DIAGNOSTICS_LOST)


class RduGroup(click.Group):
    """A click group whose commands (and nested groups) report failures uniformly."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        """Parse the command line; a signal while it is parsed ends as one in a command
        does (click would print "Aborted!" and exit 1)."""
        try:
            return super().make_context(*args, **kwargs)
        except Interrupted as stop:
            print_interrupted(stop)
            raise click.exceptions.Exit(stop.status) from None
        except click.UsageError as exc:
            print_usage_error(exc)
            raise click.exceptions.Exit(exc.exit_code) from None

    def kept_at_stop(self, ctx: click.Context) -> str:
        """What a stop of the command ``ctx`` runs keeps when the command says nothing
        itself ('': nothing to say; ``LazyGroup``: each command's)."""
        return ""

    def invoke(self, ctx: click.Context) -> Any:
        STDERR.reset()  # this command's diagnostics (a test runs many in one process)
        try:
            with warnings.catch_warnings(), kept_on_stop(lambda: self.kept_at_stop(ctx)):
                warnings.showwarning = _warning_printer()
                try:
                    result = super().invoke(ctx)
                except KeyboardInterrupt as stop:  # raised by code (a plugin), not a signal:
                    if isinstance(stop, Interrupted):  # the stop it means (click: "Aborted!")
                        raise
                    raise Interrupted(signal.SIGINT) from None
            _flush_stdout()  # a full disk behind `> file` fails here, not at exit
            _diagnostics_kept(ctx)
            return result
        except boundary_errors() as exc:
            if _reader_gone(exc):
                ctx.exit(EXIT_READER_GONE)
            print_error(message_of(exc))
            ctx.exit(EXIT_INPUT_ERROR)
        except SystemExit as stop:
            _diagnostics_kept(ctx)  # a sweep's failed points' warning was lost with them
            pipe = stop.__context__
            if stop.code != 1 or not isinstance(pipe, BrokenPipeError):
                raise
            # rich's Console.on_broken_pipe: it points stdout at /dev/null and exits 1, the
            # status of a sweep's failed points; a pipe nobody reads ends as it does for
            # click.echo
            if _reader_gone(pipe):
                ctx.exit(EXIT_READER_GONE)
            print_error(environment_message(pipe))
            ctx.exit(EXIT_INPUT_ERROR)
        except Interrupted as stop:
            print_interrupted(stop)
            ctx.exit(stop.status)
        except click.UsageError as exc:  # a subcommand's arguments: the house form too
            print_usage_error(exc)
            ctx.exit(exc.exit_code)
        except RuntimeError as exc:  # a stop wrapped on its way (interrupts.stop_within)
            wrapped = stop_within(exc)
            if wrapped is None:
                raise
            print_interrupted(wrapped)
            ctx.exit(wrapped.status)
