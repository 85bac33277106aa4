"""``python -m benchmarks [--json FILE] [--smoke] [--case NAME ...]``: time the simulator.

Runs each case in a fresh subprocess (see ``benchmarks.measure``), prints a table of wall
time, events, events per second and peak RSS against the budget, and with ``--json`` writes
``{"schema", "smoke", "machine", "cases": [{"name", "wall_s", "events", "events_per_s",
"peak_rss_bytes", "budget_wall_s", "budget_rss_bytes", "pass", ...}]}``. Exit status: 0, or
1 when a case failed to run, or (with ``--check``) when a case is over its budget.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks import SCHEMA
from benchmarks.cases import CASES
from benchmarks.measure import (
    RESULT_MARK,
    child_timeout_s,
    machine,
    run_child,
    run_in_subprocess,
    table,
)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    names = [c.name for c in CASES]
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description="Time the simulator on its benchmark cases."
    )
    parser.add_argument("--json", metavar="FILE", type=Path, help="also write the results")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes (seconds; what the test suite runs), no budgets",
    )
    parser.add_argument(
        "--case",
        action="append",
        choices=names,
        metavar="NAME",
        help=f"run only this case (repeatable): {', '.join(names)}",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a case is over its budget"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks (or, with the internal ``--child``, one case in this process)."""
    args = parse(argv)
    if args.child:
        if not args.case or len(args.case) != 1:
            print("--child needs exactly one --case", file=sys.stderr)
            return 2
        result = run_child(args.case[0], args.smoke)
        print(RESULT_MARK + json.dumps(result.to_json()), flush=True)
        return 0
    selected = [c for c in CASES if not args.case or c.name in args.case]
    results = []
    for case in selected:
        print(
            f"running {case.name}{' (smoke)' if args.smoke else ''}: {case.description}",
            file=sys.stderr,
            flush=True,
        )
        timeout_s = child_timeout_s(None if args.smoke else case.budget_wall_s)
        results.append(run_in_subprocess(case.name, args.smoke, timeout_s))
    print(table(results))
    if args.json is not None:
        doc = {
            "schema": SCHEMA,
            "smoke": args.smoke,
            "machine": machine(),
            "cases": [r.to_json() for r in results],
        }
        args.json.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    if any(r.error for r in results):
        return 1
    if args.check and any(r.passed is False for r in results):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
