"""The serving level's dispatch exists once: only the driver (``serving.driver``) turns the
scheduler's decisions into steps. A second copy (a server, a CoE node or a replica calling
``decide`` and carrying out its action itself) fails here, as does an action compared
outside the modules that own them. The one other caller is the attention ranks in lockstep
(``serving.lockstep``): what the driver drives for a replica's ranks, it passes each call
of the contract on to the ranks and never waits."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rdu_sim"
DRIVER = "serving/driver.py"
RANKS = "serving/lockstep.py"
"""The ranks in lockstep: a ``Driven`` that passes the driver's calls on to its ranks."""
DISPATCH = ("decide", "begin_prefill", "end_prefill", "decode_plan", "decode_done")
"""The scheduler's calls a dispatch makes: decide, then carry out the action."""
ACTIONS_OWNED = ("serving/driven.py", "serving/scheduler.py", DRIVER, RANKS)


def dispatch_calls(tree: ast.AST) -> list[str]:
    """The dispatch methods ``tree`` calls (``x.decide(...)``, ...)."""
    return [
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in DISPATCH
    ]


def action_uses(tree: ast.AST) -> list[str]:
    """Where ``tree`` names an action (``Action.DECODE``, ...)."""
    return [
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "Action"
    ]


def _sources() -> dict[str, ast.AST]:
    return {
        path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text())
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_only_the_driver_dispatches() -> None:
    calls = {name: dispatch_calls(tree) for name, tree in _sources().items()}
    elsewhere = {
        name: found for name, found in calls.items() if found and name not in (DRIVER, RANKS)
    }
    assert elsewhere == {}
    assert set(calls[DRIVER]) == set(DISPATCH)  # the driver does all of it


def test_the_ranks_in_lockstep_pass_calls_on_and_never_wait() -> None:
    """``serving.lockstep`` calls the ranks' contract from its own methods of the contract
    (a joint step's prefill calls the decoding ranks' plan too), and holds no generator: it
    cannot wait, so it cannot be a second dispatch."""
    tree = _sources()[RANKS]
    assert not any(isinstance(node, (ast.Yield, ast.YieldFrom)) for node in ast.walk(tree))
    ranks = next(
        node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == "Ranks"
    )
    methods = {node.name for node in ranks.body if isinstance(node, ast.FunctionDef)}
    assert set(DISPATCH) <= methods


def test_actions_are_named_where_they_are_made_and_carried_out() -> None:
    uses = {name: action_uses(tree) for name, tree in _sources().items()}
    assert {name for name, found in uses.items() if found} <= set(ACTIONS_OWNED)


def test_a_second_copy_would_be_seen() -> None:
    copy = ast.parse(
        "def turn(scheduler):\n"
        "    if scheduler.decide(0) is Action.DECODE:\n"
        "        scheduler.decode_done(*scheduler.decode_plan()[:2], 1)\n"
    )
    assert sorted(dispatch_calls(copy)) == ["decide", "decode_done", "decode_plan"]
    assert action_uses(copy) == ["DECODE"]
