"""ConfigError: one clear message naming the file, the field path, the line and the fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in one config file."""

    file: str
    field: str  # dotted path, "" for the whole document
    message: str
    line: int | None = None

    def __str__(self) -> str:
        """`file:line: field.path: message`, always one line (one issue, one line of output)."""
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        field = f" {self.field}:" if self.field else ""
        return " ".join(f"{where}:{field} {self.message}".splitlines())


class ConfigError(Exception):
    """Bad input. Carries every issue found; str() is the user-facing message."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))

    @classmethod
    def single(cls, file: str, field: str, message: str, line: int | None = None) -> ConfigError:
        """An error with one issue."""
        return cls([ConfigIssue(file, field, message, line)])
