"""Progress of a running sweep: a rich bar on stderr (points done, failed, rate, time left).

The sweep driver calls a Reporter; the library never prints by itself unless asked
(`progress=True`), so notebooks and tests stay quiet.
"""

from __future__ import annotations

from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from rdu_sim import human
from rdu_sim.diagnostics import console_file
from rdu_sim.sweep.worker import Outcome


class Reporter(Protocol):
    """What the sweep driver tells about its progress."""

    def message(self, text: str) -> None:
        """A line of information ("4 points already done")."""

    def start(self, name: str, total: int) -> None:
        """Running `total` points begins."""

    def advance(self, outcome: Outcome) -> None:
        """One point finished (done or failed)."""

    def close(self) -> None:
        """The run ended (normally or not)."""


class Silent:
    """A Reporter that says nothing."""

    def message(self, text: str) -> None:
        pass

    def start(self, name: str, total: int) -> None:
        pass

    def advance(self, outcome: Outcome) -> None:
        pass

    def close(self) -> None:
        pass


class _RateColumn(ProgressColumn):
    """Points per second, or seconds per point when slower than one a second."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if not speed:
            return Text("-- pt/s", style="progress.data.speed")
        shown = human.rate(speed, "pt/s") if speed >= 1 else f"{human.duration(1 / speed)}/pt"
        return Text(shown, style="progress.data.speed")


class RichReporter:
    """Messages and a rich progress bar on stderr (`bar=False`: the messages only). A
    standard error that cannot take them ends them, never the sweep (``diagnostics``)."""

    def __init__(self, console: Console | None = None, *, bar: bool = True) -> None:
        # standard error that fails quietly: a full or closed one stops the progress, not
        # the sweep (``diagnostics``)
        self.console = console or Console(file=console_file(), soft_wrap=True)
        self.bar = bar
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._failed = 0

    def message(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)

    def start(self, name: str, total: int) -> None:
        if not self.bar:
            return
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[red]{task.fields[failed]} failed"),
            _RateColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(name, total=total, failed=0)

    def advance(self, outcome: Outcome) -> None:
        if self._progress is None or self._task is None:
            return
        if outcome.status == "failed":
            self._failed += 1
        self._progress.update(self._task, advance=1, failed=self._failed)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
