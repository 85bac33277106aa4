"""An SLO target written without a unit: seconds, and refused where no SLO is set at that
many seconds (``ttft: 500`` meant 500 ms and read as 8.3 minutes), as a bare latency is."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rdu_sim.api_cluster import load_cluster
from rdu_sim.cli.main import cli
from rdu_sim.config.cluster import SLOConfig, SLOOverride
from rdu_sim.config.errors import ConfigError
from rdu_sim.plan import load_plan

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
SHIPPED = ROOT / "workloads" / "clusters" / "llama3.1-8b-chat.yaml"


def write_cluster(folder: Path, slo: str) -> Path:
    """A cluster file whose SLO line (line 10) is ``slo``, as written."""
    text = f"""name: t
pools:
  serve: {{workload: {LLAMA}, replicas: 2}}
traffic:
  rate: 2.0
  requests: 10
  prompt_tokens: 100
  output_tokens: 10
  seed: 1
slo: {slo}
"""
    path = folder / "cluster.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("slo", "message"),
    [
        (
            "{ttft: 500, tpot: 40 ms}",
            "cluster.yaml:10: slo.ttft: 500 without a unit reads as 500 s (8.33 min), longer "
            "than a time-to-first-token target is set at; write the unit, as in '500 ms' or "
            "'500 s'",
        ),
        (
            "{ttft: 500 ms, tpot: 40}",
            "cluster.yaml:10: slo.tpot: 40 without a unit reads as 40 s, longer than a "
            "time-per-output-token target is set at; write the unit, as in '40 ms' or '40 s'",
        ),
    ],
)
def test_a_cluster_files_bare_slo_past_its_ceiling_is_refused(
    tmp_path: Path, slo: str, message: str
) -> None:
    """File, line, field and how the number reads; it ran as 8.33 min and 40 s."""
    path = write_cluster(tmp_path, slo)
    with pytest.raises(ConfigError) as caught:
        load_cluster(path)
    assert message in str(caught.value)


def test_a_bare_slo_an_slo_is_set_at_is_seconds() -> None:
    """Bare seconds below the ceilings are read (``ttft: 2`` is 2 s), and any size with a
    unit; the ceiling is where it starts."""
    slo = SLOConfig.model_validate({"ttft": 2, "tpot": 0.05})
    assert (slo.ttft, slo.tpot) == (2.0, 0.05)
    slo = SLOConfig.model_validate({"ttft": "2 min", "tpot": "1.5 s"})
    assert (slo.ttft, slo.tpot) == (120.0, 1.5)
    assert SLOConfig.model_validate({"ttft": 59.9, "tpot": 0.999}).ttft == 59.9
    for fields in ({"ttft": 60, "tpot": 0.05}, {"ttft": 1, "tpot": 1}):
        with pytest.raises(ValueError, match="without a unit"):
            SLOConfig.model_validate(fields)


def test_an_slo_past_its_ceiling_dumps_with_its_unit_and_reads_back() -> None:
    """A dump (what ``--set`` rebuilds a cluster from) writes a long target with its unit."""
    slo = SLOConfig.model_validate({"ttft": "1 h", "tpot": "2 s", "attainment": 0.5})
    dumped = slo.model_dump(mode="json")
    assert dumped["ttft"] == "3600.0 s" and dumped["tpot"] == "2.0 s"
    assert SLOConfig.model_validate(dumped) == slo
    over = SLOOverride.model_validate({"ttft": "2 min"}).over(slo)  # the values, not a dump's
    assert over.ttft == 120.0 and over.tpot == 2.0


def test_a_plans_bare_slo_is_refused(tmp_path: Path) -> None:
    """The plan's ``slo`` over its cluster's: the trial's spec answered 1 socket (3 meet a
    500 ms TTFT) under an SLO of 8.33 min and 40 s."""
    spec = tmp_path / "pbare.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "pb",
                "cluster": str(SHIPPED),
                "slo": {"ttft": 500, "tpot": 40},
                "search": {"batch_slots": [32], "max_replicas": 8},
            }
        )
    )
    with pytest.raises(ConfigError) as caught:
        load_plan(spec)
    assert "slo.ttft: 500 without a unit reads as 500 s" in str(caught.value)
    assert str(spec) in str(caught.value)
    result = CliRunner().invoke(cli, ["plan", str(spec)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "slo.ttft: 500 without a unit" in result.output


def test_a_bare_slo_set_on_the_command_line_is_refused() -> None:
    """``--set slo.ttft=500``: exit 2, naming the override."""
    result = CliRunner().invoke(cli, ["run", "llama3.1-8b-chat", "--set", "slo.ttft=500", "--json"])
    assert result.exit_code == 2, result.output
    assert "slo.ttft: 500 without a unit reads as 500 s" in result.output
    assert "Traceback" not in result.output


def test_a_plan_override_of_the_slo_takes_the_same_rule() -> None:
    with pytest.raises(ValueError, match="40 without a unit"):
        SLOOverride.model_validate({"tpot": 40})
