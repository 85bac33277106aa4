"""Load YAML safely and validate it, turning every failure into a ConfigError.

YAML is read with the safe loader (no object-construction tags). Pydantic's errors are
rewritten to name the file, the dotted field path, the line, and a fix (unknown keys get a
"did you mean" from the valid names).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from rdu_sim.config.errors import ConfigError, ConfigIssue

ModelT = TypeVar("ModelT", bound=BaseModel)

MAX_FILE_BYTES = 10 * 2**20  # a config file larger than this is a mistake, not a config
MAX_DEPTH = 64  # deeper nesting than any real config: refuse before recursion bites

MAX_NODES = 200_000  # YAML values in one document: far above any config, far below a hang

LineMap = dict[tuple[str, ...], int]


def _line_map(root: yaml.Node, lines: LineMap) -> None:
    """Record the line of every field path, refusing absurd depth and alias bombs.

    Iterative (no recursion limit to hit) and visits each node once: an alias is the same
    node object as its anchor, so a "billion laughs" document costs its size, not its
    expansion.
    """
    stack: list[tuple[yaml.Node, tuple[str, ...]]] = [(root, ())]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if len(path) > MAX_DEPTH:
            raise ValueError(f"the document is nested more than {MAX_DEPTH} levels deep")
        lines.setdefault(path, node.start_mark.line + 1)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if len(seen) > MAX_NODES:
            raise ValueError(f"the document has more than {MAX_NODES} values")
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = str(key.value)
                lines.setdefault((*path, name), key.start_mark.line + 1)
                stack.append((value, (*path, name)))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                stack.append((item, (*path, str(index))))


MAX_FLOW_BRACKETS = 1000  # open [ and { at once; PyYAML's scanner is quadratic in this
_FLOW_BRACKET = re.compile(r"[\[\]{}]")


def _flow_depth_exceeds(text: str, limit: int) -> bool:
    """True if `[`/`{` nest deeper than `limit` (quotes ignored: a cheap pre-check)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _FLOW_BRACKET.finditer(text):
        depth = depth + 1 if match.group() in "[{" else max(0, depth - 1)
        if depth > limit:
            return True
    return False


def parse_yaml_text(text: str, file: str) -> tuple[Any, LineMap]:
    """Parse YAML text safely; return the data and a map of field path -> line."""
    if _flow_depth_exceeds(text, MAX_FLOW_BRACKETS):  # refuse before the scanner crawls
        raise ConfigError.single(
            file,
            "",
            f"not valid YAML: nested too deeply (a config is at most {MAX_DEPTH} levels deep)",
        )
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            lines: LineMap = {}
            data: Any = None
            if node is not None:
                _line_map(node, lines)
                data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or str(exc)
        raise ConfigError.single(file, "", f"not valid YAML: {problem}", line) from None
    except RecursionError:
        raise ConfigError.single(
            file,
            "",
            f"not valid YAML: nested too deeply (a config is at most {MAX_DEPTH} levels deep)",
        ) from None
    except yaml.reader.ReaderError as exc:
        raise ConfigError.single(
            file,
            "",
            f"not valid YAML: {exc.reason} {chr(exc.character)!r} at character {exc.position}",
        ) from None
    except (yaml.YAMLError, ValueError, OverflowError) as exc:
        message = " ".join(str(exc).split())
        if "integer string conversion" in message:
            message = "a number has more digits than any config needs"
        raise ConfigError.single(file, "", f"not valid YAML: {message}") from None
    return data, lines


def file_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a config file, or None if it is a regular file.

    Never raises: names too long for the OS, NUL bytes and permission errors are answers.
    Only regular files pass, so /dev/zero or a FIFO cannot hang the loader.
    """
    try:
        if not path.exists():
            return "file not found"
        if path.is_dir():
            return "is a directory, expected a YAML file"
        if not path.is_file():
            return "not a regular file"
    except (OSError, ValueError) as exc:
        return f"cannot open: {getattr(exc, 'strerror', None) or exc}"
    return None


def read_yaml(path: Path) -> tuple[Any, LineMap]:
    """Read and parse a YAML file; a missing, unreadable or huge file is a ConfigError."""
    file = str(path)
    problem = file_problem(path)
    if problem is not None:
        raise ConfigError.single(file, "", problem)
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError.single(file, "", f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError.single(
            file,
            "",
            f"file is larger than {MAX_FILE_BYTES} bytes; a config file is a few kilobytes",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError.single(file, "", "not a text file (not valid UTF-8)") from None
    if "\x00" in text:
        raise ConfigError.single(file, "", "not a text file (contains NUL bytes)")
    return parse_yaml_text(text, file)


# Labels pydantic puts into error locations for union members and validator wrappers;
# they are not field names and never appear in a user's file.
_LABEL_PREFIXES = (
    "function-",
    "literal[",
    "tagged-union[",
    "union[",
    "nullable[",
    "json-or-python[",
    "chain[",
    "lax-",
    "list[",
    "dict[",
)
_LABELS = frozenset({"str", "int", "float", "bool", "none", "list", "dict"})


def _is_label(part: str | int) -> bool:
    return isinstance(part, str) and (part in _LABELS or part.startswith(_LABEL_PREFIXES))


def _clean_loc(loc: tuple[str | int, ...], data: Any, keep_last: bool) -> tuple[str | int, ...]:
    """The error location as the user wrote it: union labels and tags removed.

    A part is kept when it names a key (or index) that exists in the input at that level; a
    part that does not exist is a union member's tag ('llama', 'custom') and is dropped, except
    the last part of a "missing field" error, which by definition is not in the input.
    """
    kept: list[str | int] = []
    node = data
    for i, part in enumerate(loc):
        if _is_label(part):
            continue
        in_mapping = isinstance(node, Mapping) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_mapping or in_list:
            kept.append(part)
            node = node[part]
        elif keep_last and i == len(loc) - 1:
            kept.append(part)
    return tuple(kept)


def _model_classes(annotation: Any) -> list[type[BaseModel]]:
    """The config models an annotation can hold, looking through unions and Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        found.extend(c for c in _model_classes(arg) if c not in found)
    return found


