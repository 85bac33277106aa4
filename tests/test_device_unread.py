"""A field the workload's kind of hardware does not read warns as a ``kv`` field the policy
does not read (one rule: ``config.overrides.unread_paths``; the list is
``config.device_reads``): ``--set kernel_looping=false`` on a GPU at fusion auto and ``--set
cuda_graphs=false`` on SN40L changed nothing and said nothing."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.config.overrides import UnreadFieldWarning

SEVENTY_B = Path(__file__).resolve().parents[1] / "workloads" / "llama3.1-70b-decode.yaml"
H100 = {"hardware": "dgx-h100"}
SHAPE = {"batch": 4, "context": 1024}


def _step_s(overrides: dict[str, object]) -> float:
    """The decode step's time, the warnings it gives ignored."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreadFieldWarning)
        return api.step(SEVENTY_B, overrides, **SHAPE).step_s  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("where", "field", "value", "read"),
    [
        (H100, "kernel_looping", False, False),  # fusion auto: partial on a GPU
        ({}, "cuda_graphs", False, False),
        ({}, "stack.decode_attention_split", "whole", False),
        # fusion full loops on a GPU too: one launch a looped kernel, not one a layer
        ({**H100, "fusion": "full", "cuda_graphs": False}, "kernel_looping", False, True),
        ({}, "kernel_looping", False, True),
        ({"fusion": "partial"}, "kernel_looping", False, False),
        ({**H100, "cuda_graphs": False}, "stack.decode_attention_split", "whole", True),
    ],
)
def test_a_field_warns_exactly_where_it_changes_nothing(
    where: dict[str, object], field: str, value: object, read: bool
) -> None:
    """Each listed field, on each kind: the step is the same exactly where it warns."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        api.load(SEVENTY_B, {**where, field: value})
    said = [w for w in caught if issubclass(w.category, UnreadFieldWarning)]
    assert len(said) == (0 if read else 1)
    changed = _step_s({**where, field: value}) != _step_s(where)
    assert changed == read


def test_the_trial_s_kernel_looping_on_a_gpu_warns_naming_the_device() -> None:
    with pytest.warns(UnreadFieldWarning) as caught:
        api.load(SEVENTY_B, ["hardware=dgx-h100", "kernel_looping=false"])
    (message,) = [str(w.message) for w in caught]
    assert message == (
        f"{SEVENTY_B}: kernel_looping: False is not read on a GPU (dgx-h100) at fusion auto "
        "(partial here): kernel looping loops fusion full's layer kernels, so it changes "
        "nothing (from overrides: kernel_looping)"
    )


def test_the_cli_prints_one_warning_line_for_cuda_graphs_on_sn40l() -> None:
    result = CliRunner().invoke(cli, ["step", "llama3.1-70b-decode", "--set", "cuda_graphs=false"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "cuda_graphs" in line]
    assert lines == [
        f"warning: {SEVENTY_B}: cuda_graphs: False is not read on SN40L (sn40l-8): CUDA "
        "graphs launch a GPU's kernels, so it changes nothing (from --set cuda_graphs)"
    ]


def test_the_files_own_fields_do_not_warn() -> None:
    """The workload file sets kernel_looping and cuda_graphs both, so it runs on either
    kind: switching its hardware (or its fusion) is not a warning, nor a field it reads."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreadFieldWarning)
        api.load(SEVENTY_B)
        api.load(SEVENTY_B, H100)
        api.load(SEVENTY_B, {"fusion": "partial"})
        api.load(SEVENTY_B, {**H100, "cuda_graphs": False, "stack.decode_attention_split": 64})
        api.load(SEVENTY_B, {"kernel_looping": False})


def test_a_loaded_scenario_given_more_overrides_warns_of_those_alone() -> None:
    """A Scenario given more overrides is rebuilt with its machine's and stack's own fields
    as overrides: each ``api.load(scenario, {...})`` on SN40L (a memory plot's every point)
    warned of the stack's decode_attention_split, which nobody set."""
    base = api.load(SEVENTY_B)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreadFieldWarning)
        api.load(base, {"kv.policy": "full"})
        api.load(base, {"serving.max_context": 4096})
    with pytest.warns(UnreadFieldWarning, match=r"stack\.decode_attention_split: 'whole'"):
        api.load(base, {"stack.decode_attention_split": "whole"})
