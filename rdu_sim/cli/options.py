"""Options shared by the commands that take a workload, so they read the same everywhere."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from rdu_sim.cli.errors import fail

F = TypeVar("F", bound=Callable[..., Any])


def _given_as(param: click.Parameter | None) -> str:
    """How the command line names ``param``: an option by its flag, an argument by its
    metavar (``WORKLOAD``)."""
    if isinstance(param, click.Option) and param.opts:
        return param.opts[-1]
    return param.human_readable_name if param is not None else "the path"


class GivenPath(click.Path):
    """A path the command line gave, as a Path. An empty or blank one is the project's one
    ``error:`` line naming the argument or option, exit 2: click reads "" as Path(""), the
    working folder, and ``rdu-sim run ""`` said ``.: is a directory``."""

    def __init__(self) -> None:
        super().__init__(path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            fail(f"{_given_as(param)}: an empty path names nothing; give a path")
        return super().convert(value, param, ctx)


class FilePath(GivenPath):
    """The path of a file an option names (``--trace``, ``--db``, ``--export``, ``-o``), as a
    Path; a folder there is the project's one ``error:`` line naming it and the option, exit
    2 (``click.Path(dir_okay=False)`` printed click's three-line usage error)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = super().convert(value, param, ctx)
        if not isinstance(path, Path):
            return path
        try:
            # a name ending in a separator is a folder's, made or not (Path drops the slash)
            folder = path.is_dir() or str(value).endswith(("/", os.sep))
        except OSError as exc:  # a name too long: the write error it will be
            fail(f"{path}: cannot write: {exc.strerror or exc}")
        if folder:
            fail(f"{value}: a folder, not a file: {_given_as(param)} takes a file's path")
        return path


class TokenCount(click.types.IntParamType):
    """A token-count option (``--context 8k``): read as a config's token fields are
    (``config.units.parse_tokens``: ``8192``, ``8k``, ``1M``), from ``low`` to their most
    (``config.units.MAX_TOKENS``; imported when an option is read, not when --help is)."""

    name = "tokens"

    def __init__(self, low: int) -> None:
        self.low = low

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from rdu_sim.config.units import MAX_TOKENS, UnitError, parse_tokens

        try:
            count = parse_tokens(value)
        except UnitError as exc:
            self.fail(str(exc), param, ctx)
        if not self.low <= count <= MAX_TOKENS:
            self.fail(f"{count} is not in the range {self.low}<=x<={MAX_TOKENS}", param, ctx)
        return count


def overrides_option(func: F) -> F:
    """`--set PATH=VALUE` (repeatable): edit a workload field, or a hardware one with `hw.`.
    Each is marked as given at ``--set`` (``config.overrides.GivenText``), which it keeps in
    any list the command builds from them: an error at a field one set says ``(from --set
    PATH)``, one at a field the command set itself names the command's own origin."""

    def marked(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> Any:
        from rdu_sim.config.overrides import SET, given

        return tuple(given(value, SET))

    return click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="PATH=VALUE",
        callback=marked,
        help="Override a workload field, e.g. serving.batch_slots=32; prefix hw. for the "
        "hardware file, e.g. 'hw.socket.hbm.bandwidth=2.4 TB/s'. Repeatable.",
    )(func)


def overlays_option(func: F) -> F:
    """`--overlay FILE` (repeatable): a calibrated overlay (`rdu-sim calibrate` writes them)
    passed back, its values on every row of the machine or stack it extends."""
    return click.option(
        "--overlay",
        "overlays",
        multiple=True,
        type=GivenPath(),
        help="A calibrated overlay (rdu-sim calibrate writes them) passed back: its values on "
        "every measured row of the machine or stack it extends. Repeatable.",
    )(func)


def workload_argument(func: F) -> F:
    """The WORKLOAD file argument (its existence is checked by the loader, exit 2)."""
    return click.argument("workload", type=GivenPath())(func)


def step_shape_options(func: F) -> F:
    """`--phase`, `--batch`, `--tokens`, `--context`: one step's shape, with the meaning
    `rdu_sim.serving.step_shape` gives them (`rdu-sim step` and `inspect graph` alike)."""
    options = [
        click.option(
            "--phase",
            type=click.Choice(["decode", "prefill"]),
            default="decode",
            show_default=True,
        ),
        click.option(
            "--batch",
            type=click.IntRange(1, 1_000_000),
            default=None,
            help="Batch slots (default: the workload's, its batch capacity for auto; "
            "1 prompt for prefill). The step runs on the memory plan of the workload's slots "
            "(or of the batch when larger), as a served step of this batch does: fewer slots "
            "than the workload's leave its weights where its slots put them.",
        ),
        click.option(
            "--tokens",
            type=TokenCount(1),
            default=None,
            help="New tokens per slot (default: 1 for decode; for prefill the workload's typical "
            "prompt as a server runs it: padded to its bucket, the prompt run's prefill_s; with "
            "serving.prefill_chunk_tokens its first chunk, where prefill_s sums all).",
        ),
        click.option(
            "--context",
            type=TokenCount(0),
            default=None,
            help="decode: tokens of the longest sequence (default: the longest the KV policy "
            "keeps); the step attends to what the policy keeps of them, at most its slot, "
            "rounded up to its decode bucket. prefill: tokens cached before the prompt "
            "(default 0).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


MAX_WORKERS = 4096
"""Most ``--workers`` a sweep or a plan accepts (more start at most 4 a core:
``sweep.executors.local_workers``)."""


def workers_option(*, most: int, default: int | None, help: str) -> Callable[[F], F]:
    """``--workers N`` of a command that runs its simulations in processes: 1 to ``most``,
    checked as it is parsed (:func:`check_count`: the house's one error line)."""

    def checked(_ctx: click.Context, _param: click.Parameter, value: int | None) -> int | None:
        check_count("--workers", value, 1, most)
        return value

    return click.option(
        "--workers",
        type=int,
        default=default,
        show_default=default is not None,
        callback=checked,
        help=help,
    )


def check_count(option: str, value: int | None, low: int, high: int) -> None:
    """A count option outside ``low..high`` exits 2 with the house's one line, ``error:
    --workers: must be at least 1 (got 0)`` (click's own range check prints its usage block
    and ``Error:``); None (not given) passes. The command calls it first thing."""
    if value is None or low <= value <= high:
        return
    bound = f"at least {low}" if value < low else f"at most {high}"
    fail(f"{option}: must be {bound} (got {value})")


@contextmanager
def step_shape_errors(
    workload: Path, batch: int | None = None, context: int | None = None
) -> Iterator[None]:
    """A step the workload cannot run (`StepShapeError`) exits 2 naming the option; so does
    a ``batch`` given beyond the workload's slots whose KV cache does not fit, its remedy
    ``--batch`` and a shorter ``context`` said not to shrink a slot
    (`SlotsCapacityError.given_by`; a memory plan of the workload's own slots names its
    field: ``compiler.errors.at_slots``)."""
    from rdu_sim.compiler.errors import SlotsCapacityError
    from rdu_sim.serving.step_shape import StepShapeError

    try:
        yield
    except StepShapeError as exc:
        fail(f"{workload}: --{exc.option}: {exc}")
    except SlotsCapacityError as exc:
        if batch is None or exc.field is not None:
            raise
        fail(f"{workload}: --batch: {exc.given_by('--batch', context)}")
