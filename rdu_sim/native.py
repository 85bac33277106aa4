"""The compiled core: which modules run compiled (mypyc), and a guard that never runs stale
or half-compiled code.

``pip install`` compiles the modules listed in ``native-modules.txt`` (setup.py) into C
extensions beside their sources and records, in ``_native.txt``, the digest of every source
mypyc type-checked them against: the compiled modules and every ``rdu_sim`` module they
import, directly or not (:func:`type_checked_modules`). Python imports an extension before a
source of the same name, so a source edited after the build (an editable install, a developer
changing the engine) would silently run the old code; an edit to a module the compiled code
only imports (a field of ``config/hardware.py``, a slot of ``compiler/program.py``) breaks the
types the C code was generated for; and the compiled modules call each other's native classes
directly, so they must be loaded all compiled or all from source. :func:`install` (run when
``rdu_sim`` is imported) therefore loads ALL of them from their sources when any recorded
digest differs from its source, saying why once on stderr, or when ``RDU_SIM_PURE_PYTHON=1``
asks for it (for profiling with cProfile, which cannot see inside compiled code, and for the
differential tests). The results are the same either way: the same source, the same event
order.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

_Class = TypeVar("_Class")

if TYPE_CHECKING:  # what mypyc reads: the decorator its compiler acts on
    from mypy_extensions import mypyc_attr as mypyc_attr
else:

    def mypyc_attr(*_args: object, **_kwargs: object) -> Callable[[_Class], _Class]:
        """``mypy_extensions.mypyc_attr`` at run time: a class as written. mypyc acts on the
        decorator when it compiles, so a running simulator never needs mypy_extensions.

        ``@mypyc_attr(allow_interpreted_subclasses=True)`` on a compiled base class (a
        serving policy's) lets a policy written in Python subclass it: the compiled
        policies keep direct (vtable) calls, ~3 ns, a Python one costs a Python call."""
        return _as_written


def _as_written(cls: _Class) -> _Class:
    return cls


RECORD_FILE = "_native.txt"
"""Written by setup.py next to this module: a line ``dotted.name digest kind`` per source the
build read, ``kind`` being ``compiled`` or ``imported`` (type-checked against, not compiled)."""

COMPILED = "compiled"
IMPORTED = "imported"

PURE_VARIABLE = "RDU_SIM_PURE_PYTHON"

_PACKAGE_DIR = Path(__file__).resolve().parent
_PACKAGE = "rdu_sim"
_compiled = False


def source_digest(path: str | Path) -> str:
    """CRC-32 of a module's source bytes, in hex (the rule setup.py records with): it tells
    an edited source from the built one (a chance edit matches with odds of 1 in 4 billion)
    and costs the CLI's start nothing (hashlib loads OpenSSL: ~3 ms)."""
    with open(path, "rb") as source:
        return format(zlib.crc32(source.read()), "08x")


class BuildRecord:
    """What a build compiled and the digest of every source it read (:data:`RECORD_FILE`)."""

    def __init__(
        self, digests: dict[str, str], compiled: Iterable[str], complete: bool = True
    ) -> None:
        self.digests = digests
        self.compiled = frozenset(compiled)
        self.complete = complete  # False: an older build's, listing only compiled modules

    def text(self) -> str:
        """The record file's text: one sorted line per source."""
        return "".join(
            f"{name} {digest} {COMPILED if name in self.compiled else IMPORTED}\n"
            for name, digest in sorted(self.digests.items())
        )

    @classmethod
    def parse(cls, text: str) -> BuildRecord:
        """The record a record file's text says (an older build's ``name digest`` lines: its
        compiled modules, the record not complete)."""
        digests: dict[str, str] = {}
        compiled = []
        complete = True
        for fields in (line.split() for line in text.splitlines()):
            if len(fields) < 2:
                continue
            name, digest, *kind = fields
            digests[name] = digest
            complete = complete and bool(kind)
            if kind in ([], [COMPILED]):
                compiled.append(name)
        return cls(digests, compiled, complete)

    @classmethod
    def of_sources(cls, compiled: Iterable[str]) -> BuildRecord:
        """The record of a build compiling ``compiled`` from this package's sources now."""
        names = list(compiled)
        digests = {name: source_digest(module_source(name)) for name in type_checked_modules(names)}
        return cls(digests, names)


def module_source(name: str) -> Path:
    """The source file of ``rdu_sim.x.y`` (a package's ``__init__.py``), next to this package."""
    return Path(_source_path(name))


def _source_path(name: str) -> str:
    """:func:`module_source` as a string (what the start's check of ~100 sources opens:
    building ``Path`` objects cost it more than reading the files)."""
    path = os.path.join(_PACKAGE_DIR, *name.split(".")[1:])
    return os.path.join(path, "__init__.py") if os.path.isdir(path) else path + ".py"


def _imports(name: str) -> set[str]:
    """The ``rdu_sim`` modules and packages the source of ``name`` imports anywhere (in a
    function or under ``TYPE_CHECKING`` too: mypy checks against those as well)."""
    import ast  # only at build time and in tests: not on the CLI's start

    source = module_source(name)
    package = name if source.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_bytes(), str(source))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    modules = set()
    for candidate in found:
        if candidate == _PACKAGE or candidate.startswith(_PACKAGE + "."):
            path = module_source(candidate)
            if path.is_file():
                modules.add(candidate)
    return modules


