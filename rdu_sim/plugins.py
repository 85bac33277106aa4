"""Outside code the registries load by name: batching policies and routers written in a
package of their own, named in YAML like the shipped ones (docs/architecture.md, "Where to
add a batching policy"; docs/cluster.md, routers).

A plugin is a module whose import registers what it defines (``batching.register``,
``routers.register``). Two ways name one:

- the entry-point group ``rdu_sim.plugins`` of an installed distribution
  (``importlib.metadata``), each entry's value a module: ``[project.entry-points."rdu_sim.plugins"]
  myext = "myext"``;
- the environment variable ``RDU_SIM_PLUGINS=mod1,mod2``: modules on ``sys.path``
  (``PYTHONPATH``).

They load lazily, the first time a registry is asked for a name it does not hold (or lists
its names in an error): a run of shipped policies imports no plugin, and a broken plugin
breaks only the runs that need it. Each module is imported once per process (a failed one
again at the next miss, so a fixed plugin loads without a restart). A sweep's worker
processes inherit the environment and the installed distributions, so they find the same
modules. A module that fails to import is a :class:`PluginError`: one ``error:`` line naming
the variable or entry point, the module and the exception.

:func:`code_of` names the outside code behind a registered policy (its package and a sha256
of its source), which a run's provenance and a sweep's point key record, so that a changed
plugin is never answered from a stored row.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from rdu_sim.input_errors import InputError

__all__ = [
    "ENTRY_POINTS",
    "VARIABLE",
    "PluginError",
    "PolicyAnswerError",
    "code_of",
    "digest_here",
    "enroll",
    "load",
    "lookup",
    "names",
    "qualified_name",
    "register_in",
    "unknown",
]

VARIABLE = "RDU_SIM_PLUGINS"
"""Comma-separated plugin modules, importable from ``sys.path``."""

ENTRY_POINTS = "rdu_sim.plugins"
"""The entry-point group: each entry's value is a module to import."""

_loaded: set[str] = set()  # the plugin modules imported
T = TypeVar("T")


class PluginError(InputError):
    """A plugin module that could not be imported (or whose import refused a registration):
    the environment's or the plugin's problem, not a bug of rdu-sim."""


class PolicyAnswerError(InputError):
    """A policy (a batching policy, a router) answered what its contract refuses: a slot
    that is not prefilling, a replica outside its pool, a float. Checked where the answer
    is used, for outside code (``serving.batching.checked``, ``cluster.simulate``): the
    plugin's defect, said in one line naming the policy, not a traceback into the
    scheduler (a sweep stores it as the point's failure, as it stores bad input)."""


def qualified_name(policy: Any) -> str:
    """``module.Qualname`` of a registered class or factory: what a registry compares to
    tell a plugin reloaded (the same name again) from another claiming a taken name."""
    module = getattr(policy, "__module__", None) or "?"
    return f"{module}.{getattr(policy, '__qualname__', type(policy).__qualname__)}"


def enroll(kind: str, registry: dict[str, T], name: str, policy: T) -> None:
    """Register ``policy`` as ``name`` of a ``kind``'s registry: ValueError when another
    class holds the name; the same qualified name may register again and replaces it
    (``importlib.reload`` of a plugin, in a notebook)."""
    holder = registry.get(name)
    if holder is not None and qualified_name(holder) != qualified_name(policy):
        raise ValueError(
            f"{kind} {name!r} is already registered (by {qualified_name(holder)}; "
            f"{qualified_name(policy)} is another)"
        )
    registry[name] = policy


def register_in(kind: str, registry: dict[str, Any], name: str, policy: Any = None) -> Any:
    """A registry's ``register``, in both forms: ``register(name, Cls)`` registers ``Cls``
    and returns it; ``register(name)`` returns the decorator that does (``@register(name)``).
    The one rule either way (:func:`enroll`); each registry's ``register`` types the two
    forms (overloads)."""

    def decorate(each: Any) -> Any:
        enroll(kind, registry, name, each)
        return each

    return decorate if policy is None else decorate(policy)


def lookup(registry: Mapping[str, T], name: str) -> T | None:
    """What a registry holds as ``name``, the plugins loaded first when it holds nothing
    (:func:`load`); None when no plugin registers it either."""
    found = registry.get(name)
    if found is None:
        load()
        found = registry.get(name)
    return found


def names(registry: Mapping[str, object]) -> list[str]:
    """A registry's names, sorted, the plugins' among them (loaded first)."""
    load()
    return sorted(registry)


