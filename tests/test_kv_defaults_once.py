"""SnapKV's and SnapStream's parameters have their defaults in one place, the config model
(``KVConfig``): no function or constructor elsewhere in ``rdu_sim`` gives one of them a
default of its own (docs/kv.md, "Parameters and defaults")."""

from __future__ import annotations

import ast
from pathlib import Path

from rdu_sim.config.workload import KVConfig

ROOT = Path(__file__).resolve().parents[1] / "rdu_sim"
PARAMETERS = ("observation_window", "window", "kernel_size", "pooling", "sinks", "recent", "budget")


def defaulted_parameters(tree: ast.AST) -> list[tuple[str, int, str]]:
    """(function, line, parameter) of every SnapKV parameter given a default in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        pairs = list(
            zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)
        )
        pairs += [
            (a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
        ]
        for arg, default in pairs:
            is_none = isinstance(default, ast.Constant) and default.value is None
            if arg.arg in PARAMETERS and not is_none:
                found.append((node.name, node.lineno, arg.arg))
    return found


def test_no_snapkv_default_outside_the_config_model() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted(ROOT.rglob("*.py"))
        if path.parent.name != "config"
        for found in [defaulted_parameters(ast.parse(path.read_text()))]
        if found
    }
    assert offenders == {}


def test_the_check_finds_a_default() -> None:
    tree = ast.parse("def f(q, *, window=32, kernel_size=None, gqa='x'):\n    pass\n")
    assert defaulted_parameters(tree) == [("f", 1, "window")]


def test_the_config_model_holds_snapkvs_defaults() -> None:
    kv = KVConfig()
    assert (kv.observation_window, kv.kernel_size, kv.pooling) == (32, 7, "max")
    assert (kv.sinks, kv.recent) == (4, 2048)
