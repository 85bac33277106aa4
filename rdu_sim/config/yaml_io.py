"""Read config files and parse YAML safely, refusing what no config needs before it costs.

YAML is read with a safe loader (no object-construction tags). What is refused, each with a
ConfigError naming the file (and the line where there is one), and why it is a limit:

- anything but a regular file (a FIFO or /dev/zero would hang), over ``MAX_FILE_BYTES``,
  not UTF-8, or holding NUL bytes;
- flow brackets (``[``, ``{``) open more than ``MAX_FLOW_BRACKETS`` deep: PyYAML's scanner
  is quadratic in them;
- mappings and sequences nested more than ``MAX_DEPTH`` deep;
- more than ``MAX_NODES`` values written in the file, counted from the parser's events
  before any node is built (a 10 MiB flow list of five million items would cost gigabytes
  and half a minute as a node graph), and more than ``MAX_NODES`` *once aliases are
  expanded*: an alias bomb ("billion laughs") is cheap as a node graph but expands in every
  later copy, comparison, message or JSON dump; its expanded size is counted over the graph
  (each node once), so the refusal is linear in the document;
- an alias that refers to itself (a recursive structure);
- integers written with more than ``MAX_INT_CHARS`` characters: Python converts decimal
  strings in quadratic time (and refuses past 4300 digits) into numbers no message can
  print (YAML 1.1's hex, octal, binary and base-60 forms are not numbers here: text);
- a key given twice in one mapping (YAML forbids it; PyYAML silently keeps the last):
  refused naming both lines.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Any

import yaml

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.text import not_text

MAX_FILE_BYTES = 10 * 2**20  # a config file larger than this is a mistake, not a config
MAX_DEPTH = 64  # deeper nesting than any real config: refuse before recursion bites
MAX_NODES = 200_000  # values in one document, aliases expanded: far above any config
MAX_FLOW_BRACKETS = 1000  # open [ and { at once; PyYAML's scanner is quadratic in this
MAX_INT_CHARS = 40  # 2**128 has 39 digits; every config integer is far below

LineMap = dict[tuple[str, ...], int]

_FLOW_BRACKET = re.compile(r"[\[\]{}]")
_TOO_DEEP = f"nested too deeply (a config is at most {MAX_DEPTH} levels deep)"


class YamlLimitError(ValueError):
    """A document that parses but exceeds a limit above (the message says which)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


# libyaml's parser when PyYAML was built with it (6x faster: a sweep resolves every point's
# hardware file), else the pure-Python one; the constructors (what the values become) are
# the same Python code either way.
_SafeBase: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _BoundedLoader(_SafeBase):  # type: ignore[valid-type,misc]
    """The safe loader, refusing integers too long to be a config value before converting."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        digits = str(node.value).replace("_", "").lstrip("+-")
        if len(digits) > MAX_INT_CHARS:
            raise YamlLimitError(
                f"an integer written with {len(digits)} characters; config integers have "
                f"at most {MAX_INT_CHARS}",
                node.start_mark.line + 1,
            )
        value: int = super().construct_yaml_int(node)
        return value


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)

_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
# Numbers are ASCII decimal (README). YAML 1.1, which PyYAML reads, also takes `010` as
# octal 8, `0x10` as 16, `0b101` as 5 and `1:30` (or `1:30.5`) as base 60, 90: a value a
# user did not mean, silently. Those forms stay text, which a number's field refuses
# ("should be a valid integer", naming the field and the text), as it refuses `0o10`;
# `010` too, since YAML 1.2 reads it as 10 where 1.1 read 8. Decimal integers (`0`, `-12`,
# `1_000`) and floats (`0.5`, `.5`, `1.`, `.inf`) are read as before.
_BoundedLoader.yaml_implicit_resolvers = {
    first: [(tag, rule) for tag, rule in resolvers if tag not in (_INT, _FLOAT)]
    for first, resolvers in _SafeBase.yaml_implicit_resolvers.items()
}
_BoundedLoader.add_implicit_resolver(
    _INT, re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$"), list("-+0123456789")
)
_BoundedLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
        |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)
# YAML 1.1 reads `1e-9` (no dot) as a string, and "rate: 1e-9" then fails as "not a valid
# number"; read it as YAML 1.2 does, a float. Registered after the int resolver, so `12`
# stays an int.
_BoundedLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


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


def _key_text(node: yaml.Node) -> str | None:
    """A scalar key's identity for the duplicate check (tag and text), else None."""
    return f"{node.tag}\x00{node.value}" if isinstance(node, yaml.ScalarNode) else None


