"""The stack ``none`` is what its words say (``config.stack.NONE_WORDS``, the description a
run's provenance and the docs show): the device alone, no host time, but a static runtime
whose decode steps run the program of every batch slot, decoding or not, and whose prefill
steps take one prompt each; not the hardware's best serving (it was called "the hardware's
ceiling")."""

from __future__ import annotations

from rdu_sim import api
from rdu_sim.config.stack import NONE_WORDS
from rdu_sim.config.workload import WorkloadConfig

LIGHT = {
    "stack": "none",
    "serving.batch_slots": 8,
    "serving.requests": 3,
    "serving.max_context": 2048,
    "serving.prompt_tokens": {"dist": "fixed", "value": 256},
    "serving.output_tokens": {"dist": "fixed", "value": 16},
}


def test_none_adds_no_host_time_and_decodes_every_slot() -> None:
    stack = api.load("llama3.1-8b-1socket", {"stack": "none"}).stack
    assert stack.description == NONE_WORDS
    host = stack.host.time(8, 10e-3, prompts=1)
    assert (host.serial_s, host.overlapped_s, host.added_s) == (0.0, 0.0, 0.0)
    assert stack.decode_rows == "slots" and stack.prefill_batch_tokens is None
    # three requests in eight slots: every decode step runs the eight-slot program under
    # none, the live sequences' programs once the stack runs those
    shapes = {(s.phase, s.batch) for s in api.run("llama3.1-8b-1socket", LIGHT).cache.shapes}
    assert shapes == {("decode", 8), ("prefill", 1)}
    live = api.run("llama3.1-8b-1socket", {**LIGHT, "stack.decode_program": "live"})
    assert max(s.batch for s in live.cache.shapes if s.phase == "decode") < 8


def test_the_schema_says_what_none_keeps() -> None:
    words = WorkloadConfig.model_fields["stack"].description or ""
    assert "ceiling" not in words
    assert (
        "'none' (the device alone: no host time; static decode programs over every batch " in words
    )


def test_an_edit_of_the_device_alone_is_refused_naming_the_workload_that_chose_it() -> None:
    """``--set stack=none`` has no file: its field's error is named by the workload that
    chose it, with the override that set the field (trial Q's read ``none: decode_program``,
    "none" where a file goes)."""
    import pytest

    from rdu_sim.config import ConfigError
    from rdu_sim.config.shipped import locate
    from rdu_sim.scenario import load_scenario

    file = locate("llama3.1-8b-1socket", ("workload",))
    with pytest.raises(ConfigError) as info:
        load_scenario(file, {"stack": "none", "stack.kv_page_tokens": -3})
    assert str(info.value) == (
        f"{file} (stack none: the device alone): kv_page_tokens: must be at least 1, got -3 "
        "(from --set stack.kv_page_tokens)"
    )


def test_none_on_a_gpu_holds_whole_slots_and_pads_prompts_as_its_words_say() -> None:
    """``--set stack=none`` (compare's advice to compare devices alike) moves more than the
    host time on a GPU, and its words say what: no paged pool (the H100's 70B batch
    capacity falls from TensorRT-LLM's 2,048 to the slots its memory holds whole) and each
    prompt padded to its bucket (the trial's 152 ms against 115 ms)."""
    from rdu_sim.compare import compare

    assert "padded to its prompt bucket" in NONE_WORDS
    assert "no paged pool: a GPU holds fewer slots" in NONE_WORDS
    paged, alone = compare(
        "llama3.1-70b-decode", ["dgx-h100"], vary=["stack=tensorrt-llm,none"], batch=1
    ).columns
    assert alone.batch_capacity is not None and paged.batch_capacity is not None
    assert alone.batch_capacity < paged.batch_capacity
    assert alone.prefill_bucket is not None and alone.prefill_tokens is not None
    assert alone.prefill_bucket > alone.prefill_tokens == paged.prefill_bucket
    assert alone.prefill_s is not None and paged.prefill_s is not None
    assert alone.prefill_s > paged.prefill_s
