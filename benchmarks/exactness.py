"""``python -m benchmarks.exactness OUT [--quick]``: the outputs a speed change must not move.

Writes one JSON file per command into ``OUT`` (provenance removed: it names the commit and
whether the core ran compiled), from whatever ``rdu_sim`` the interpreter imports. A change
meant only to make the simulator faster must leave every file byte-identical, ``events``
included: run it on the tree before and after (``PYTHONPATH=TREE``, or
``RDU_SIM_PURE_PYTHON=1`` for the source path) and ``diff -r OUT_BEFORE OUT_AFTER``.

The commands: ``rdu-sim step --json`` of four workloads (DeepSeek-R1 SnapStream and full
attention, Llama 3.1 8B on 8 sockets, Qwen3-235B), decode and prefill at 4,096 tokens;
``rdu-sim run --json`` of three workloads at 300 requests (a lone server, DeepSeek-R1, a
Composition of Experts), the four speculative workloads at 200, and every shipped cluster
file.
``--quick``: two small commands (what the test suite runs). A command that fails is written
as ``NAME.error`` with its stderr, and the rest still run (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from benchmarks.work import ROOT

Command = tuple[str, tuple[str, ...]]
"""An output's file name (without ``.json``) and the ``rdu-sim`` arguments that make it."""


def _steps() -> list[Command]:
    workloads = (
        "deepseek-r1-128k-snapstream",
        "deepseek-r1-128k-full",
        "llama3.1-8b-8socket",
        "qwen3-235b-a22b-16socket",
    )
    phases = {"decode": (), "prefill": ("--tokens", "4096")}
    return [
        (f"step-{w}-{phase}", ("step", f"workloads/{w}.yaml", "--phase", phase, *extra, "--json"))
        for w in workloads
        for phase, extra in phases.items()
    ]


def _runs() -> list[Command]:
    lone = ("llama3.1-8b-1socket", "deepseek-r1-128k-snapstream", "samba-coe-150x8b-8socket")
    runs = [(f"run-{w}", f"workloads/{w}.yaml", ("--set", "serving.requests=300")) for w in lone]
    runs += [
        (f"spec-{p.stem}", str(p.relative_to(ROOT)), ("--set", "serving.requests=200"))
        for p in sorted((ROOT / "workloads" / "speculative").glob("*.yaml"))
    ]
    runs += [
        (f"cluster-{p.stem}", str(p.relative_to(ROOT)), ())
        for p in sorted((ROOT / "workloads" / "clusters").glob("*.yaml"))
    ]
    return [(name, ("run", path, *sets, "--json")) for name, path, sets in runs]


QUICK: tuple[Command, ...] = (
    ("step-llama3.1-8b-1socket-decode", ("step", "workloads/llama3.1-8b-1socket.yaml", "--json")),
    (
        "run-llama3.1-8b-1socket",
        ("run", "workloads/llama3.1-8b-1socket.yaml", "--set", "serving.requests=20", "--json"),
    ),
)


def commands(quick: bool) -> list[Command]:
    """What to run: the 18 commands, or the two quick ones."""
    return list(QUICK) if quick else _steps() + _runs()


def write_outputs(out: Path, quick: bool = False) -> int:
    """Run every command into ``out``; the number that failed."""
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name, args in commands(quick):
        proc = subprocess.run(
            [sys.executable, "-m", "rdu_sim.cli.main", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            (out / f"{name}.error").write_text(proc.stderr)
            failed += 1
            continue
        result = json.loads(proc.stdout)
        result.pop("provenance", None)
        (out / f"{name}.json").write_text(json.dumps(result, sort_keys=True, indent=1) + "\n")
    return failed


def main(argv: list[str] | None = None) -> int:
    """The command line: write the outputs, report failures."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.exactness",
        description="Write the outputs a speed change must leave byte-identical.",
    )
    parser.add_argument("out", type=Path, help="folder to write the JSON files into")
    parser.add_argument("--quick", action="store_true", help="two small commands only")
    options = parser.parse_args(argv)
    failed = write_outputs(options.out, options.quick)
    total = len(commands(options.quick))
    print(f"{total - failed} of {total} outputs written to {options.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