def _children(node: yaml.Node) -> list[yaml.Node]:
    """The collection nodes below `node` (scalars count one each and need no visit)."""
    if isinstance(node, yaml.MappingNode):
        items: list[yaml.Node] = [child for pair in node.value for child in pair]
    elif isinstance(node, yaml.SequenceNode):
        items = node.value
    else:
        return []
    return [child for child in items if not isinstance(child, yaml.ScalarNode)]


def _values(node: yaml.Node) -> int:
    """Direct values of a collection node: keys and values of a mapping, items of a list."""
    if isinstance(node, yaml.MappingNode):
        return 2 * len(node.value)
    return len(node.value) if isinstance(node, yaml.SequenceNode) else 0


def _check_mapping(node: yaml.MappingNode) -> None:
    """Refuse a key given twice in one mapping, naming both lines."""
    first: dict[str, yaml.Node] = {}
    for key, _ in node.value:
        text = _key_text(key)
        if text is None:
            continue
        if text in first:
            earlier = first[text].start_mark.line + 1
            later = key.start_mark.line + 1
            shown = str(key.value) if len(str(key.value)) <= 60 else str(key.value)[:57] + "..."
            raise YamlLimitError(
                f"duplicate key {shown!r} (lines {earlier} and {later}); a key may appear "
                "once in a mapping",
                later,
            )
        first[text] = key


_VALUE_EVENTS = (yaml.ScalarEvent, yaml.AliasEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)
_TOO_MANY = f"the file holds more than {MAX_NODES} values (a config holds far fewer)"


def _refuse_many_values(text: str) -> None:
    """Refuse a document writing more than ``MAX_NODES`` values (an alias counted once) from
    the parser's events, which it makes one at a time, before a node graph costs memory:
    stops at the first value past the limit. Each value takes at least about one character,
    so a text shorter than ``MAX_NODES // 2`` cannot hold that many and is not scanned."""
    if len(text) <= MAX_NODES // 2:
        return
    loader = _BoundedLoader(text)
    try:
        count = 0
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, _VALUE_EVENTS):
                count += 1
                if count > MAX_NODES:
                    mark = event.start_mark
                    raise YamlLimitError(_TOO_MANY, mark.line + 1 if mark is not None else None)
    finally:
        loader.dispose()


def _expanded_size(root: yaml.Node) -> int:
    """Values in the document with aliases expanded, each node visited once (iterative).

    Refuses a recursive alias, and stops as soon as the count passes ``MAX_NODES`` (naming
    aliases only when a node is reached twice: without one, the file holds that many).
    """
    size: dict[int, int] = {}
    active: set[int] = set()
    shared = False
    if isinstance(root, yaml.ScalarNode):
        return 1
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        ident = id(node)
        if children_done:
            active.discard(ident)
            nested = _children(node)
            total = 1 + _values(node) - len(nested) + sum(size[id(child)] for child in nested)
            if total > MAX_NODES:
                raise YamlLimitError(
                    f"the document has more than {MAX_NODES} values once its aliases are "
                    "expanded (an alias bomb?)"
                    if shared
                    else _TOO_MANY,
                    node.start_mark.line + 1,
                )
            size[ident] = total
            continue
        if ident in size:
            shared = True
            continue
        if ident in active:
            raise YamlLimitError("an alias refers to itself (a recursive structure)")
        active.add(ident)
        if isinstance(node, yaml.MappingNode):
            _check_mapping(node)
        stack.append((node, True))
        children = _children(node)
        fresh = [child for child in children if id(child) not in size]
        shared = shared or len(fresh) < len(children)  # an alias to a node already counted
        stack.extend((child, False) for child in fresh)
    return size[id(root)]


def _line_map(root: yaml.Node, lines: LineMap) -> None:
    """Record the line of every field path, refusing absurd depth (iterative, each node once)."""
    stack: list[tuple[yaml.Node, tuple[str, ...]]] = [(root, ())]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if len(path) > MAX_DEPTH:
            raise YamlLimitError(f"the document is nested more than {MAX_DEPTH} levels deep")
        lines.setdefault(path, node.start_mark.line + 1)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = str(key.value)
                lines.setdefault((*path, name), key.start_mark.line + 1)
                stack.append((value, (*path, name)))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                stack.append((item, (*path, str(index))))


def load_yaml(text: str) -> tuple[Any, LineMap]:
    """Parse YAML text within the limits above: (data, field path -> line).

    Raises ``YamlLimitError`` for a limit, ``yaml.YAMLError`` for text that is not YAML.
    """
    if _flow_depth_exceeds(text, MAX_FLOW_BRACKETS):  # refuse before the scanner crawls
        raise YamlLimitError(_TOO_DEEP)
    _refuse_many_values(text)  # before the node graph costs memory
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        lines: LineMap = {}
        if node is None:
            return None, lines
        _line_map(node, lines)
        _expanded_size(node)
        return loader.construct_document(node), lines
    except RecursionError:
        raise YamlLimitError(_TOO_DEEP) from None
    finally:
        loader.dispose()


