"""The files rdu-sim ships (example workloads, hardware files, sweep specs, clusters, plans,
notebooks), found by name whether the package is installed or run from a checkout.

The checkout's ``workloads/``, ``hw_configs/``, ``stacks/``, ``tests/models/`` (the config.json
files a shipped workload reads) and ``notebooks/`` are the one copy of each file; a wheel carries
them under ``rdu_sim/data/`` in the same layout (setup.py maps them in at build time), so
the relative paths inside the files (``hardware: ../hw_configs/sn40l-16.yaml``, a sweep's
``base: ../llama3.1-8b-1socket.yaml``) hold in both. This module is the one place that
knows where they are and what a name means: :func:`root`, :func:`entries` (each kind's
files by name, subfolders such as ``workloads/speculative/`` included), and the one rule
every command's file argument goes through, :func:`locate`: a path that exists, else a
shipped file by name (``deepseek-r1-128k-snapstream``, ``sn40l-8``, ``mooncake-300``) or
by a path under the shipped root (``workloads/sweeps/llama8b-batch.yaml``), else one
``file not found`` error naming the kinds looked for. A file named inside a config file
(``hardware:``, ``serving.trace``, a sweep's ``base``) goes through :func:`locate_near`
(:func:`trace_path` for traces): relative to that file first.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from rdu_sim import PACKAGE_DIR
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.kinds import KIND_WORDS, USED_BY
from rdu_sim.input_errors import InputError

FOLDERS = (
    "workloads",
    "hw_configs",
    "stacks",
    "tests/models",
    "notebooks",
    "measurements",
    "calibrations",
)
"""The shipped folders, relative to :func:`root`."""

PATTERNS = ("*.yaml", "*.csv", "*.jsonl", "*.json", "*.ipynb")
"""The files of those folders that ship (setup.py lists the same; a test compares them with a
built wheel): configs, request traces, config.json files and notebooks, never a sweep's
database or a cache left in a checkout."""

KINDS: dict[str, str] = {
    "workload": "workloads",
    "cluster": "workloads/clusters",
    "sweep": "workloads/sweeps",
    "plan": "workloads/plans",
    "hardware": "hw_configs",
    "stack": "stacks",
    "trace": "workloads/traces",
    "model": "tests/models",
    "notebook": "notebooks",
    "measurement": "measurements",
    "calibration": "calibrations",
}
"""Kind of shipped file -> the folder holding that kind. A file belongs to the kind of the
deepest folder holding it, so ``workloads/speculative/*.yaml`` are workloads and
``workloads/sweeps/*.yaml`` sweeps. Names are file stems; a model's name is its folder's
(``tests/models/qwen3-32b/config.json`` is ``qwen3-32b``)."""

KIND_SUFFIXES: dict[str, tuple[str, ...]] = {
    "trace": (".csv", ".jsonl", ".ndjson"),
    "model": (".json",),
    "notebook": (".ipynb",),
    "measurement": (".csv",),
}
"""The suffixes of each kind's files (YAML for every kind not listed)."""

CONFIG_KINDS = ("workload", "cluster", "sweep", "plan", "hardware", "stack", "calibration")
"""The kinds of YAML config file (what ``rdu-sim check`` reads besides traces)."""

ALL_KINDS = (*CONFIG_KINDS, "trace", "measurement")
"""What a command that reads any input (``rdu-sim check``) looks a name up among."""

_SUFFIXES = (".yaml", ".yml")


def installed_root() -> Path | None:
    """``rdu_sim/data`` of an installed package, or None (a checkout has no such folder)."""
    data = PACKAGE_DIR / "data"
    return data if (data / "workloads").is_dir() else None


def checkout_root() -> Path | None:
    """The repository root when rdu_sim runs from a checkout (it holds workloads/ and
    hw_configs/ beside the package), else None."""
    top = PACKAGE_DIR.parent
    return top if (top / "workloads").is_dir() and (top / "hw_configs").is_dir() else None


def root() -> Path:
    """The folder holding the shipped folders: installed data first, else the checkout.

    Raises:
        ConfigError: an empty or blank string; or neither exists (a package built without its data).
    """
    found = installed_root() or checkout_root()
    if found is None:
        raise ConfigError.single(
            "rdu_sim", "", "the shipped workloads are missing from this installation"
        )
    return found


class UnknownFolderError(ValueError, InputError):
    """:func:`folder` asked for no shipped folder nor kind (it named ``/work/hardware``)."""


def folder(name: str) -> Path:
    """One shipped folder (``"workloads"``, ``"hw_configs"``, ``"workloads/sweeps"``, ...)
    as a path, or the folder of a kind of shipped file (``"hardware"``: ``hw_configs``,
    :data:`KINDS`); any other name is an UnknownFolderError listing both (a path that does
    not exist was returned)."""
    if name in KINDS:
        return root() / KINDS[name]
    if name in FOLDERS or name in KINDS.values():
        return root() / name
    known = sorted({*FOLDERS, *KINDS.values()})
    raise UnknownFolderError(
        f"no shipped folder {name!r}: name a folder ({', '.join(known)}) or a kind of "
        f"shipped file ({', '.join(KINDS)})"
    )


def is_shipped(path: Path) -> bool:
    """Whether ``path`` is a shipped file, installed or in the checkout (read-only in
    spirit: outputs named after it, such as a sweep's database, go elsewhere)."""
    resolved = path.resolve()
    for base in (installed_root(), checkout_root()):
        if base is not None and any(resolved.is_relative_to(base.resolve() / f) for f in FOLDERS):
            return True
    return False


def files() -> list[Path]:
    """Every shipped file, relative to :func:`root`, sorted: one walk of each folder (as
    ``rglob`` of each pattern, symbolic links to folders not followed), kept while no folder
    it walked has changed (a scenario looks its hardware and stack up by name: a sweep's or
    a calibration's every point)."""
    return list(_listing(root()).files)


@dataclass(frozen=True)
class _Listing:
    """One walk of the shipped folders: the files found, and each folder's modification
    time then (a file added, removed or renamed in a folder changes that folder's)."""

    files: tuple[Path, ...]
    folders: tuple[tuple[str, int], ...]
    by_kind: dict[str, dict[str, Path]] = field(default_factory=dict)
    """:func:`entries` of each kind asked for, relative to the root walked."""

    def unchanged(self) -> bool:
        return all(_modified(folder) == when for folder, when in self.folders)


_listings: dict[Path, _Listing] = {}
"""The last walk of each shipped root (a test may point the package at another)."""


def _listing(base: Path) -> _Listing:
    """The walk of ``base`` kept from before while its folders are unchanged, else a new one."""
    kept = _listings.get(base)
    if kept is None or not kept.unchanged():
        kept = _listings[base] = _walk(base)
    return kept


def _modified(folder: str) -> int:
    """A folder's modification time in nanoseconds, -1 when it is gone (or never was)."""
    try:
        return os.stat(folder).st_mtime_ns
    except OSError:
        return -1


def _walk(base: Path) -> _Listing:
    suffixes = tuple(pattern.removeprefix("*") for pattern in PATTERNS)
    found: set[Path] = set()
    folders: list[tuple[str, int]] = []
    for name in FOLDERS:
        top = str(base / name)
        folders.append((top, _modified(top)))  # a folder made later is a change too
        for folder_path, _, names in os.walk(top):
            if folder_path != top:
                folders.append((folder_path, _modified(folder_path)))
            for file_name in names:
                path = Path(folder_path, file_name)
                if (
                    file_name.endswith(suffixes)
                    and path.is_file()
                    and ".ipynb_checkpoints" not in path.parts
                ):
                    found.add(path.relative_to(base))
    return _Listing(tuple(sorted(found)), tuple(folders))


def beside(path: Path, suffix: str) -> Path:
    """Where an output named after a config file goes (a sweep's or a plan's database):
    beside a file of one's own; in the current folder for a shipped file, whatever the
    install (a wheel's data, or a checkout's folders under an editable install)."""
    target = path.with_suffix(suffix)
    return Path.cwd() / target.name if is_shipped(path) else target


def kind_of(relative: Path) -> str | None:
    """The kind of a shipped file (a path relative to :func:`root`), or None (a file no
    kind lists, such as a README). Its folders are compared part by part, as
    ``is_relative_to`` does, without the ~30 us of making a relative path for each kind
    (``entries`` classifies every shipped file: ~2 ms of each cold lookup by name)."""
    parts = relative.parts
    for kind, folder_parts in _DEEPEST_FIRST:
        if parts[: len(folder_parts)] == folder_parts:
            suffix = relative.suffix.lower()
            return kind if suffix in KIND_SUFFIXES.get(kind, _SUFFIXES) else None
    return None


_DEEPEST_FIRST = sorted(
    ((kind, PurePath(name).parts) for kind, name in KINDS.items()), key=lambda item: -len(item[1])
)
"""The kinds' folders as path parts, a subfolder (``workloads/sweeps``) before its parent."""


def entries(kind: str) -> dict[str, Path]:
    """The shipped files of one kind, by name (see :data:`KINDS`), as absolute paths."""
    base = root()
    listing = _listing(base)
    named = listing.by_kind.get(kind)
    if named is None:
        named = {}
        for relative in listing.files:
            if kind_of(relative) == kind:
                name = relative.parent.name if kind == "model" else relative.stem
                named.setdefault(name, relative)
        listing.by_kind[kind] = named
    return {name: base / relative for name, relative in named.items()}


def names(kind: str) -> list[str]:
    """The shipped files of one kind, by name, sorted."""
    return sorted(entries(kind))


def is_bare(text: str) -> bool:
    """A name rather than a path: no folder part."""
    return bool(text) and "/" not in text and "\\" not in text


def find(text: str, kinds: Sequence[str] = ALL_KINDS) -> Path | None:
    """The shipped file ``text`` names, or None: a bare name (``llama8b-batch``, or with
    its suffix, ``mooncake-300.jsonl``) is looked up among ``kinds`` in order; a relative
    path (``workloads/sweeps/llama8b-batch.yaml``) under the shipped root."""
    base = installed_root() or checkout_root()
    if base is None or not text:
        return None
    if is_bare(text):
        for kind in kinds:
            known = entries(kind)
            found = known.get(text)
            if found is None:
                found = next((path for path in known.values() if path.name == text), None)
            if found is not None:
                return found
        return None
    relative = Path(text)
    if relative.is_absolute() or ".." in relative.parts:
        return None
    candidate = base / relative
    return candidate if candidate.is_file() else None


def _model_file(path: Path, kinds: Sequence[str]) -> Path:
    """A model's folder stands for the config.json inside it."""
    inside = path / "config.json"
    return inside if "model" in kinds and path.is_dir() and inside.is_file() else path


def locate(path: str | Path, kinds: Sequence[str] = ALL_KINDS) -> Path:
    """What a user gave for a file: an existing path as it is, else the shipped file it
    names (see :func:`find`); the one rule every command's file argument goes through.

    Raises:
        ConfigError: neither exists (``<path>: file not found, and no shipped ... of that
            name``, listing the shipped names of ``kinds`` when they are few).
    """
    if isinstance(path, str) and not path.strip():  # Path("") is the working folder
        raise ConfigError.single(repr(path), "", "an empty path: give a file or a shipped name")
    given = Path(path)
    try:
        if given.exists() or given.is_symlink():  # a broken link: the loader names it
            return _model_file(given, kinds)
    except (OSError, ValueError):
        return given  # a NUL byte, a name too long: the loader says what is wrong
    found = find(str(path), kinds)
    if found is not None:
        return found
    message = unknown_name_message(kinds, is_bare(str(path)))
    other = other_kind(str(path), kinds)
    if other is not None:  # a shipped file of another kind: how that kind is used
        singular = [kind if kind != "hardware" else "hardware file" for kind in kinds]
        how = USED_BY[other].replace("FILE", str(path))
        message = f"no shipped {_either(singular)} of that name, but a {KIND_WORDS[other]}: {how}"
    raise ConfigError.single(str(path), "", message)


def namesakes(text: str, kinds: Sequence[str] = ALL_KINDS) -> list[tuple[str, Path]]:
    """For a bare name that is no file here, each kind among ``kinds`` with a shipped file
    of that name and the file, in ``kinds``' order: the first is what :func:`locate` takes,
    the rest what it passes over (``deepseek-r1-h100``: a workload, and a plan). Empty for
    a path, or a name that is a file here."""
    if not is_bare(text) or Path(text).exists():
        return []
    found = ((kind, find(text, (kind,))) for kind in kinds)
    return [(kind, path) for kind, path in found if path is not None]


def shipped_path(path: Path) -> str:
    """A shipped file's path under the shipped root (``workloads/plans/x.yaml``), which
    :func:`find` takes back; the path itself when it is not under the root."""
    base = root()
    return str(path.relative_to(base)) if path.is_relative_to(base) else str(path)


def other_kind(text: str, kinds: Sequence[str]) -> str | None:
    """The kind of config file, not one of ``kinds``, of the shipped file ``text`` names
    (``llama8b-batch``: a sweep), or None."""
    return next((k for k in CONFIG_KINDS if k not in kinds and find(text, (k,))), None)


def written_in(config_file: str | Path, text: str) -> Path:
    """A path written in a config file: absolute, ~-expanded, or relative to that file."""
    resolved = Path(text)
    with contextlib.suppress(RuntimeError):  # "~" with no home directory stays as written
        resolved = resolved.expanduser()
    if not resolved.is_absolute():
        resolved = Path(os.path.normpath(Path(config_file).parent / resolved))
    return resolved


def locate_near(near: Path, text: str, kinds: Sequence[str]) -> Path:
    """A file named inside a config file (``hardware: sn40l-16``): ``near`` (what ``text``
    means relative to that file) when it exists, else ``text`` relative to the current
    folder (a ``--set serving.trace=mine.jsonl`` on a shipped workload); either one a broken
    link is taken too, for the loader to name as one; else the shipped
    file a bare ``text`` names, else ``near`` for the caller to report as missing (naming
    the field)."""
    try:
        existing = near_or_here(near, text)
        if existing is not None:
            return _model_file(existing, kinds)
    except (OSError, ValueError):
        return near
    found = find(text, kinds) if is_bare(text) else None
    return found if found is not None else near


def near_or_here(near: Path, text: str) -> Path | None:
    """The file a config file names as ``text``: ``near`` (``text`` relative to that file)
    when it exists, else ``text`` relative to the current folder when that exists (a
    ``--set`` naming a file of the user's on a shipped workload); a broken link counts as
    existing, for the loader to name as one; None when neither exists."""
    if near.exists() or near.is_symlink():
        return near
    here = Path(text)
    if text and not here.is_absolute() and (here.exists() or here.is_symlink()):
        return here
    return None


def trace_path(base_dir: str | Path, trace: str) -> Path:
    """The trace file a config file's ``serving.trace`` / ``traffic.trace`` names: relative
    to the config file (or absolute), else a shipped trace by name (``mooncake-300``)."""
    near = Path(trace).expanduser()
    return locate_near(near if near.is_absolute() else Path(base_dir) / near, trace, ("trace",))


def shadowed(path: Path, kinds: Sequence[str]) -> str:
    """For a link that has a shipped file's name and leads nowhere, why the shipped file was
    not used (the clause an error adds after its hint); "" otherwise."""
    try:
        if not path.is_symlink() or path.exists() or find(path.name, kinds) is None:
            return ""
    except (OSError, ValueError):
        return ""
    return f"; the link {str(path)!r} comes before the shipped file of its name"


def label(kind: str) -> str:
    """A kind in words, plural: "workloads", "hardware files"."""
    return "hardware files" if kind == "hardware" else f"{kind}s"


def _either(words: Sequence[str]) -> str:
    """ "a", "a or b", "a, b or c"."""
    return " or ".join(filter(None, (", ".join(words[:-1]), words[-1]))) if words else ""


def unknown_name_message(kinds: Sequence[str], bare: bool = True) -> str:
    """No such file, and (for a bare name) the names that would have worked when few kinds
    were possible."""
    hint = "`rdu-sim examples` lists them, `rdu-sim examples copy DIR` copies them to edit"
    if not bare:
        return f"file not found (here or among the shipped files); {hint}"
    listing = ""
    if len(kinds) <= 2:
        try:
            listing = "; ".join(f"{label(kind)}: {', '.join(names(kind))}" for kind in kinds)
        except ConfigError:
            listing = "none are installed"
        listing = f" (shipped {listing})"
    singular = [kind if kind != "hardware" else "hardware file" for kind in kinds]
    return f"file not found, and no shipped {_either(singular)} of that name{listing}; {hint}"
