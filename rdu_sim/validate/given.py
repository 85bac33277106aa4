"""Where an input of a calibration was given, so that every error about it names that place:
a command-line option (``--fit``, ``--holdout``) with the text as written, or an entry of a
calibration spec file (the file, the entry's field path ``fit.0`` and its line), as every
other YAML error of the project names its file, line and field.

One rule for both: an option's error reads ``--fit: TEXT: problem``; a spec entry's
``spec.yaml:6: fit.0: problem``, the entry's text left out (its line shows it) and a narrower
part of it (a field path) leading the problem when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdu_sim.config.errors import ConfigError

MAX_SHOWN = 80
"""Most characters of an option's text an error repeats."""


@dataclass(frozen=True)
class Given:
    """An option and its text (``line`` None, ``entry`` the text), or a spec file, the
    entry's field path and its line."""

    source: str  # "--fit", "--holdout", or the spec file's path
    entry: str  # the option's text, or the spec entry's field path (fit.0)
    line: int | None = None
    in_file: bool = False

    @classmethod
    def option(cls, option: str, text: str) -> Given:
        """A command-line option's value."""
        return cls(option, text.strip()[:MAX_SHOWN])

    @classmethod
    def spec(cls, path: str, entry: str, line: int | None) -> Given:
        """An entry of a spec file: ``fit.0`` at ``line``."""
        return cls(path, entry, line, in_file=True)

    def error(self, message: str, part: str = "") -> ConfigError:
        """The error of this input: ``part`` (a field path inside it, when narrower than
        the whole) names where in it."""
        if self.in_file:
            lead = f"{part}: " if part and part != self.entry else ""
            return ConfigError.single(self.source, self.entry, lead + message, self.line)
        return ConfigError.single(self.source, part or self.entry, message)

    def error_at(self, key: str, message: str) -> ConfigError:
        """The error of one key of this input: a spec entry's field below it
        (``held_out.0.tp``), an option's part (``--holdout: tp: ...``)."""
        if self.in_file:
            return ConfigError.single(self.source, f"{self.entry}.{key}", message, self.line)
        return ConfigError.single(self.source, key, message)
