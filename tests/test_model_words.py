"""A report names the model the workload asked for: a preset that is another model's alias of
the same architecture is said beside it (``models.presets.model_words``)."""

from __future__ import annotations

from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.cli.step_cmd import window_words
from rdu_sim.models.presets import get_model, model_words


def test_an_alias_of_another_model_is_named_beside_its_architecture() -> None:
    assert get_model("deepseek-v3").name == "deepseek-r1"
    assert (
        model_words("deepseek-v3", "deepseek-r1")
        == "deepseek-v3 (same architecture as deepseek-r1)"
    )
    assert model_words("DeepSeek-R1-0528", "deepseek-r1") == (
        "DeepSeek-R1-0528 (same architecture as deepseek-r1)"
    )
    # the model's own name, another spelling of it, or no preset name: the name alone
    assert model_words("deepseek-r1", "deepseek-r1") == "deepseek-r1"
    assert model_words("llama3.1-8b", "llama-3.1-8b") == "llama-3.1-8b"
    assert model_words(None, "custom") == "custom" == model_words("not-a-preset", "custom")


def test_a_deepseek_v3_step_names_deepseek_v3() -> None:
    args = ["step", "deepseek-v3-h100-tp16-prefill", "--phase", "prefill", "--batch", "1",
            "--tokens", "256"]  # fmt: skip
    step = CliRunner().invoke(cli, args)
    assert step.exit_code == 0, step.output
    head = step.stdout.splitlines()[0]
    assert head.startswith(
        "deepseek-v3-h100-tp16-prefill: deepseek-v3 (same architecture as deepseek-r1) on "
    )


def test_window_words_agree_with_their_count() -> None:
    """gpt-oss-120b: 18 of 36 layers slide over 128 tokens ('18 layers slides' before)."""
    words = window_words(get_model("gpt-oss-120b"), 4096)
    assert words == " (18 layers slide over a 128-token window, reading at most 127 of them)"
    assert "every layer slides over a 4,096-token window" in window_words(
        get_model("mistral-7b"), 32768
    )
