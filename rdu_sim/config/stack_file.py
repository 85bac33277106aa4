"""Reading a serving stack named in a config file (``stack:`` in a workload,
``default_stack:`` in a hardware file): a shipped stack's name, a path relative to that file,
or ``none``; an overlay ``extends:`` another stack (``config.extends``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.extends import read_extending
from rdu_sim.config.loader import LineMap, did_you_mean, validate
from rdu_sim.config.stack import NO_STACK, NONE, StackConfig, serves
from rdu_sim.config.yaml_io import file_problem


def validate_stack(data: Any, file: str, lines: LineMap) -> StackConfig:
    """Validate a parsed stack file; a ConfigError otherwise."""
    return validate(StackConfig, data, file, lines)


def read_stack(path: Path) -> tuple[Any, LineMap]:
    """A stack file's data with its ``extends:`` chain resolved, and its own lines."""
    return read_extending(path, "stack", validate_stack)


def stack_path(text: str, config_file: str | Path) -> Path | None:
    """The stack file ``text`` names inside ``config_file`` (None for ``none``); a
    ConfigError-worthy problem is left to :func:`stack_data` to report."""
    from rdu_sim.config import shipped

    if text == NONE:
        return None
    near = shipped.written_in(config_file, text)
    return shipped.locate_near(near, text, ("stack",))


def stack_data(path: Path | None) -> tuple[dict[str, Any], LineMap, str]:
    """The data, lines and file name of a stack (the built-in ``none`` when ``path`` is
    None); a ConfigError naming the file when it cannot be read or is not a mapping."""
    if path is None:
        return NO_STACK.model_dump(mode="json"), {}, NONE
    problem = missing_stack(path)
    if problem is not None:
        raise ConfigError.single(str(path), "", problem)
    data, lines = read_stack(path)
    if not isinstance(data, Mapping):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError.single(str(path), "", f"expected a stack's fields, got {kind}")
    return dict(data), lines, str(path)


def missing_stack(path: Path) -> str | None:
    """Why the stack file at ``path`` cannot be read (not found, a folder, ...: the
    loader's ``file_problem``), with the shipped stack its name is close to (``did you mean
    'tensorrt-llm'?``) and every shipped name; None when it can be read."""
    from rdu_sim.config import shipped

    problem = file_problem(path)
    if problem is None:
        return None
    known = shipped.names("stack")
    meant = did_you_mean(path.name.removesuffix(".yaml"), [*known, NONE])
    return (
        f"{problem}{meant} (a path is relative to the file naming it; a bare name is a "
        f"shipped stack: {', '.join(known)}, or 'none'{shipped.shadowed(path, ('stack',))})"
    )


def unknown_stack(named: str, path: Path | None) -> str | None:
    """What a ``stack:`` or ``default_stack:`` naming ``named`` (read as ``path``:
    :func:`stack_path`) is told when no stack file is there, without the field: ``unknown
    serving stack 'sambastack'; did you mean 'sambastack-2025'? (...)`` for a bare name
    (no shipped stack has it, no file beside the naming file either), ``serving stack
    'stacks/mine.yaml': file not found (...)`` for a path; None when it can be read (or is
    ``none``). The one wording for a workload's stack and a hardware file's default."""
    from rdu_sim.config import shipped

    missing = None if path is None else missing_stack(path)
    if missing is None or path is None:
        return None
    named_file = named.lower().endswith((".yaml", ".yml"))
    if shipped.is_bare(named) and not named_file and file_problem(path) == "file not found":
        return f"unknown serving stack {named!r}{missing.removeprefix('file not found')}"
    return f"serving stack {str(path)!r}: {missing}"


def runs_on_problem(stack: StackConfig, kind: str) -> str | None:
    """Why ``stack`` cannot serve hardware of ``kind`` (``rdu``, ``gpu``), or None."""
    if serves(stack.runs_on, kind):
        return None
    from rdu_sim.config import shipped

    return (
        f"serving stack {stack.name!r} runs on {stack.runs_on} hardware, not {kind} "
        f"(shipped stacks: {', '.join(shipped.names('stack'))}, or none)"
    )
