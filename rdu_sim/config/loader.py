"""Load YAML safely and validate it, turning every failure into a ConfigError.

YAML is read with the safe loader (no object-construction tags). Pydantic's errors are
rewritten to name the file, the dotted field path, the line, and a fix (unknown keys get a
"did you mean" from the valid names).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from rdu_sim.config.errors import ConfigError, ConfigIssue

ModelT = TypeVar("ModelT", bound=BaseModel)

MAX_FILE_BYTES = 10 * 2**20  # a config file larger than this is a mistake, not a config
MAX_DEPTH = 64  # deeper nesting than any real config: refuse before recursion bites

LineMap = dict[tuple[str, ...], int]


def _line_map(node: yaml.Node, path: tuple[str, ...], lines: LineMap, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"the document is nested more than {MAX_DEPTH} levels deep")
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            name = str(key.value)
            lines[(*path, name)] = key.start_mark.line + 1
            _line_map(value, (*path, name), lines, depth + 1)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _line_map(item, (*path, str(index)), lines, depth + 1)


def parse_yaml_text(text: str, file: str) -> tuple[Any, LineMap]:
    """Parse YAML text safely; return the data and a map of field path -> line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        lines: LineMap = {}
        if node is not None:
            _line_map(node, (), lines, 0)
        data = yaml.load(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or str(exc)
        raise ConfigError.single(file, "", f"not valid YAML: {problem}", line) from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        message = str(exc) if not isinstance(exc, RecursionError) else "nested too deeply"
        raise ConfigError.single(file, "", f"not valid YAML: {message}") from None
    return data, lines


def read_yaml(path: Path) -> tuple[Any, LineMap]:
    """Read and parse a YAML file; a missing, unreadable or huge file is a ConfigError."""
    file = str(path)
    if not path.exists():
        raise ConfigError.single(file, "", "file not found")
    if path.is_dir():
        raise ConfigError.single(file, "", "is a directory, expected a YAML file")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError.single(file, "", f"file is {size} bytes; a config file must be "
                                     f"under {MAX_FILE_BYTES} bytes")
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError.single(file, "", f"cannot read: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError.single(file, "", "not a text file (not valid UTF-8)") from None
    if "\x00" in text:
        raise ConfigError.single(file, "", "not a text file (contains NUL bytes)")
    return parse_yaml_text(text, file)


def _field_names(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """The valid field names at the parent of `loc`, for "did you mean" hints."""
    current: Any = model
    for part in loc[:-1]:
        fields = getattr(current, "model_fields", None)
        if fields is None or not isinstance(part, str) or part not in fields:
            return []
        annotation = fields[part].annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        current = next((c for c in candidates if isinstance(c, type)
                        and issubclass(c, BaseModel)), None)
        if current is None:
            return []
    fields = getattr(current, "model_fields", None)
    return sorted(fields) if fields else []


def _is_union_tag(part: str | int) -> bool:
    """Pydantic puts union member tags (like 'llama' or 'int') into error locations."""
    return isinstance(part, str) and (part in {"str", "int", "float", "bool", "list[int]"}
                                      or part.startswith(("function-", "literal[")))


def issues_from_validation(exc: ValidationError, model: type[BaseModel], file: str,
                           lines: LineMap, prefix: tuple[str, ...] = ()) -> list[ConfigIssue]:
    """Rewrite pydantic errors into ConfigIssues with dotted paths, lines and fixes."""
    issues: list[ConfigIssue] = []
    seen: set[tuple[str, str]] = set()
    for error in exc.errors():
        loc = tuple(p for p in error["loc"] if not _is_union_tag(p))
        path = tuple(str(p) for p in (*prefix, *loc))
        dotted = ".".join(path)
        line = next((lines[path[:n]] for n in range(len(path), -1, -1)
                     if path[:n] in lines), None)
        kind = error["type"]
        if kind == "extra_forbidden":
            valid = _field_names(model, loc)
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1) if valid else []
            hint = f"; did you mean {close[0]!r}?" if close else ""
            listing = f" Valid fields here: {', '.join(valid)}." if valid else ""
            message = f"unknown field {str(loc[-1])!r}{hint}{listing}"
        elif kind == "missing":
            message = "required field is missing"
        else:
            given = error.get("input")
            shown = repr(given) if not isinstance(given, dict | list) else type(given).__name__
            if len(shown) > 80:
                shown = shown[:77] + "..."
            text = error["msg"].removeprefix("Value error, ")
            message = f"{text} (got {shown})"
        if (dotted, message) in seen:
            continue
        seen.add((dotted, message))
        issues.append(ConfigIssue(file, dotted, message, line))
    return issues


def validate(model: type[ModelT], data: Any, file: str, lines: LineMap) -> ModelT:
    """Validate parsed data against a config model, raising ConfigError on any problem."""
    if not isinstance(data, Mapping):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError.single(file, "", f"expected a mapping of fields at the top level, "
                                 f"got {kind}")
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(issues_from_validation(exc, model, file, lines)) from None
    except RecursionError:
        raise ConfigError.single(file, "", "nested too deeply") from None


def load_model(model: type[ModelT], path: Path) -> ModelT:
    """Read a YAML file and validate it as `model`."""
    data, lines = read_yaml(path)
    return validate(model, data, str(path), lines)
