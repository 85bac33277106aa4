"""`rdu-sim check NAME` where a shipped workload (or cluster) and a shipped plan share the
name: it checks the first kind's file as before and says which, and how to check the other."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim.cli import check_cmd
from rdu_sim.cli.main import cli
from rdu_sim.config import shipped
from rdu_sim.config.errors import ConfigError


def _check(*names: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["check", *names], terminal_width=400)
    return result.exit_code, result.stdout, result.stderr


def test_a_name_two_kinds_share_says_which_file_it_checked() -> None:
    code, out, _ = _check("deepseek-r1-h100")
    assert code == 0
    assert out.startswith("OK  deepseek-r1-h100: workload 'deepseek-r1-h100'")
    assert "checked workloads/ep/deepseek-r1-h100.yaml" in out
    assert (
        "the plan spec of the same name: rdu-sim check workloads/plans/deepseek-r1-h100.yaml" in out
    )
    # the command it names checks the plan
    code, out, _ = _check("workloads/plans/deepseek-r1-h100.yaml")
    assert code == 0 and "plan spec: 'deepseek-r1-h100'" in out and "same name" not in out


def test_a_name_one_kind_has_says_nothing_more() -> None:
    code, out, _ = _check("llama3.1-8b-1socket")
    assert code == 0 and "same name" not in out and "checked " not in out
    assert shipped.namesakes("llama3.1-8b-1socket") == [
        ("workload", shipped.locate("llama3.1-8b-1socket"))
    ]
    assert shipped.namesakes("workloads/plans/deepseek-r1-h100.yaml") == []


def test_a_failed_check_of_a_shared_name_says_which_file_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(path: Path, measured: object = None) -> str:
        raise ConfigError.single(str(shipped.locate(path)), "model", "no such model")

    monkeypatch.setattr(check_cmd, "check_file", refuse)
    code, _, err = _check("llama3.1-8b-chat")
    assert code == 2
    assert (
        "checked workloads/clusters/llama3.1-8b-chat.yaml; the plan spec of "
        "the same name: rdu-sim check workloads/plans/llama3.1-8b-chat.yaml"
    ) in err
