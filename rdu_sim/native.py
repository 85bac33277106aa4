"""The compiled core: which modules run compiled (mypyc), and a guard that never runs stale
or half-compiled code.

``pip install`` compiles the modules listed in ``native-modules.txt`` (setup.py) into C
extensions beside their sources and records each source's digest in ``_native.txt``.
Python imports an extension before a source of the same name, so a source edited after the
build (an editable install, a developer changing the engine) would silently run the old
code; and the compiled modules call each other's native classes directly, so they must be
loaded all compiled or all from source. :func:`install` (run when ``rdu_sim`` is imported)
therefore loads ALL of them from their sources when any recorded hash differs from its
source, saying why once on stderr, or when ``RDU_SIM_PURE_PYTHON=1`` asks for it (for
profiling with cProfile, which cannot see inside compiled code, and for the differential
tests). The results are the same either way: the same source, the same event order.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

RECORD_FILE = "_native.txt"
"""Written by setup.py next to this module: a line ``dotted.name digest`` per compiled module."""

PURE_VARIABLE = "RDU_SIM_PURE_PYTHON"

_PACKAGE_DIR = Path(__file__).resolve().parent
_compiled = False


def source_digest(path: Path) -> str:
    """CRC-32 of a module's source bytes, in hex (the rule setup.py records with): it tells
    an edited source from the built one (a chance edit matches with odds of 1 in 4 billion)
    and costs the CLI's start nothing (hashlib loads OpenSSL: ~3 ms)."""
    return format(zlib.crc32(path.read_bytes()), "08x")


def record_text(digests: dict[str, str]) -> str:
    """The build record's text (:data:`RECORD_FILE`)."""
    return "".join(f"{name} {digest}\n" for name, digest in sorted(digests.items()))


def read_record(path: Path) -> dict[str, str]:
    """Dotted module name -> source digest, from a build record."""
    return dict(line.split() for line in path.read_text().splitlines() if line.strip())


def module_source(name: str) -> Path:
    """The source file of ``rdu_sim.x.y``, next to this package."""
    return _PACKAGE_DIR.joinpath(*name.split(".")[1:]).with_suffix(".py")


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


def _stale(modules: dict[str, str]) -> list[str]:
    """The recorded modules whose source is missing or differs from the build's."""
    stale = []
    for name, digest in modules.items():
        source = module_source(name)
        if not source.is_file() or source_digest(source) != digest:
            stale.append(name)
    return stale


def install() -> None:
    """Load the compiled modules' sources instead when asked to or when any is stale."""
    global _compiled
    record = _PACKAGE_DIR / RECORD_FILE
    if not record.is_file():
        return  # a pure-Python install (no compiler) or a checkout never built
    modules = read_record(record)
    pure = os.environ.get(PURE_VARIABLE) == "1"
    stale = [] if pure else _stale(modules)
    if stale:
        sys.stderr.write(
            f"rdu-sim: {stale[0]} changed since it was compiled ({len(stale)} module(s) in "
            "all): running every compiled module from its source; reinstall "
            "(pip install -e .) to compile again\n"
        )
    if pure or stale:
        sys.meta_path.insert(0, _SourceFinder(frozenset(modules)))
        return
    _compiled = True


def compiled() -> bool:
    """Whether this process runs the compiled core (for provenance)."""
    return _compiled
