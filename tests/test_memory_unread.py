"""A ``memory`` field the chosen weights placement does not read warns as a ``kv`` field
the policy does not read (one rule: ``config.overrides.unread_overrides``; the list is
``config.workload.WEIGHTS_READS``): ``memory.hot_set_fraction`` under ``memory.weights:
hbm`` changed nothing and said nothing."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import get_args

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.config.overrides import UnreadFieldWarning
from rdu_sim.config.workload import WEIGHTS_READS, MemoryConfig, WeightsPlacement
from rdu_sim.kv.policies import UnreadKVFieldWarning

LLAMA = Path(__file__).resolve().parents[1] / "workloads" / "llama3.1-8b-1socket.yaml"


def test_every_placement_and_field_is_listed() -> None:
    assert set(WEIGHTS_READS) == set(get_args(WeightsPlacement))
    # and every field some placement reads (a field none read would change nothing)
    assert set(MemoryConfig.model_fields) - {"weights"} == {
        name for reads in WEIGHTS_READS.values() for name in reads
    }


@pytest.mark.parametrize("placement", sorted(WEIGHTS_READS))
def test_a_field_a_placement_does_not_read_changes_nothing(placement: str) -> None:
    """Each placement's memory plan with every other memory field at another value: the
    same where the list says it is unread, another where it says it is read (a tenth of
    HBM pins less than the 15 GiB of weights)."""
    backend = api.EngineBackend()
    sets = {"memory.weights": placement}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreadFieldWarning)
        plain = backend.plan_memory(api.load(LLAMA, sets), 16)
        other = backend.plan_memory(api.load(LLAMA, {**sets, "memory.hot_set_fraction": 0.1}), 16)
    same = plain.tiers == other.tiers
    assert same == ("hot_set_fraction" not in WEIGHTS_READS[placement])


def test_the_trial_fraction_under_hbm_warns_naming_what_hbm_reads() -> None:
    with pytest.warns(UnreadFieldWarning) as caught:
        api.load(LLAMA, ["memory.hot_set_fraction=0.3"])
    (message,) = [str(w.message) for w in caught]
    assert message == (
        f"{LLAMA}: memory.hot_set_fraction: 0.3 is not read by memory.weights hbm (it reads "
        "no other memory field), so it changes nothing (from overrides: "
        "memory.hot_set_fraction)"
    )
    assert not isinstance(caught[0].message, UnreadKVFieldWarning)


def test_a_read_field_or_the_files_own_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreadFieldWarning)
        api.load(LLAMA, ["memory.weights=hot_set", "memory.hot_set_fraction=0.3"])
        # a placement switched from the file's hot_set: its own fraction is not checked
        api.load(LLAMA.parent / "llama3.1-405b-bf16-8socket.yaml", ["memory.weights=hbm"])


def test_the_cli_prints_one_warning_line() -> None:
    sets = ["--set", "memory.hot_set_fraction=0.3", "--set", "serving.requests=1"]
    result = CliRunner().invoke(cli, ["run", str(LLAMA), *sets])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "hot_set_fraction" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: ")
