"""Validate parsed YAML against the config models, turning every failure into a ConfigError.

Files are read and parsed, within limits, by ``rdu_sim.config.yaml_io`` (re-exported here).
Pydantic's errors are rewritten to name the file, the dotted field path, the line, and a
fix (unknown keys get a "did you mean" from the valid names).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, ValidationError

from rdu_sim.config.errors import ConfigError, ConfigIssue, FieldProblem
from rdu_sim.config.show import shown
from rdu_sim.config.units import field_unit, quantity_words
from rdu_sim.config.yaml_io import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_NODES,
    LineMap,
    file_problem,
    parse_yaml_text,
    read_yaml,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "LineMap",
    "ModelT",
    "file_problem",
    "issues_from_validation",
    "load_model",
    "parse_yaml_text",
    "read_yaml",
    "validate",
]

ModelT = TypeVar("ModelT", bound=BaseModel)

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


def _model_loc(loc: tuple[str | int, ...], data: Any) -> tuple[str | int, ...]:
    """The location of the model whose validator raised: its input is a mapping, so a last
    part that leads to anything else is a union member's tag that is also one of its keys
    (``experts.load`` of ``dist: counts`` holds ``counts``: a list), kept by ``_clean_loc``."""
    if data is None or not loc:
        return loc
    node = data
    for part in loc:  # every part is in the data (``_clean_loc`` kept only those)
        if isinstance(node, Mapping):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int):
            node = node[part]
    return loc if isinstance(node, Mapping) else loc[:-1]


def model_classes(annotation: Any) -> list[type[BaseModel]]:
    """The config models an annotation can hold, looking through unions and Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        found.extend(c for c in model_classes(arg) if c not in found)
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
        cls = _pick(model_classes(annotation), node)
        if cls is None or not isinstance(part, str) or part not in cls.model_fields:
            return None
        annotation = cls.model_fields[part].annotation
        node = node.get(part) if isinstance(node, Mapping) else None
    return _pick(model_classes(annotation), node)


def _field_names(model: type[BaseModel], loc: tuple[str | int, ...], data: Any) -> list[str]:
    """The valid field names at the parent of `loc`, for "did you mean" hints."""
    cls = _parent_model(model, loc, data)
    return sorted(cls.model_fields) if cls is not None else []


def _description(model: type[BaseModel], loc: tuple[str | int, ...], data: Any) -> str:
    """The one-line description of the field at `loc`, or ''."""
    cls = _parent_model(model, loc, data)
    info = cls.model_fields.get(str(loc[-1])) if cls is not None and loc else None
    return (info.description or "") if info is not None else ""