def _pick(classes: list[type[BaseModel]], node: Any) -> type[BaseModel] | None:
    """Of several union members, the one the input meant (its discriminator, else overlap)."""
    if len(classes) <= 1 or not isinstance(node, Mapping):
        return classes[0] if classes else None

    def score(cls: type[BaseModel]) -> int:
        fields = cls.model_fields
        tag = sum(
            1000
            for name, info in fields.items()
            if get_origin(info.annotation) is Literal
            and node.get(name) in get_args(info.annotation)
        )
        return tag + sum(1 for key in node if key in fields)

    return max(classes, key=score)


def _parent_model(
    model: type[BaseModel], loc: tuple[str | int, ...], data: Any
) -> type[BaseModel] | None:
    """The config model that holds the field at `loc` (looking through unions by the data)."""
    annotation: Any = model
    node = data
    for part in loc[:-1]:
        cls = _pick(_model_classes(annotation), node)
        if cls is None or not isinstance(part, str) or part not in cls.model_fields:
            return None
        annotation = cls.model_fields[part].annotation
        node = node.get(part) if isinstance(node, Mapping) else None
    return _pick(_model_classes(annotation), node)


def _field_names(model: type[BaseModel], loc: tuple[str | int, ...], data: Any) -> list[str]:
    """The valid field names at the parent of `loc`, for "did you mean" hints."""
    cls = _parent_model(model, loc, data)
    return sorted(cls.model_fields) if cls is not None else []


def _description(model: type[BaseModel], loc: tuple[str | int, ...], data: Any) -> str:
    """The one-line description of the field at `loc`, or ''."""
    cls = _parent_model(model, loc, data)
    info = cls.model_fields.get(str(loc[-1])) if cls is not None and loc else None
    return (info.description or "") if info is not None else ""


def _shown(value: Any) -> str:
    """A short rendering of a bad value for a message (containers by type only)."""
    if isinstance(value, dict | list | set | tuple):
        return type(value).__name__
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def issues_from_validation(
    exc: ValidationError,
    model: type[BaseModel],
    file: str,
    lines: LineMap,
    prefix: tuple[str, ...] = (),
    data: Any = None,
) -> list[ConfigIssue]:
    """Rewrite pydantic errors into ConfigIssues with dotted paths, lines and fixes.

    `data` is the validated input; with it, locations drop union tags and unknown-field
    hints look inside unions (a custom model architecture) too.
    """
    issues: list[ConfigIssue] = []
    seen: set[tuple[str, str]] = set()
    for error in exc.errors():
        kind = error["type"]
        raw_loc = tuple(error["loc"])
        if data is None:
            loc = tuple(p for p in raw_loc if not _is_label(p))
        else:
            loc = _clean_loc(raw_loc, data, keep_last=kind == "missing")
        path = tuple(str(p) for p in (*prefix, *loc))
        dotted = ".".join(path)
        line = next((lines[path[:n]] for n in range(len(path), -1, -1) if path[:n] in lines), None)
        if kind == "extra_forbidden":
            valid = _field_names(model, loc, data)
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1) if valid else []
            hint = f"; did you mean {close[0]!r}?" if close else "."
            listing = f" Valid fields here: {', '.join(valid)}." if valid else ""
            message = f"unknown field {str(loc[-1])!r}{hint}{listing}"
        elif kind == "missing":
            described = _description(model, loc, data)
            message = "required field is missing" + (f" ({described})" if described else "")
        elif kind in ("model_type", "model_attributes_type", "dict_type"):
            message = f"expected a mapping of fields, got {_shown(error.get('input'))}"
        elif kind == "union_tag_not_found":
            key = (error.get("ctx") or {}).get("discriminator", "").strip("'")
            message = f"required field {key!r} is missing" if key else error["msg"]
        else:
            text = error["msg"].removeprefix("Value error, ")
            given = error.get("input")
            shown = _shown(given)
            # A model-level rule ("low must be <= high") already names the values it compares.
            container_rule = kind == "value_error" and isinstance(given, dict | list)
            message = text if container_rule or shown in text else f"{text} (got {shown})"
        if (dotted, message) in seen:
            continue
        seen.add((dotted, message))
        issues.append(ConfigIssue(file, dotted, message, line))
    return issues


def validate(model: type[ModelT], data: Any, file: str, lines: LineMap) -> ModelT:
    """Validate parsed data against a config model, raising ConfigError on any problem."""
    if not isinstance(data, Mapping):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError.single(
            file, "", f"expected a mapping of fields at the top level, got {kind}"
        )
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(issues_from_validation(exc, model, file, lines, data=data)) from None
    except RecursionError:
        raise ConfigError.single(file, "", "nested too deeply") from None


def load_model(model: type[ModelT], path: Path) -> ModelT:
    """Read a YAML file and validate it as `model`."""
    data, lines = read_yaml(path)
    return validate(model, data, str(path), lines)
