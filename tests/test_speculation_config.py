"""A workload's speculation section: the draft scenario it builds, and every refusal naming
its field (and line, from the file), exit status 2 from the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.config.errors import ConfigError
from rdu_sim.models import get_model
from rdu_sim.scenario import load_scenario

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "workloads" / "speculative"
SPECDEC = SPEC / "llama3.1-70b-16socket-specdec.yaml"
SHIPPED = sorted(SPEC.glob("*.yaml"))


def _issue(path: Path, overrides: list[str]) -> tuple[str, str, int | None]:
    with pytest.raises(ConfigError) as info:
        load_scenario(path, overrides)
    [issue] = info.value.issues[-1:]
    return issue.field, issue.message, issue.line


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_speculative_workloads_build_their_draft(path: Path) -> None:
    scenario = load_scenario(path)
    spec = scenario.workload.speculation
    assert spec is not None and scenario.draft is not None
    draft = scenario.draft
    if isinstance(spec.draft, str):
        assert draft.model == get_model(spec.draft)
    assert draft.workload.speculation is None and draft.draft is None
    assert draft.hardware == scenario.hardware
    assert draft.kv_policy is scenario.kv_policy
    assert draft.tp == (spec.draft_tp or scenario.tp)
    assert draft.workload.serving == scenario.workload.serving


PADDED = (  # Llama-3.1-70B's draft with an embedding table padded past the target's rows
    "speculation.draft={family: llama, name: padded, vocab_size: 128384, hidden_size: 256, "
    "layers: 2, heads: 16, kv_heads: 8, head_dim: 16, ffn_intermediate: 512, "
    "max_context: 131072}"
)


def test_a_draft_padded_differently_runs_when_the_workload_says_one_tokenizer() -> None:
    """Vocabularies that differ mean different tokenizers unless the workload says they are
    one (a family padding its tables differently): then the draft decodes for the target."""
    field, message, _ = _issue(SPECDEC, [PADDED])
    assert field == "speculation.draft" and "128384" in message and "128256" in message
    assert "set speculation.same_tokenizer: true" in message
    scenario = load_scenario(SPECDEC, [PADDED, "speculation.same_tokenizer=true"])
    assert scenario.draft is not None and scenario.draft.model.vocab_size == 128384
    field, message, _ = _issue(SPECDEC, ["speculation.same_tokenizer=false"])
    assert field == "speculation.same_tokenizer" and "is false" in message


def test_speculation_null_is_plain_decoding() -> None:
    scenario = load_scenario(SPECDEC, ["speculation=null"])
    assert scenario.draft is None and scenario.workload.speculation is None


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        (["speculation.draft=gpt-9"], "speculation.draft", "unknown model 'gpt-9'"),
        (["speculation.draft=mistral-7b"], "speculation.draft", "share the target's tokenizer"),
        (["speculation.draft_tp=8"], "speculation.draft_tp", "must equal parallelism.tp"),
        (
            ["parallelism.tp=8", "speculation.placement=separate", "speculation.draft_tp=16"],
            "speculation.draft_tp",
            "left beside the target's",
        ),
        (
            ["speculation.placement=separate"],
            "speculation.draft",
            "exceeds the 0 sockets",
        ),
        (
            ["speculation.decoding.acceptance={dist: trace}"],
            "speculation.decoding.acceptance",
            "has no trace",
        ),
        (
            [
                "serving.max_context=131072",
                "speculation.draft={family: llama, name: tiny, "
                "vocab_size: 128256, hidden_size: 256, layers: 2, heads: 16, kv_heads: 8, "
                "head_dim: 16, ffn_intermediate: 512, max_context: 4096}",
            ],
            "speculation.draft",
            "exceeds the draft tiny's maximum context",
        ),
    ],
)
def test_refusals_name_the_field(overrides: list[str], field: str, words: str) -> None:
    got, message, _ = _issue(SPECDEC, overrides)
    assert got == field
    assert words in message


def test_validation_refusals() -> None:
    field, message, _ = _issue(SPECDEC, ["speculation.decoding=null"])
    assert field == "speculation" and "needs decoding, prefill or both" in message
    field, message, _ = _issue(SPECDEC, ["speculation.prefill={keep_ratio: 0.5}"])
    assert field == "speculation" and "not modelled" in message
    field, message, _ = _issue(SPECDEC, ["speculation.decoding.acceptance=1.5"])
    assert field.startswith("speculation.decoding.acceptance")
    field, _, _ = _issue(SPECDEC, ["speculation.decoding.draft_tokens=0"])
    assert field == "speculation.decoding.draft_tokens"
    field, _, _ = _issue(SPECDEC, ["speculation.placement=nearby"])
    assert field == "speculation.placement"


def test_sharing_the_embeddings_needs_their_shape_and_the_same_sockets() -> None:
    field, message, _ = _issue(SPECDEC, ["speculation.shares_embeddings=true"])
    assert field == "speculation.shares_embeddings"
    assert "128256 x 2048" in message and "128256 x 8192" in message
    mtp = SPEC / "deepseek-r1-16socket-mtp.yaml"
    field, message, _ = _issue(
        mtp, ["parallelism.tp=8", "speculation.placement=separate", "speculation.draft_tp=8"]
    )
    assert field == "speculation" and "needs placement shared" in message


def test_cross_family_prefill_needs_a_token_mapping() -> None:
    path = SPEC / "deepseek-r1-128k-snapstream-specprefill.yaml"
    field, message, _ = _issue(path, ["speculation.prefill.token_mapping=null"])
    assert field == "speculation.prefill.token_mapping"
    assert "129280" in message and "128256" in message


def test_bad_draft_in_the_file_names_its_line(tmp_path: Path) -> None:
    text = SPECDEC.read_text().replace("draft: llama-3.2-1b", "draft: llama-0.5b")
    text = text.replace("../../hw_configs", str(REPO / "hw_configs"))
    path = tmp_path / "w.yaml"
    path.write_text(text)
    field, message, line = _issue(path, [])
    assert field == "speculation.draft" and "llama-0.5b" in message
    assert line == next(i for i, t in enumerate(text.splitlines(), 1) if "llama-0.5b" in t)


def test_cli_exits_2_without_a_traceback() -> None:
    result = CliRunner().invoke(
        cli, ["run", str(SPECDEC), "--set", "speculation.draft=deepseek-r1"]
    )
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "speculation.draft" in result.output


@pytest.mark.parametrize(
    ("draft", "words"),
    [
        ("llama-3.1-405b", "llama-3.1-405b's weights are 756 GiB (406B parameters)"),
        ("llama-3.1-70b", "llama-3.1-70b's weights are 131 GiB (70.6B parameters)"),
    ],
    ids=["larger", "the-same"],
)
def test_a_draft_not_smaller_than_its_target_is_refused(
    tmp_path: Path, draft: str, words: str
) -> None:
    """A draft whose weights are not smaller than the target's (a larger model, or the
    target itself) is refused at its line, both sizes named, exit 2 without a traceback."""
    text = SPECDEC.read_text().replace("draft: llama-3.2-1b", f"draft: {draft}")
    path = tmp_path / "w.yaml"
    path.write_text(text.replace("../../hw_configs", str(REPO / "hw_configs")))
    line = next(i for i, t in enumerate(text.splitlines(), 1) if f"draft: {draft}" in t)
    result = CliRunner().invoke(cli, ["run", str(path), "--json"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output == (
        f"error: {path}:{line}: speculation.draft: a draft must be smaller than the target it "
        f"drafts for: {words}, llama-3.1-70b's 131 GiB (70.6B parameters); name a smaller "
        "model, or leave speculation out\n"
    )


@pytest.mark.parametrize("value", ["80%", "high", True, [0.8]])
def test_an_acceptance_of_no_accepted_form_lists_the_forms(value: object) -> None:
    """``acceptance`` is a number or a distribution's mapping: anything else is told every
    form it may take (a percentage string is not a rate)."""
    field, message, _ = _issue(SPECDEC, [f"speculation.decoding.acceptance={value}"])
    assert field == "speculation.decoding.acceptance"
    assert message.startswith(
        "expected a rate from 0 to 1 (acceptance: 0.8), {dist: fixed, rate}, {dist: uniform, "
        "low, high}, {dist: beta, mean, concentration} or {dist: trace} (the trace's "
        "acceptance column); got "
    )


def test_a_cluster_refuses_a_speculating_pool(tmp_path: Path) -> None:
    from rdu_sim.cluster.scenario import load_cluster

    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        f"pools:\n  serve:\n    workload: {SPECDEC}\n    replicas: 2\n"
        "traffic: {rate: 1.0, requests: 4, prompt_tokens: 64, output_tokens: 8}\n"
        "slo: {ttft: 1 s, tpot: 50 ms}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_cluster(cluster)
    assert "speculates" in str(info.value)
