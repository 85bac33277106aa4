"""A pipeline's binding stage: the reports measure the slowest stage, not the first; the
bubble splits into fill and drain and stage imbalance; ``parallelism.stage_layers`` sets the
layer split; the trace holds every stage; the bubble's words say one batch is in flight."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.compiler.stages import pipeline_stages
from rdu_sim.config.errors import ConfigError

LLAMA70 = "workloads/llama3.1-70b-decode.yaml"
GPT_OSS = "workloads/gpt-oss-120b-8socket.yaml"
PP2 = {"hardware": "sn40l-16", "parallelism.tp": 8, "parallelism.pp": 2, "serving.batch_slots": 8}
LIGHT_FIRST = {**PP2, "parallelism.stage_layers": [10, 70]}


def test_stage_layers_sets_each_stages_layers() -> None:
    model = api.load(LLAMA70, LIGHT_FIRST).model
    stages = pipeline_stages(model, 2, (10, 70))
    assert [(s.first_layer, s.end_layer) for s in stages] == [(0, 10), (10, 80)]
    # the default split by count is what an even stage_layers gives, to the byte
    default = api.step(api.load(LLAMA70, PP2), batch=8).detail
    even = api.step(api.load(LLAMA70, {**PP2, "parallelism.stage_layers": [40, 40]}), batch=8)
    assert even.detail.to_dict() == default.to_dict()


@pytest.mark.parametrize(
    ("layers", "words"),
    [
        ([40, 41], "[40, 41] add up to 81 layers; the llama-3.1-70b model has 80"),
        ([80], "gives 1 stages' layers for pp=2 stages"),
        ([0, 80], "must give every stage at least one layer, got [0, 80]"),
    ],
)
def test_a_bad_stage_layers_is_refused_naming_the_field(layers: list[int], words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        api.load(LLAMA70, {**PP2, "parallelism.stage_layers": layers})
    (issue,) = caught.value.issues
    assert (issue.file, issue.field) == (LLAMA70, "parallelism.stage_layers")
    assert words in issue.message


def test_stage_layers_inside_a_body_is_refused_in_one_line() -> None:
    args = ["--set", "hw.system.sockets=48", "--set", "parallelism.tp=1", "--batch", "4"]
    result = CliRunner().invoke(
        cli,
        [
            "step",
            "gpt-oss-120b-8socket",
            *args,
            "--set",
            "parallelism.pp=2",
            "--set",
            "parallelism.stage_layers=[17, 19]",
        ],
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert "gpt-oss-120b-8socket.yaml: parallelism.stage_layers: " in line
    assert "cuts the gpt-oss-120b model at layer 17, inside a body" in line
