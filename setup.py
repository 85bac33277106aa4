"""Packaging that pyproject.toml cannot say: the shipped data folders mapped into the package,
and the compiled core.

The checkout's workloads/, hw_configs/, stacks/, tests/models/ (the config.json files a shipped
workload reads) and notebooks/ are the one copy of each file. The wheel carries them under
``rdu_sim/data/`` in the same layout, so the relative paths inside the files
(``hardware: ../hw_configs/sn40l-16.yaml``) hold there too; ``rdu_sim.config.shipped`` finds
them installed or in a checkout.

The modules listed in native-modules.txt are compiled with mypyc (the same sources, so the
same results; rdu_sim/native.py guards against stale or half-compiled code). Without a C
compiler, or with RDU_SIM_PURE_PYTHON=1 at install, the package installs as pure Python and
says so in one line; MYPYC_OPT_LEVEL sets the C compiler's -O level (``OPT_LEVELS``).
Everything else is in pyproject.toml.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

SHIPPED = {
    "rdu_sim.data.workloads": "workloads",
    "rdu_sim.data.hw_configs": "hw_configs",
    "rdu_sim.data.stacks": "stacks",
    "rdu_sim.data.tests.models": "tests/models",
    "rdu_sim.data.notebooks": "notebooks",
    "rdu_sim.data.measurements": "measurements",
    "rdu_sim.data.calibrations": "calibrations",
}
"""Installed package -> checkout folder (a data-only package: no Python inside)."""


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], capture_output=True, text=True, errors="surrogateescape", timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


class BuildWithCommit(build_py):
    """Also write rdu_sim/_commit.json (the commit built and whether tracked files differed
    from it) when building from a git checkout, so an installed simulator can record the
    commit in its outputs (rdu_sim.provenance); nothing is written into the source tree."""

    def run(self) -> None:
        super().run()
        digest = _load_file("rdu_sim_tree_digest", "rdu_sim/tree_digest.py")
        head = _git("rev-parse", "HEAD") if Path(".git").exists() else None
        status = _git(*digest.STATUS_ARGS)
        if head is None or status is None or self.editable_mode:
            return
        target = Path(self.build_lib) / "rdu_sim" / "_commit.json"
        baked = {"commit": head.strip(), "dirty": bool(status.strip())}
        baked["changes"] = digest.changes_digest(".", status)
        target.write_text(json.dumps(baked))


NATIVE_LIST = Path("native-modules.txt")
NATIVE_GROUP = "rdu_sim_native"  # mypyc's shared library: rdu_sim_native__mypyc


def _load_file(name: str, path: str) -> ModuleType:
    """A module of the package that uses the standard library only, loaded from its file,
    since the package's dependencies may not be installed yet."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def native_rules() -> ModuleType:
    """rdu_sim/native.py itself, for its record rules."""
    return _load_file("rdu_sim_native_rules", "rdu_sim/native.py")


def native_sources() -> list[str]:
    """The module paths native-modules.txt lists (comments and blank lines skipped)."""
    lines = NATIVE_LIST.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


METADATA_COMMANDS = {"egg_info", "dist_info", "sdist"}
"""Commands that ask build_ext for its source files but build nothing (a pip install's
metadata step): they get the placeholder, not mypyc's extensions."""


def native_placeholder() -> list[Extension]:
    """One stand-in extension when the core is to be compiled, none (pure Python) when asked
    for or when mypyc is missing. It marks the wheel as platform-specific; BuildNative puts
    mypyc's extensions in its place when a build runs, so a pip install's metadata step does
    not type-check the core and generate its C (~20 s CPU) a second time."""
    if os.environ.get("RDU_SIM_PURE_PYTHON") == "1":
        return []
    if importlib.util.find_spec("mypyc") is None:
        print("rdu-sim: mypyc not found: installing pure Python (slower)", file=sys.stderr)
        return []
    return [Extension(f"{NATIVE_GROUP}__mypyc", sources=[])]


BUILD_MYPY_OPTIONS = ["--config-file=", "--ignore-missing-imports", "--no-site-packages"]
"""mypy's options in mypyc's front half: no config file (pyproject's strict checking and its
pydantic plugin are CI's ``mypy rdu_sim``), and no installed library but those of
``VISIBLE_LIBRARIES``: every other reads as ``Any``, installed or not. So the C is the same
in any environment (a build isolated with only the [build-system] requirements, or a
developer's with numpy: numpy seen typed changes serving/clock's C), and the front half
type-checks no third-party package (~14 s instead of ~41 s in the dev environment)."""

VISIBLE_LIBRARIES = ("simpy",)
"""The installed libraries the front half sees, copied onto its MYPYPATH: simpy, whose
classes the compiled event loop subclasses (without it the C differs)."""


def front_half_environment(folder: Path) -> dict[str, str]:
    """The front half's environment: this one, with MYPYPATH a new folder in ``folder``
    holding a copy of each of ``VISIBLE_LIBRARIES`` (mypy refuses site-packages itself on
    its path). SystemExit naming one that is not installed: without it the C would differ
    (a ``--no-build-isolation`` build in an environment that lacks a build requirement)."""
    visible = folder / "visible"
    visible.mkdir()
    for name in VISIBLE_LIBRARIES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise SystemExit(
                f"rdu-sim: the compiled core's build needs {name} installed (a build "
                f"requirement in pyproject.toml): pip install {name}, or build isolated"
            )
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(Path(spec.origin).parent, visible / name, ignore=ignore)
    return {**os.environ, "MYPYPATH": str(visible)}