_BOUND_WORDS = {
    "greater_than": ("gt", "more than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}
"""pydantic's range errors: the key of the bound in the error's context, and its words."""


def _given(loc: tuple[str | int, ...], data: Any) -> Any:
    """The value at `loc` as the input holds it (None when it is not there)."""
    node = data
    for part in loc:
        if isinstance(node, Mapping):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return None
    return node


def _plain(value: float) -> str:
    """A unitless number as a range message shows it: ``2,080``, ``0.5``, ``1e-300``."""
    whole = isinstance(value, int) or (value.is_integer() and abs(value) < 1e15)
    return f"{int(value):,}" if whole else f"{value:g}"


def _range_message(
    error: Any, model: type[BaseModel], loc: tuple[str | int, ...], data: Any
) -> str | None:
    """A number out of its field's range, in words: ``must be at least 1, got 0``, where
    pydantic says ``Input should be greater than or equal to 1``; a quantity's bound and
    value in the field's unit as people write them (``must be at most 1 s, got 500 s``; the
    value as written when it has a unit, ``got 1e30 TB/s``), where pydantic quotes the
    internal numbers; a bare time above its bound adds that it is seconds; NaN (a
    Python float, YAML's ``.nan``) is no number in range. None for any other error."""
    words = _BOUND_WORDS.get(error["type"])
    cls = _parent_model(model, loc, data) if words and loc else None
    info = cls.model_fields.get(str(loc[-1])) if cls is not None else None
    unit = field_unit(info.annotation, info.metadata) if info is not None else ""
    bound = (error.get("ctx") or {}).get(words[0]) if words else None
    if not isinstance(bound, int | float) or isinstance(bound, bool) or not words:
        return None

    def shown_value(value: float) -> str:
        return quantity_words(value, unit) if unit else _plain(value)

    given = _given(loc, data) if data is not None else None
    if isinstance(given, str):
        return f"must be {words[1]} {shown_value(bound)}, got {given.strip()}"
    value = error.get("input")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    if value != value:  # NaN fails every bound: "must be at most 1, got nan" blamed the bound
        return "must be a finite number, got nan"
    message = f"must be {words[1]} {shown_value(bound)}, got {shown_value(value)}"
    if unit == "s" and words[0] in ("lt", "le"):  # too long: perhaps a forgotten unit
        n = f"{value:g}"
        message += f" (a bare number is seconds: write the unit, as in '{n} us' or '{n} ms')"
    return message


_KIND_WORDS: dict[Any, str] = {int: "a whole number", float: "a number", str: "a string"}
"""A shorthand's input type in words (what ``_accepted`` says a field takes)."""


def _accepted(model: type[BaseModel], loc: tuple[str | int, ...], data: Any) -> str | None:
    """What a field that takes a shorthand besides its mapping accepts, in words, from the
    input type its validator declares (``json_schema_input_type``): ``a whole number or a
    distribution's mapping ({dist: fixed, uniform or lognormal, ...})`` for a length, where
    "expected a mapping of fields" would hide the number it takes. None for a field that
    takes a mapping only."""
    cls = _parent_model(model, loc, data) if loc else None
    info = cls.model_fields.get(str(loc[-1])) if cls is not None else None
    if info is None:
        return None
    for meta in info.metadata:
        kinds = getattr(meta, "json_schema_input_type", None)
        forms = get_args(kinds) if get_origin(kinds) is not None else (kinds,)
        scalars = [_KIND_WORDS[kind] for kind in forms if kind in _KIND_WORDS]
        if not scalars:
            continue
        mapping = "a mapping of fields"
        key = info.discriminator if isinstance(info.discriminator, str) else None
        tags = [str(tag) for kind in forms for tag in _tag_values(kind, key)]
        if key is not None and tags:
            listed = ", ".join(tags[:-1]) + f" or {tags[-1]}" if len(tags) > 1 else tags[0]
            noun = _TAG_NOUNS.get(key)
            mapping = f"a {noun}'s mapping" if noun else "a mapping"
            mapping += f" ({{{key}: {listed}, ...}})"
        return " or ".join([*scalars, mapping])
    return None


def _tag_values(kind: Any, key: str | None) -> tuple[Any, ...]:
    """The values a tagged-union member's ``key`` field takes (its Literal's), or none for a
    form that is not a model with that field."""
    if key is None or not (isinstance(kind, type) and issubclass(kind, BaseModel)):
        return ()
    fields: dict[str, Any] = dict(getattr(kind, "model_fields", {}))
    return get_args(fields[key].annotation) if key in fields else ()


def _literal_message(error: Any) -> str | None:
    """A value outside its field's choices in the house words, ``must be fp32, bf16 or
    int4, got 'fp4'``, where pydantic says ``Input should be 'fp32', 'bf16' or 'int4'``
    (as ``_range_message`` words a number out of range); None for any other error."""
    expected = (error.get("ctx") or {}).get("expected")
    if error["type"] not in ("literal_error", "enum") or not isinstance(expected, str):
        return None
    choices = re.sub(r"'([^']*)'", r"\1", expected)
    return f"must be {choices}, got {shown(error.get('input'))}"


def close_name(name: str, valid: Sequence[str]) -> str | None:
    """The valid name closest to a misspelt ``name``, or None: the one it differs from in
    case only; else, when it extends a valid name with a tail no longer valid name's tail is
    close to, that name (``sn40l-typo``: ``sn40l``, not the nearer ``sn40l-8``; but
    ``sn40l-4rack``: ``sn40l-4racks``); else difflib's nearest. The "did you mean" of an
    unknown field, of an unknown shipped file's name and of a config.json key no model type
    reads."""
    import difflib  # here: only an unknown name needs it

    folded = [v for v in valid if v.casefold() == name.casefold()]
    if folded:
        return folded[0]
    stems = [v for v in valid if len(v) >= 3 and name.startswith(v)]
    if stems:
        stem = max(stems, key=len)
        tails = [v[len(stem) :] for v in valid if v.startswith(stem) and v != stem]
        if not difflib.get_close_matches(name[len(stem) :], tails, n=1, cutoff=0.5):
            return stem
    close = difflib.get_close_matches(name, list(valid), n=1) if valid else []
    return close[0] if close else None


def did_you_mean(name: str, valid: Sequence[str]) -> str:
    """``; did you mean 'hbm_bandwidth'?`` for a ``name`` close to one of ``valid``
    (:func:`close_name`), else "" (``--set stack=trtllm``, an unknown field)."""
    close = close_name(name, valid)
    return f"; did you mean {close!r}?" if close is not None else ""


_OTHER_KIND_SECTION = {
    ("socket", "gpu"): "a GPU's hardware file has gpu:, not socket: (hw.gpu... with --set)",
    ("gpu", "socket"): (
        "an SN40L hardware file has socket:, not gpu: (hw.socket... with --set); a GPU's "
        "file says kind: gpu"
    ),
}
"""A hardware file's section of the other kind's device (``name``, and the section this
kind has instead) and what its unknown-field error says of it: the closest name is no help
there."""


def _other_kind_hint(name: str, valid: list[str]) -> str:
    """``; a GPU's hardware file has gpu:, not socket: ...`` for the other hardware kind's
    device section (`_OTHER_KIND_SECTION`) where ``valid`` holds this kind's (a hardware
    file's top level), else ""."""
    for (other, own), words in _OTHER_KIND_SECTION.items():
        if name == other and own in valid:
            return f"; {words}."
    return ""


def unknown_field_message(name: str, valid: list[str]) -> str:
    """What an unknown field is told: ``unknown field 'hbm_bandwith'; did you mean
    'hbm_bandwidth'? Valid fields here: ...`` (``valid``: the names at its place), or which
    section a hardware file of this kind has instead (`_other_kind_hint`)."""
    hint = _other_kind_hint(name, valid) or did_you_mean(name, valid) or "."
    listing = f" Valid fields here: {', '.join(valid)}." if valid else ""
    return f"unknown field {shown(name)}{hint}{listing}"


_TAG_NOUNS = {"dist": "distribution"}
"""What a union's tag field names, in an unknown tag's message (``family`` is a family)."""


def _unknown_tag(error: Any) -> tuple[str, str] | None:
    """A union given a tag none of its members has (``{dist: weights}`` for a popularity
    of ``zipf`` or ``trace``): the tag's field and the house message, ``unknown
    distribution 'weights'; valid: zipf, trace``, where pydantic says "Input tag 'weights'
    found using 'dist' does not match any of the expected tags"; None for any other error."""
    ctx = error.get("ctx") or {}
    if error["type"] != "union_tag_invalid" or "tag" not in ctx:
        return None
    key = str(ctx.get("discriminator", "")).strip("'")
    valid = ", ".join(t.strip().strip("'") for t in str(ctx.get("expected_tags", "")).split(","))
    given = error.get("input")
    value = given[key] if isinstance(given, Mapping) and key in given else ctx["tag"]
    return key, f"unknown {_TAG_NOUNS.get(key, key)} {shown(value)}; valid: {valid}"


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
        problem = (error.get("ctx") or {}).get("error")
        if isinstance(problem, FieldProblem):
            loc = (*_model_loc(loc, data), problem.field)
        tag = _unknown_tag(error)
        if tag is not None:  # at the tag's own field and line: `coe.popularity.dist`
            loc = (*loc, tag[0])
        path = tuple(str(p) for p in (*prefix, *loc))
        dotted = ".".join(path)
        line = next((lines[path[:n]] for n in range(len(path), -1, -1) if path[:n] in lines), None)
        if kind == "extra_forbidden":
            message = unknown_field_message(str(loc[-1]), _field_names(model, loc, data))
        elif kind == "missing":
            described = _description(model, loc, data)
            message = "required field is missing" + (f" ({described})" if described else "")
        elif kind in ("model_type", "model_attributes_type", "dict_type"):
            accepted = _accepted(model, loc, data) or "a mapping of fields"
            message = f"expected {accepted}, got {shown(error.get('input'))}"
        elif tag is not None:
            message = tag[1]
        elif kind == "union_tag_not_found":
            key = (error.get("ctx") or {}).get("discriminator", "").strip("'")
            message = f"required field {key!r} is missing" if key else error["msg"]
        elif isinstance(problem, FieldProblem):
            message = problem.message  # it names the values it compares
        elif (ranged := _range_message(error, model, loc, data)) is not None:
            message = ranged
        elif (chosen := _literal_message(error)) is not None:
            message = chosen
        else:
            text = error["msg"].removeprefix("Value error, ")
            given = error.get("input")
            rendered = shown(given)
            # A model-level rule ("low must be <= high") already names the values it compares.
            container_rule = kind == "value_error" and isinstance(given, dict | list)
            message = text if container_rule or rendered in text else f"{text} (got {rendered})"
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