def make(registry: Mapping[str, type[T]], field: str, name: str) -> T:
    """A fresh instance of the class a policy registry holds as ``name`` (its own state),
    the one a workload's ``field`` names; ValueError naming the valid ones."""
    policy = lookup(registry, name)
    if policy is None:
        raise ValueError(
            f"unknown {field} {name!r}; valid: {', '.join(names(registry))} " + ELSEWHERE
        )
    return policy()


def check_name(
    kind: str, field: str, registry: Mapping[str, object], name: str, file: str, line: int | None
) -> None:
    """ConfigError naming ``file`` (at ``line``, where the name is written) and ``field``
    when no ``kind`` has that name (checked before a run simulates anything, and by
    ``rdu-sim check``)."""
    if lookup(registry, name) is None:
        from rdu_sim.config.errors import ConfigError  # (pydantic: only for the error)

        raise ConfigError.single(file, field, unknown(kind, name, names(registry)), line)


def _named() -> list[tuple[str, str]]:
    """Every plugin module named now, with where: the variable's, in its order, then the
    entry points', sorted by name (deterministic whatever order the installer left)."""
    named = [
        (module.strip(), VARIABLE)
        for module in os.environ.get(VARIABLE, "").split(",")
        if module.strip()
    ]
    from importlib.metadata import entry_points  # (~20 ms: only on a registry's miss)

    for entry in sorted(entry_points(group=ENTRY_POINTS), key=lambda e: (e.name, e.value)):
        dist = getattr(entry, "dist", None)
        source = f"entry point {entry.name!r} ({ENTRY_POINTS}"
        source += f", of {dist.name} {dist.version})" if dist is not None else ")"
        named.append((entry.module, source))
    return named


def load() -> None:
    """Import every plugin module named and not yet imported; a registry calls it when it
    misses a name. PluginError naming the first that fails (the ones before it stay
    loaded)."""
    for module, source in _named():
        if module in _loaded:
            continue
        try:
            importlib.import_module(module)
        except (Exception, SystemExit) as exc:  # the plugin's defect, said in one line (a
            # sys.exit at import too); a KeyboardInterrupt is a stop, the interrupt rule's
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise PluginError(
                f"{source}: plugin module {module!r} failed to import: {detail}"
            ) from exc
        _loaded.add(module)


def unknown(kind: str, name: str, valid: list[str]) -> str:
    """The error of a name no registry of ``kind`` holds: the names it holds, and where a
    policy of one's own is looked for (a checked file's ``unknown batching policy``, ``unknown
    router``)."""
    return (
        f"unknown {kind} {name!r}; valid: {', '.join(valid)} (one of your own is found when "
        f"{VARIABLE}=module, on PYTHONPATH, or an entry point of the group "
        f"{ENTRY_POINTS!r} names the module that registers it)"
    )


ELSEWHERE = (
    f"(a policy another process needs, a sweep's workers, is found there when {VARIABLE} "
    "or an entry point names its module; an import in this process alone is not)"
)
"""What an unknown name's error adds where the registry cannot tell a typo from a policy
imported only in the parent process (a worker's ``make_batching``, ``make_router``)."""


def _source_digest(module: str) -> str | None:
    """sha256 of a module's source: a package's every ``.py`` file under its folder (path
    and bytes, sorted), a module's one file; None without a file (a notebook's cell)."""
    found = sys.modules.get(module)
    file = getattr(found, "__file__", None)
    if file is None:
        return None
    path = Path(file)
    files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
    digest = hashlib.sha256()
    for each in files:
        try:
            data = each.read_bytes()
        except OSError:
            return None
        digest.update(f"{each.relative_to(path.parent).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def code_of(policy: Any) -> dict[str, str | None] | None:
    """The outside code a registered policy (a class or factory) comes from: its qualified
    name, its top-level module or package and a sha256 of that package's source; None for
    rdu-sim's own."""
    module = getattr(policy, "__module__", None) or "?"
    if module == "rdu_sim" or module.startswith("rdu_sim."):
        return None
    top = module.partition(".")[0]
    return {"name": qualified_name(policy), "package": top, "sha256": _source_digest(top)}


def digest_here(package: str) -> str | None:
    """The sha256 of a plugin package's source as this process has it (its modules loaded
    first, :func:`load`, when it is not imported yet); None when this process cannot import
    it. A sweep's worker compares it with what the point's key recorded (``code_of``)."""
    if package not in sys.modules:
        try:
            load()
        except PluginError:
            return None
    return _source_digest(package) if package in sys.modules else None