def type_checked_modules(compiled: Iterable[str]) -> list[str]:
    """The compiled modules and every ``rdu_sim`` module they import, directly or through
    another (with the packages on the way, whose ``__init__`` an import runs): the sources
    mypyc type-checked the compiled code against, so an edit to any of them may break it."""
    seen: set[str] = set()
    pending = list(compiled)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        pending.extend(".".join(parts[:end]) for end in range(1, len(parts)))
        pending.extend(_imports(name))
    return sorted(seen)


class _SourceFinder:
    """Finds the listed modules' ``.py`` sources ahead of their compiled extensions (a
    meta-path finder; not derived from ``importlib.abc``, whose import costs the CLI ~8 ms)."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        source = str(module_source(fullname))
        loader = importlib.machinery.SourceFileLoader(fullname, source)
        spec = importlib.machinery.ModuleSpec(fullname, loader, origin=source)
        spec.has_location = True  # __file__ is the source
        return spec


def _stale(digests: dict[str, str]) -> list[str]:
    """The recorded modules whose source is missing or differs from the build's (plain file
    reads: this runs on every start, ~1 ms for the ~100 sources)."""
    stale = []
    for name, digest in digests.items():
        try:
            current = source_digest(_source_path(name))
        except OSError:
            current = None
        if current != digest:
            stale.append(name)
    return stale


def install() -> None:
    """Load the compiled modules' sources instead when asked to or when any source the build
    read is stale."""
    global _compiled
    path = _PACKAGE_DIR / RECORD_FILE
    if not path.is_file():
        return  # a pure-Python install (no compiler) or a checkout never built
    record = BuildRecord.parse(path.read_text())
    pure = os.environ.get(PURE_VARIABLE) == "1"
    stale = [] if pure else _stale(record.digests)
    if not pure and not stale and not record.complete:
        sys.stderr.write(
            "rdu-sim: the compiled core was built by an older rdu-sim, whose record does not "
            "cover the modules it imports: running every compiled module from its source; "
            "reinstall (pip install -e .) to compile again\n"
        )
        stale = sorted(record.compiled)
    elif stale:
        sys.stderr.write(
            f"rdu-sim: {stale[0]} changed since the core was compiled ({len(stale)} module(s) "
            "in all): running every compiled module from its source; reinstall "
            "(pip install -e .) to compile again\n"
        )
    if pure or stale:
        sys.meta_path.insert(0, _SourceFinder(record.compiled))
        return
    _compiled = True


def compiled() -> bool:
    """Whether this process runs the compiled core (for provenance)."""
    return _compiled


def stale_extensions(package: Path, compiled: set[str]) -> list[Path]:
    """Extension files under ``package`` of modules not in ``compiled`` (dotted names): what
    an in-place build leaves when a module leaves native-modules.txt, which Python would
    still import before the source beside it. A file's module is its folder and its name up
    to the first dot, so another Python version's build of a compiled module is kept."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    stale = []
    for path in sorted(package.rglob("*")):
        if not path.name.endswith(suffixes) or not path.is_file():
            continue
        folder = path.parent.relative_to(package.parent).as_posix().replace("/", ".")
        if f"{folder}.{path.name.split('.', 1)[0]}" not in compiled:
            stale.append(path)
    return stale
