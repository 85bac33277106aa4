"""ConfigError: one clear message naming the file, the field path, the line and the fix."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rdu_sim.config.show import cut_middle
from rdu_sim.input_errors import InputError

MAX_PATH_CHARS = 300
MAX_MESSAGE_CHARS = 2000

MAX_ROW_ISSUES = 100
"""The most bad rows one error names (the rest are counted, ``bounded``): a file of 10,000
rows naming a missing hardware file is one problem, not 10,000 lines."""

ROW_SUFFIX = re.compile(r":\d+$")
"""The ``:line`` a row's issue may add to its file's path (a measurement file's)."""


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in one config file."""

    file: str
    field: str  # dotted path, "" for the whole document
    message: str
    line: int | None = None
    # the fields whose values make the problem, when more than ``field`` (a product of
    # several: tp x dp_attention x pp): an override of any of them is named as its cause
    blame: tuple[str, ...] = ()

    def __str__(self) -> str:
        """`file:line: field.path: message`, always one line (one issue, one line of output),
        each part cut in the middle past a bound (a 5000-character path names no better)."""
        file = cut_middle(self.file, MAX_PATH_CHARS)
        where = file if self.line is None else f"{file}:{self.line}"
        field = f" {cut_middle(self.field, MAX_PATH_CHARS)}:" if self.field else ""
        return " ".join(
            f"{where}:{field} {cut_middle(self.message, MAX_MESSAGE_CHARS)}".splitlines()
        )


class FieldProblem(ValueError):
    """A model-wide rule's problem with one of the model's fields: what a model validator (a
    rule across fields) raises so the issue names that field, ``parallelism.ep``, not the
    model, ``parallelism`` (the loader appends ``field`` to the model's path). ``message``
    says the problem without the field; ``str()`` leads with the field, for a caller that
    builds the model in Python and reads pydantic's own error."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field} {message}")


class ConfigError(InputError):
    """Bad input. Carries every issue found; str() is the user-facing message."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))

    def __reduce__(self) -> tuple[type[ConfigError], tuple[list[ConfigIssue]]]:
        """Pickle by the issues (the suite's worker processes raise it across to the caller;
        Exception's own pickling would rebuild it from the joined message)."""
        return type(self), (self.issues,)

    @classmethod
    def single(
        cls,
        file: str,
        field: str,
        message: str,
        line: int | None = None,
        blame: tuple[str, ...] = (),
    ) -> ConfigError:
        """An error with one issue (``blame``: ``ConfigIssue.blame``)."""
        return cls([ConfigIssue(file, field, message, line, blame)])


class CombinationError(ConfigError):
    """Each file valid alone, but the workload does not run on this hardware and stack: a
    rule across the files refuses them together (its tp beyond the system's devices, a
    layout its wiring cannot run, weights in DDR on a GPU, a stack for the other kind of
    device). ``rdu-sim compare`` shows a system that refuses the workload so as a column not
    run, where a file that is itself wrong stays an error."""


class WriteError(ConfigError):
    """A file that could not be written: a full disk, a read-only folder, a path below a
    regular file. The environment, not the input, but reported the same way: one line naming
    the path, exit status 2 (rdu_sim/cli/errors.py)."""

    @classmethod
    def from_os(cls, path: object, exc: OSError, note: str = "") -> WriteError:
        """The error for `exc` raised while writing `path` (`note` says what survives)."""
        problem = exc.strerror or str(exc)
        return cls([ConfigIssue(str(path), "", f"cannot write: {problem}{note}")])

    def after_report(self) -> WriteError:
        """This error said after the report it follows was printed whole (a command's files
        are written after its report: a failed write loses none of it)."""
        return WriteError(
            [replace(i, message=i.message + " (the report above is complete)") for i in self.issues]
        )


def bounded(issues: Sequence[ConfigIssue]) -> list[ConfigIssue]:
    """At most ``MAX_ROW_ISSUES`` issues, then one per file of the rest, counting its rows
    (the rest may lie in files none of the shown issues names): the one cap on the bad rows
    an error names (a measurement file's, a trace's)."""
    if len(issues) <= MAX_ROW_ISSUES:
        return list(issues)
    rest: dict[str, int] = {}
    for issue in issues[MAX_ROW_ISSUES:]:
        file = ROW_SUFFIX.sub("", issue.file)
        rest[file] = rest.get(file, 0) + 1
    more = [more_bad_rows(file, count) for file, count in rest.items()]
    return [*issues[:MAX_ROW_ISSUES], *more]


def more_bad_rows(file: str, count: int) -> ConfigIssue:
    """The issue counting the bad rows of ``file`` past ``MAX_ROW_ISSUES`` (``bounded``; a
    trace reader that keeps only the first ones counts the rest so)."""
    return ConfigIssue(file, "", f"and {count} more bad row(s) not shown")