def _tab_at(text: str, line: int, column: int) -> bool:
    """Whether the character YAML stopped at (0-based line and column) is a tab."""
    lines = text.splitlines()
    return 0 <= line < len(lines) and lines[line][column : column + 1] == "\t"


def parse_yaml_text(text: str, file: str) -> tuple[Any, LineMap]:
    """Parse YAML text safely; return the data and a map of field path -> line."""
    try:
        return load_yaml(text)
    except YamlLimitError as exc:
        raise ConfigError.single(file, "", f"not valid YAML: {exc.message}", exc.line) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or str(exc)
        if mark is not None and _tab_at(text, mark.line, mark.column):
            problem = (
                f"a tab at column {mark.column + 1}, where YAML takes only spaces (it "
                "indents with spaces): replace the tab with spaces"
            )
        raise ConfigError.single(file, "", f"not valid YAML: {problem}", line) from None
    except yaml.reader.ReaderError as exc:
        raise ConfigError.single(
            file,
            "",
            f"not valid YAML: {exc.reason} {chr(exc.character)!r} at character {exc.position}",
        ) from None
    except (yaml.YAMLError, ValueError, OverflowError) as exc:
        message = " ".join(str(exc).split())[:200]
        raise ConfigError.single(file, "", f"not valid YAML: {message}") from None


def file_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a config file, or None if it is a regular file.

    Never raises: names too long for the OS, NUL bytes and permission errors are answers.
    Only regular files pass, so /dev/zero or a FIFO cannot hang the loader.
    """
    try:
        if not path.exists():
            return broken_link(path) if path.is_symlink() else "file not found"
        if path.is_dir():
            return "is a directory, expected a file"
        if not path.is_file():
            return "not a regular file"
    except (OSError, ValueError) as exc:
        return f"cannot open: {getattr(exc, 'strerror', None) or exc}"
    return None


def checked_file(path: Path) -> Path:
    """`path` when it is a regular file (so ``path.resolve()`` is safe: a loop of links makes
    it raise), else a ConfigError naming it and why (``file_problem``): the one check a file
    argument passes before its links are followed or it is read."""
    problem = file_problem(path)
    if problem is not None:
        raise ConfigError.single(str(path), "", problem)
    return path


def broken_link(path: Path) -> str:
    """Why the link `path` leads to no file, naming what it points to: a loop of links, or
    the missing file at the end of its chain (a link to a link that is gone is named through
    to the file that is missing, not as a link to a file that does not exist)."""
    target = os.readlink(path)
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"a link to {target!r} in a loop of symbolic links"
    if os.path.islink(path.parent / target):
        end = os.path.realpath(path)
        return f"a link to {target!r}, which leads to {end!r}, which does not exist"
    return f"a link to {target!r}, which does not exist"


def read_text_file(path: Path, limit: int, kind: str) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes; ConfigError otherwise.

    A leading byte-order mark, which some Windows editors write, is not part of the text.
    """
    return _decoded(_read_bytes(path, limit, kind), str(path))


def read_complete_lines(path: Path, limit: int, kind: str) -> tuple[str, bytes]:
    """A file appended to one line at a time (``read_text_file``'s checks): the text of its
    complete lines, and the bytes after its last line break, unread (a line a process
    stopped while writing: cut short, or left as NUL bytes by a crash)."""
    raw = _read_bytes(path, limit, kind)
    end = raw.rfind(b"\n") + 1
    return _decoded(raw[:end], str(path)), raw[end:]


def _read_bytes(path: Path, limit: int, kind: str) -> bytes:
    file = str(checked_file(path))
    try:
        with path.open("rb") as stream:
            raw = stream.read(limit + 1)
    except OSError as exc:
        raise ConfigError.single(file, "", f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise ConfigError.single(
            file, "", f"file is larger than {limit} bytes; {kind} is a few kilobytes"
        )
    return raw


def _decoded(raw: bytes, file: str) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError.single(file, "", not_text(raw, exc.start, raw[exc.start]), line) from None
    if "\x00" in text:
        raise ConfigError.single(file, "", "not a text file (contains NUL bytes)")
    return text.removeprefix("\ufeff")


def read_yaml(path: Path) -> tuple[Any, LineMap]:
    """Read and parse a YAML file; a missing, unreadable, huge or hostile file is a ConfigError."""
    return parse_yaml_text(read_text_file(path, MAX_FILE_BYTES, "a config file"), str(path))
