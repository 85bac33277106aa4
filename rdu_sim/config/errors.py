"""ConfigError: one clear message naming the file, the field path, the line and the fix."""

from __future__ import annotations

from dataclasses import dataclass

MAX_PATH_CHARS = 300
MAX_MESSAGE_CHARS = 2000


def _cut(text: str, limit: int) -> str:
    """`text`, or its head and tail around an ellipsis when longer than `limit`."""
    if len(text) <= limit:
        return text
    half = (limit - 5) // 2
    return f"{text[:half]} ... {text[-half:]}"


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in one config file."""

    file: str
    field: str  # dotted path, "" for the whole document
    message: str
    line: int | None = None

    def __str__(self) -> str:
        """`file:line: field.path: message`, always one line (one issue, one line of output),
        each part cut in the middle past a bound (a 5000-character path names no better)."""
        file = _cut(self.file, MAX_PATH_CHARS)
        where = file if self.line is None else f"{file}:{self.line}"
        field = f" {_cut(self.field, MAX_PATH_CHARS)}:" if self.field else ""
        return " ".join(f"{where}:{field} {_cut(self.message, MAX_MESSAGE_CHARS)}".splitlines())


class ConfigError(Exception):
    """Bad input. Carries every issue found; str() is the user-facing message."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))

    @classmethod
    def single(cls, file: str, field: str, message: str, line: int | None = None) -> ConfigError:
        """An error with one issue."""
        return cls([ConfigIssue(file, field, message, line)])
