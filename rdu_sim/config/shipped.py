"""The files rdu-sim ships (example workloads, hardware files, sweep specs, clusters, plans,
notebooks), found by name whether the package is installed or run from a checkout.

The checkout's ``workloads/``, ``hw_configs/``, ``tests/models/`` (the config.json files a
shipped workload reads) and ``notebooks/`` are the one copy of each file; a wheel carries
them under ``rdu_sim/data/`` in the same layout (setup.py maps them in at build time), so
the relative paths inside the files (``hardware: ../hw_configs/sn40l-16.yaml``, a sweep's
``base: ../llama3.1-8b-1socket.yaml``) hold in both. This module is the one place that
knows where they are: :func:`root`, :func:`names`, and :func:`locate`, which turns what a
user typed (a path, a bare name such as ``deepseek-r1-128k-snapstream``, or a path under
the shipped root such as ``workloads/sweeps/llama8b-batch.yaml``) into a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from rdu_sim.config.errors import ConfigError

FOLDERS = ("workloads", "hw_configs", "tests/models", "notebooks")
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
}
"""Kind of config file -> the shipped folder holding that kind (names are file stems)."""

ALL_KINDS = tuple(KINDS)

_SUFFIXES = (".yaml", ".yml")


def installed_root() -> Path | None:
    """``rdu_sim/data`` of an installed package, or None (a checkout has no such folder)."""
    data = Path(str(resources.files("rdu_sim"))) / "data"
    return data if (data / "workloads").is_dir() else None


def checkout_root() -> Path | None:
    """The repository root when rdu_sim runs from a checkout (it holds workloads/ and
    hw_configs/ beside the package), else None."""
    top = Path(str(resources.files("rdu_sim"))).parent
    return top if (top / "workloads").is_dir() and (top / "hw_configs").is_dir() else None


def root() -> Path:
    """The folder holding the shipped folders: installed data first, else the checkout.

    Raises:
        ConfigError: neither exists (a package built without its data).
    """
    found = installed_root() or checkout_root()
    if found is None:
        raise ConfigError.single(
            "rdu_sim", "", "the shipped workloads are missing from this installation"
        )
    return found


def folder(name: str) -> Path:
    """One shipped folder (``"workloads"``, ``"hw_configs"``, ...) as a path."""
    return root() / name


def is_shipped(path: Path) -> bool:
    """Whether ``path`` is a file of an installed package's data (read-only in spirit:
    outputs such as a sweep's database go elsewhere)."""
    installed = installed_root()
    if installed is None:
        return False
    try:
        path.resolve().relative_to(installed.resolve())
    except ValueError:
        return False
    return True


def files() -> list[Path]:
    """Every shipped file, relative to :func:`root`, sorted."""
    base = root()
    found = {
        path.relative_to(base)
        for name in FOLDERS
        for pattern in PATTERNS
        for path in (base / name).rglob(pattern)
        if path.is_file() and ".ipynb_checkpoints" not in path.parts
    }
    return sorted(found)


def beside(path: Path, suffix: str) -> Path:
    """Where an output named after a config file goes (a sweep's database): beside the
    file, or in the current folder when the file is an installed package's data."""
    target = path.with_suffix(suffix)
    return Path.cwd() / target.name if is_shipped(path) else target


def names(kind: str) -> list[str]:
    """The shipped files of one kind, by name (file stem), sorted."""
    directory = folder(KINDS[kind])
    return sorted(p.stem for p in directory.iterdir() if p.suffix in _SUFFIXES and p.is_file())


def _bare(text: str) -> bool:
    """A name rather than a path: no folder part and no YAML suffix."""
    return "/" not in text and "\\" not in text and Path(text).suffix not in _SUFFIXES


def find(text: str, kinds: Sequence[str] = ALL_KINDS) -> Path | None:
    """The shipped file ``text`` names, or None: a bare name (``llama8b-batch``) is looked
    up among ``kinds`` in order; a relative path (``workloads/sweeps/llama8b-batch.yaml``)
    under the shipped root."""
    base = installed_root() or checkout_root()
    if base is None or not text:
        return None
    if _bare(text):
        for kind in kinds:
            for suffix in _SUFFIXES:
                candidate = base / KINDS[kind] / f"{text}{suffix}"
                if candidate.is_file():
                    return candidate
        return None
    relative = Path(text)
    if relative.is_absolute() or ".." in relative.parts:
        return None
    candidate = base / relative
    return candidate if candidate.is_file() else None


def locate(path: str | Path, kinds: Sequence[str] = ALL_KINDS) -> Path:
    """What a user gave as a config file: an existing path as it is, else the shipped file
    it names (see :func:`find`).

    Raises:
        ConfigError: a bare name that is neither a file nor shipped, listing the shipped
            names of ``kinds``; any other missing path is returned for the loader to report.
    """
    given = Path(path)
    try:
        if given.exists():
            return given
    except (OSError, ValueError):
        return given
    found = find(str(path), kinds)
    if found is not None:
        return found
    if _bare(str(path)):
        raise ConfigError.single(str(path), "", unknown_name_message(kinds))
    return given


def locate_near(near: Path, text: str, kinds: Sequence[str]) -> Path:
    """A file named inside a config file (``hardware: sn40l-16``): ``near`` (what ``text``
    means relative to that file) when it exists, else the shipped file a bare ``text``
    names, else ``near`` for the caller to report as missing."""
    try:
        if near.exists():
            return near
    except (OSError, ValueError):
        return near
    found = find(text, kinds) if _bare(text) else None
    return found if found is not None else near


def label(kind: str) -> str:
    """A kind in words, plural: "workloads", "hardware files"."""
    return "hardware files" if kind == "hardware" else f"{kind}s"


def unknown_name_message(kinds: Sequence[str]) -> str:
    """No such file, and the names that would have worked (when few kinds were possible)."""
    listing = ""
    if len(kinds) <= 2:
        try:
            listing = "; ".join(f"{label(kind)}: {', '.join(names(kind))}" for kind in kinds)
        except ConfigError:
            listing = "none are installed"
        listing = f" (shipped {listing})"
    return (
        f"no such file, and no shipped {' or '.join(kinds)} of that name{listing}; "
        "`rdu-sim examples` lists them, `rdu-sim examples copy DIR` copies them to edit"
    )
