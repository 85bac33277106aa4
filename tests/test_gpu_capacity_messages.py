"""Capacity and unknown-field messages a GPU engineer met (trial R, F7 and F8), each naming
only what the user can change and helps:

- a step's ``--batch`` whose slots do not fit names ``--batch`` as the remedy (it said
  "lower serving.batch_slots"), says a slot is sized for ``serving.max_context`` whatever a
  shorter ``--context``, and says plainly that the slots exceed the whole HBM (it said "more
  than its 80 GiB before the weights");
- weights that alone fill HBM list only what shrinks the weights per device (it offered
  max_context and SnapStream, which cannot help);
- ``hw.socket...`` on a GPU's hardware file and ``gpu:`` in an SN40L file name the section
  the other kind has (it said only "unknown field").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim.cli.main import cli
from rdu_sim.compiler.errors import SlotsCapacityError

L8 = """\
name: l8-fp8-h100
hardware: dgx-h100
model: llama-3.1-8b
dtypes: {weights: fp8, kv: fp8, activations: bf16}
parallelism: {tp: 1}
kv: {policy: full}
serving:
  batch_slots: auto
  max_context: 8192
  prompt_tokens: 128
  output_tokens: 128
  arrival: {process: all_at_once}
  requests: 400
  seed: 0
"""
STATIC = ("--set", "stack.kv_page_tokens=null")  # static slots of max_context each


def _error(*args: str | Path) -> str:
    """The one ``error:`` line of a refused command (exit 2, no traceback)."""
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.fixture
def l8(tmp_path: Path) -> Path:
    workload = tmp_path / "l8.yaml"
    workload.write_text(L8)
    return workload


def test_a_step_batch_too_big_names_batch_and_the_slot_size(l8: Path) -> None:
    """Trial R F7: 256 slots of 8,192 tokens (fp8: 128 GiB) on one H100, stepped at 2,048
    tokens: the remedy is ``--batch`` (130 fit), the slot's size is said to come from
    max_context, not --context, and lowering max_context is offered."""
    said = _error("step", l8, *STATIC, "--batch", "256", "--context", "2048")
    assert said == (
        f"error: {l8}: --batch: the KV cache of 256 slots (128 GiB: a slot of max_context "
        "8192 tokens, kv.policy full) and activations (257.3 MiB), which must be in HBM, need "
        "128.3 GiB per GPU, more than its whole HBM (80 GiB) even without the weights "
        "(7.479 GiB, which a GPU keeps in HBM too: 135.7 GiB in all); --context 2048 does "
        "not shrink a slot: the memory plan sizes each for 8192 tokens, whatever a step's "
        "context; lower --batch (at most 130 fit beside the weights in the stack's KV share "
        "(kv_memory_fraction 0.9); 'auto' picks that), reduce serving.max_context (now 8192), "
        "use kv.policy snapstream (now full), raise parallelism.tp (now 1, up to the 8 GPUs) "
        "or give each GPU more HBM (hw.gpu.hbm.capacity, now 80 GiB)"
    )
    assert "serving.batch_slots" not in said
    # a --context as long as the slot, or none, says nothing of it; inspect graph alike
    for context in (("--context", "8192"), ()):
        said = _error("step", l8, *STATIC, "--batch", "256", *context)
        assert "does not shrink a slot" not in said and "lower --batch (at most 130" in said
    said = _error("inspect", "graph", l8, *STATIC, "--batch", "256", "--context", "100")
    assert "; --context 100 does not shrink a slot: " in said and "lower --batch (" in said


def test_the_workloads_own_slots_keep_naming_the_field(l8: Path) -> None:
    """The same slots set in the workload are its ``serving.batch_slots`` (and the step's
    --context note is for --batch only)."""
    said = _error("step", l8, *STATIC, "--set", "serving.batch_slots=256", "--context", "2048")
    assert said.startswith(f"error: {l8}: serving.batch_slots: the KV cache of 256 slots")
    assert "; lower serving.batch_slots (at most 130 fit" in said
    assert "--batch" not in said and "--context" not in said


def test_given_by_rewrites_only_the_fewer_slots_remedy() -> None:
    exc = SlotsCapacityError.of(
        "too many", ["lower serving.batch_slots (at most 3 fit)", "reduce x (now 2)"], 64
    )
    assert str(exc) == "too many; lower serving.batch_slots (at most 3 fit) or reduce x (now 2)"
    assert exc.given_by("--batch") == "too many; lower --batch (at most 3 fit) or reduce x (now 2)"
    assert exc.given_by("--batch", 16) == (
        "too many; --context 16 does not shrink a slot: the memory plan sizes each for 64 "
        "tokens, whatever a step's context; lower --batch (at most 3 fit) or reduce x (now 2)"
    )
    plain = SlotsCapacityError("no parts")
    assert plain.given_by("--batch", 1) == "no parts"


def test_weights_alone_beyond_hbm_offer_only_what_shrinks_them(tmp_path: Path) -> None:
    """Trial R F8: Llama 3.1 405B in bf16 over 8 H100s is 97.93 GiB a GPU: no KV remedy
    helps, nor DDR (a GPU has none)."""
    workload = tmp_path / "l70.yaml"
    workload.write_text(L8.replace("llama-3.1-8b", "llama-3.1-70b").replace("tp: 1", "tp: 8"))
    said = _error("run", workload, "--set", "model=llama-3.1-405b", "--set", "dtypes.weights=bf16")
    assert said == (
        f"error: {workload}: dtypes.weights: the weights alone do not fit, so not one "
        "sequence does: llama-3.1-405b weights need 97.93 GiB per GPU (tp=8, bf16), "
        "memory.weights hbm keeps all of them in HBM, 17.93 GiB more than it holds (its "
        "80 GiB of HBM per GPU); store weights in fp8 (dtypes.weights, now bf16), raise "
        "parallelism.tp on more GPUs (hw.system.sockets, now 8, or a hardware file with more) "
        "or give each GPU more HBM (hw.gpu.hbm.capacity, now 80 GiB) "
        "(from --set model, --set dtypes.weights)"
    )
    # weights that fit but leave no slot still get the KV cache's remedies
    said = _error(
        "run",
        workload,
        *STATIC,
        "--set",
        "serving.max_context=131072",
        "--set",
        "hw.gpu.hbm.capacity=10GiB",
    )
    assert "cannot fit even one sequence (a slot of max_context 131072 tokens" in said
    assert "reduce serving.max_context (now 131072)" in said


@pytest.mark.parametrize(
    ("workload", "setting", "hint"),
    [
        (
            "l8",
            "hw.socket.hbm.capacity=100GiB",
            "unknown field 'socket'; a GPU's hardware file has gpu:, not socket: (hw.gpu... "
            "with --set). Valid fields here: cost, default_stack, description, gpu, kind, ",
        ),
        (
            "llama3.1-8b-1socket",
            "hw.gpu.hbm.capacity=100GiB",
            "unknown field 'gpu'; an SN40L hardware file has socket:, not gpu: (hw.socket... "
            "with --set); a GPU's file says kind: gpu. Valid fields here: cost, ",
        ),
    ],
)
def test_the_other_kinds_device_section_is_named(
    l8: Path, workload: str, setting: str, hint: str
) -> None:
    said = _error("run", l8 if workload == "l8" else workload, "--set", setting)
    assert hint in said, said
    assert said.endswith(f"(from --set {setting.split('=')[0]})")


def test_a_gpu_section_in_an_sn40l_file_is_named(tmp_path: Path) -> None:
    hardware = tmp_path / "hw.yaml"
    hardware.write_text("name: x\nsocket: {}\ngpu: {sms: 1}\nsystem: {sockets: 1}\n")
    result = CliRunner().invoke(cli, ["check", str(hardware)])
    assert result.exit_code == 2
    assert (
        f"error: {hardware}:3: gpu: unknown field 'gpu'; an SN40L hardware file has socket:, "
        "not gpu: (hw.socket... with --set); a GPU's file says kind: gpu." in result.output
    )
    # elsewhere a close name is still the hint
    said = _error("run", "llama3.1-8b-1socket", "--set", "hw.sockt.hbm.capacity=1GiB")
    assert "unknown field 'sockt'; did you mean 'socket'?" in said


def test_a_page_longer_than_a_sequence_is_blamed_not_the_hardware(l8: Path) -> None:
    """A paged stack whose page (2^20 tokens, 128 GiB of bf16 KV) is longer than any sequence:
    every request reserves that page whole, so the refusal names stack.kv_page_tokens (the
    first override among the fields it blames, before the hardware; before, the hardware)
    and the smallest request's reservation (before: "one slot's KV cache is 512 MiB", a
    static slot it does not have), and offers a smaller page instead of a shorter context."""
    page = ("--set", "dtypes.kv=bf16", "--set", "stack.kv_page_tokens=1048576")
    said = _error("run", l8, "--set", "hardware=dgx-h100", *page)
    assert said.startswith(f"error: {l8}: stack.kv_page_tokens: cannot fit even one sequence")
    assert "the smallest request reserves 1 page of 1,048,576 tokens (128 GiB)" in said
    assert "lower stack.kv_page_tokens (now 1048576: a page longer than a sequence)" in said
    assert "max_context (now" not in said and "one slot's" not in said
    assert "store the KV cache in fp8 (dtypes.kv, now bf16)" in said  # a smaller page
    assert said.endswith("(from --set stack.kv_page_tokens)")
    # a page within a sequence, the smallest request's own 256 tokens (4 pages) below the
    # slot: a shorter context would not shrink them, so it is not offered
    said = _error("run", l8, "--set", "hw.gpu.hbm.capacity=7.49GiB")
    assert "the smallest request reserves 4 pages of 64 tokens (16 MiB)" in said
    assert "max_context (now" not in said and "kv.policy snapstream" not in said