OPT_LEVELS = ("0", "1", "2", "3")
"""The C compiler's optimization levels a build takes from ``MYPYC_OPT_LEVEL`` (mypyc's own
variable, which its command line reads): 3 unless set. The C is the same at every level; a
lower one compiles faster (1: ~30% less CPU, and the shipped workloads run about as fast; 0
less again), which the packaging test's wheel uses (0: it checks what the wheel holds and
that it runs, not how fast)."""


def opt_level() -> str:
    """``MYPYC_OPT_LEVEL``, else 3; SystemExit naming the variable for any other value."""
    level = os.environ.get("MYPYC_OPT_LEVEL", "3")
    if level not in OPT_LEVELS:
        expected = ", ".join(OPT_LEVELS)
        raise SystemExit(f"rdu-sim: MYPYC_OPT_LEVEL={level!r}: expected one of {expected}")
    return level


GENERATE_C = """
import json, os, sys
from mypyc.build import mypycify
options, sources = json.loads(sys.argv[1]), json.loads(sys.argv[2])
group, out, level = sys.argv[3], sys.argv[4], sys.argv[5]
extensions = mypycify(options + sources, opt_level=level, group_name=group, multi_file=True)
with open(out, "w") as file:
    json.dump([vars(extension) for extension in extensions], file)
sys.stdout.flush()
os._exit(0)  # not ~15 s of freeing mypy's ~5 million objects one by one
"""
"""mypyc's front half in a child process: type-check, generate and write the C, write the
extensions' fields to a file, exit at once."""


def native_extensions() -> list[Extension]:
    """mypyc's extensions for the listed modules: one C file per module (~25, 0.1 to 3 s of
    gcc each) that BuildNative compiles side by side, where one 9.5 MB file took a core 36 s.
    Made by ``GENERATE_C``; mypyc's errors and warnings pass through."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "extensions.json"
        args = [
            json.dumps(BUILD_MYPY_OPTIONS),
            json.dumps(native_sources()),
            NATIVE_GROUP,
            str(out),
            opt_level(),
        ]
        env = front_half_environment(Path(folder))
        subprocess.run([sys.executable, "-c", GENERATE_C, *args], check=True, env=env)
        made = json.loads(out.read_text())
    extensions = []
    for fields in made:
        extension = Extension(fields["name"], fields["sources"])
        extension.__dict__.update(fields, define_macros=[tuple(m) for m in fields["define_macros"]])
        extensions.append(extension)
    return extensions


def parallel_compile(compile: Callable[..., list[str]], jobs: int) -> Callable[..., list[str]]:
    """A C compiler's ``compile`` that compiles its sources ``jobs`` at a time (each is a gcc
    process, so threads suffice), the largest first; objects in the sources' order."""

    def compile_all(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
        if jobs < 2 or len(sources) < 2:
            return compile(sources, *args, **kwargs)
        largest_first = sorted(sources, key=lambda source: -os.path.getsize(source))
        with ThreadPoolExecutor(jobs) as pool:
            done = dict(
                zip(
                    largest_first,
                    pool.map(lambda source: compile([source], *args, **kwargs), largest_first),
                    strict=True,
                )
            )
        return [obj for source in sources for obj in done[source]]

    return compile_all


class BuildNative(build_ext):
    """Compile the core; on failure (no C compiler) install pure Python, saying so once.
    On success record, next to the package, the hash of each source the compiled modules were
    type-checked against (rdu_sim/native.py reads it to refuse stale compiled code)."""

    def finalize_options(self) -> None:
        modules = self.distribution.ext_modules
        placeholder = bool(modules) and len(modules) == 1 and not modules[0].sources
        if placeholder and not set(self.distribution.commands) <= METADATA_COMMANDS:
            self.distribution.ext_modules = native_extensions()
        super().finalize_options()

    def build_extensions(self) -> None:
        jobs = os.cpu_count() or 1
        self.compiler.compile = parallel_compile(self.compiler.compile, jobs)
        self.parallel = self.parallel or jobs  # the one-file shims too
        super().build_extensions()

    def run(self) -> None:
        if not self.extensions:
            return
        try:
            super().run()
        except Exception as error:  # a missing compiler fails in several ways
            for output in self.get_outputs():
                Path(output).unlink(missing_ok=True)
            print(
                f"rdu-sim: the compiled core could not be built ({error}): installing pure "
                "Python (slower, same results)",
                file=sys.stderr,
            )
            return
        rules = native_rules()
        compiled = [source[: -len(".py")].replace("/", ".") for source in native_sources()]
        package = Path("rdu_sim") if self.inplace else Path(self.build_lib) / "rdu_sim"
        (package / rules.RECORD_FILE).write_text(rules.BuildRecord.of_sources(compiled).text())
        if self.inplace:
            remove_stale_shims(package, set(compiled))


def remove_stale_shims(package: Path, compiled: set[str]) -> None:
    """Delete the extension files an earlier in-place build left for modules no longer
    compiled (``rdu_sim.native.stale_extensions``)."""
    for path in native_rules().stale_extensions(package, compiled):
        print(f"rdu-sim: removing {path} (no longer compiled)", file=sys.stderr)
        path.unlink()


setup(
    cmdclass={"build_py": BuildWithCommit, "build_ext": BuildNative},
    ext_modules=native_placeholder(),
    packages=[*find_packages(include=["rdu_sim", "rdu_sim.*"]), *SHIPPED],
    package_dir=SHIPPED,
    package_data={
        "rdu_sim": ["py.typed"],
        # rdu_sim.config.shipped.PATTERNS, the same files (tests/test_packaging.py checks)
        **{
            name: ["**/*.yaml", "**/*.csv", "**/*.jsonl", "**/*.json", "*.ipynb"]
            for name in SHIPPED
        },
    },
)
