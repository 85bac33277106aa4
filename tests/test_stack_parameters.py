"""A serving stack's parameters: each changes some result, and the host's rule around a step
is the stated one (serial time adds, overlapped time adds only what outlasts the device).

The parameters are discovered from ``StackConfig`` (a new field is tested the day it is
added); each is varied on probe scenarios until some result moves: a step's time, the batch
capacity, a served batch's makespan (speculative rounds' among them).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
from pydantic import BaseModel

from rdu_sim import api
from rdu_sim.compiler import Compiler
from rdu_sim.config.errors import ConfigError
from rdu_sim.config.stack import HostWorkConfig, StackConfig
from rdu_sim.engine.timing import kv_pages
from rdu_sim.shapes import StepShape

LLAMA_1S = "llama3.1-8b-1socket"
SMALL = {"serving.max_context": 2048, "serving.batch_slots": 4}
BUSY_HOST = {
    "stack.host.overlapped_per_slot": 10e-3,
    "stack.host.overlapped_per_step": 1e-3,
    "stack.host.threads": 2,
}
"""Overlapped host work longer than the device's step: the host binds."""

PROBES: dict[str, dict[str, Any]] = {
    "static graphs": SMALL,
    "a host that outlasts the device": {**SMALL, **BUSY_HOST},
    "a paged GPU runtime": {
        **SMALL,
        "hardware": "dgx-h100",
        "stack": "tensorrt-llm",
        "serving.batch_slots": "auto",
    },
    # four GPUs split the KV heads: few thread blocks read decode attention's KV cache
    "a paged runtime on four GPUs": {
        **SMALL,
        "hardware": "dgx-h100",
        "stack": "tensorrt-llm",
        "parallelism.tp": 4,
    },
    # rounds of a 1B draft's steps and a verify step: what the host pays a round
    "speculative decoding": {
        **SMALL,
        "speculation.draft": "llama-3.2-1b",
        "speculation.decoding.draft_tokens": 3,
    },
    # a pool of 35 pages, 4 slots: three whole requests (9 pages each) fit it, four prompts
    # (8 pages each) do, and then a decode step lacks pages (pages given on demand preempt;
    # a watermark of 5% keeps one page free at admission)
    "a paged pool that binds": {
        **SMALL,
        "hardware": "dgx-h100",
        "stack": "vllm-2024",
        "stack.memory_utilization": 0.18795,
        "stack.kv_allocation": "on_demand",
        "stack.kv_watermark": 0.05,
        "serving.prompt_tokens": 128,  # (the capacity's smallest request: 9 pages)
        "serving.output_tokens": 16,
    },
}

NOT_PARAMETERS = {"name", "description", "runs_on"}
"""The stack's identity and the hardware kind it runs on (refusing the other kind is tested
in tests/test_hardware_extends.py)."""


def _leaves(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name, info in model.model_fields.items():
        annotation = info.annotation
        optional = [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(optional) == 1:
            annotation = optional[0]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaves(annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", annotation


PARAMETERS = {path: a for path, a in _leaves(StackConfig) if path not in NOT_PARAMETERS}


def _variants(value: Any, annotation: Any) -> list[Any]:
    if value is None:
        if typing.get_origin(annotation) is typing.Literal:
            return list(typing.get_args(annotation))
        return [0.5] if annotation is float else [256, 2]
    if isinstance(value, bool):
        return [not value]
    if typing.get_origin(annotation) is typing.Literal:
        return [v for v in typing.get_args(annotation) if v != value]
    if isinstance(value, str):  # a name among a union's literals, or a number in their place
        names = [
            v
            for part in typing.get_args(annotation)
            if typing.get_origin(part) is typing.Literal
            for v in typing.get_args(part)
        ]
        return [v for v in names if v != value] + [64]
    if isinstance(value, int) and not isinstance(value, bool):
        return [v for v in (value * 4, max(1, value // 4)) if v != value]
    if isinstance(value, float):
        return [value * 2, value / 2] if value else [1e-3]
    raise AssertionError(f"no variation rule for {value!r}")


@cache
def _results(overrides: tuple[tuple[str, Any], ...]) -> tuple[Any, ...]:
    scenario = api.load(LLAMA_1S, dict(overrides))
    capacity = Compiler(scenario).batch_capacity()
    batch = min(capacity, 8)
    decode = api.step(scenario, batch=batch).step_s
    prefill = api.step(scenario, phase="prefill", tokens=512).step_s
    served = {"serving.requests": 6, "serving.arrival": {"process": "all_at_once"}}
    # outputs of different lengths: a request admitted as another completes prefills while
    # the others decode
    served |= {
        "serving.prompt_tokens": 128,
        "serving.output_tokens": {"dist": "uniform", "low": 2, "high": 16},
        "serving.seed": 5,
    }
    makespan = api.run(api.load(LLAMA_1S, {**dict(overrides), **served})).summary().makespan_s
    return capacity, decode, prefill, makespan


def _get(data: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        data = data[part]
    return data


# Each parameter is varied on every probe, SN40L's too, on purpose: a GPU's own (the decode
# attention split) changes nothing there, and says so (config.device_reads).
@pytest.mark.filterwarnings("ignore::rdu_sim.config.overrides.UnreadFieldWarning")
@pytest.mark.parametrize("path", sorted(PARAMETERS))
def test_every_stack_parameter_changes_a_result(path: str) -> None:
    for overrides in PROBES.values():
        base = tuple(sorted(overrides.items()))
        stack = api.load(LLAMA_1S, overrides).stack.model_dump(mode="json")
        for variant in _variants(_get(stack, path), PARAMETERS[path]):
            varied = tuple(sorted({**overrides, f"stack.{path}": variant}.items()))
            try:
                if _results(varied) != _results(base):
                    return
            except ConfigError:  # a value this probe's stack refuses (its test is its own)
                continue
    raise AssertionError(
        f"stack {path} changes no result on any probe ({', '.join(PROBES)}): give it a "
        "mechanism that reads it, or remove it"
    )


def test_serial_host_time_adds_and_overlapped_time_adds_what_outlasts_the_device() -> None:
    host = HostWorkConfig(
        serial_per_step=1e-4,
        serial_per_slot=1e-5,
        serial_per_prompt=1e-3,
        overlapped_per_step=2e-4,
        overlapped_per_slot=1e-4,
        threads=3,
    )
    # 7 slots over 3 threads: the busiest thread has 3
    long = host.time(7, device_s=1e-2)
    assert long.serial_s == pytest.approx(1e-4 + 7e-5)
    assert long.overlapped_s == pytest.approx(2e-4 + 3e-4) and long.exposed_s == 0.0
    short = host.time(7, device_s=1e-4, transfer_s=5e-6, prompts=2)
    assert short.serial_s == pytest.approx(1e-4 + 7e-5 + 2e-3 + 5e-6)
    assert short.exposed_s == pytest.approx(5e-4 - 1e-4)
    assert short.added_s == pytest.approx(short.serial_s + short.exposed_s)


def test_a_step_is_the_device_plus_the_hosts_rule() -> None:
    """The engine's step: the device's time, plus the host's serial time, plus the
    overlapped time by which it outlasts the device; the bound names the host when its own
    time exceeds every device resource's."""
    from rdu_sim.report.bound import step_bound

    bare = api.step(LLAMA_1S, {**SMALL, "stack": "none"}, batch=4).detail
    busy = api.step(LLAMA_1S, {**SMALL, "stack": "none", **BUSY_HOST}, batch=4).detail
    device = bare.step_s  # type: ignore[attr-defined]
    assert busy.device_s == pytest.approx(device, rel=1e-12)  # type: ignore[attr-defined]
    overlapped = 1e-3 + 2 * 10e-3  # 4 slots over 2 threads
    assert busy.host_overlapped_s == pytest.approx(overlapped)  # type: ignore[attr-defined]
    assert busy.step_s == pytest.approx(max(device, overlapped), rel=1e-12)  # type: ignore[attr-defined]
    scenario = api.load(LLAMA_1S, {**SMALL, "stack": "none", **BUSY_HOST})
    assert step_bound(busy, scenario.hardware).bound == "host"  # type: ignore[arg-type]


def test_sampling_on_the_host_sends_the_logits_over_the_host_link() -> None:
    """Device sampling is an operator of the step reading the logits; host sampling moves
    them over the host link, serial with the device: batch x vocabulary x bytes each."""
    on_device = api.step(LLAMA_1S, {**SMALL, "stack": "none"}, batch=4)
    on_host = api.step(LLAMA_1S, {**SMALL, "stack": "none", "stack.sampling": "host"}, batch=4)
    scenario = api.load(LLAMA_1S, {**SMALL, "stack": "none"})
    link = scenario.hardware.system.host_link
    logits = 4 * scenario.model.vocab_size * scenario.activation_dtype_bytes
    names = [k.name for k in on_device.detail.kernels]  # type: ignore[attr-defined]
    assert "lm_head" in names
    assert on_host.detail.host_serial_s == pytest.approx(  # type: ignore[attr-defined]
        link.latency + logits / link.bandwidth, rel=1e-12
    )
    assert on_device.detail.host_serial_s == 0.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("shape", "pages"),
    [
        (StepShape("decode", 64, 1, 3071), 64 * 48),  # 3,072 tokens a slot: 48 pages of 64
        (StepShape("decode", 64, 1, 3072), 64 * 49),  # one token over: a page more
        (StepShape("prefill", 2, 1000, 0, decode_batch=3, decode_cache_len=63), 2 * 16 + 3),
    ],
)
def test_a_steps_pages_are_its_sequences_caches_in_pages(shape: StepShape, pages: int) -> None:
    assert kv_pages(shape, 64) == pages
    assert kv_pages(shape, None) == 0  # a static cache has no page table


def test_page_tables_are_sent_only_to_other_devices() -> None:
    """vLLM 2024's driver sends every sequence's page table to the other workers before a
    step on several GPUs: serial host time per page; on one GPU nothing is sent."""
    sets = {**SMALL, "hardware": "dgx-h100", "stack": "vllm-2024", "serving.max_context": 4096}
    per_page = 1e-6

    def serial(tp: int, per_page_s: float) -> tuple[float, int]:
        overrides = {**sets, "parallelism.tp": tp, "stack.host.serial_per_page_sent": per_page_s}
        step = api.step(LLAMA_1S, overrides, batch=4, context=3000).detail
        return step.host_serial_s, step.context  # type: ignore[attr-defined]

    (sent, context), (unsent, _) = serial(4, per_page), serial(4, 0.0)
    pages = 4 * -(-(context + 1) // 16)  # vLLM's 16-token blocks, the step's context bucket
    assert sent - unsent == pytest.approx(pages * per_page, rel=1e-9)
    assert serial(1, per_page) == serial(1, 0.0)


@pytest.mark.parametrize("value", [0, 1.5, "half", [512], True])
def test_a_bad_attention_split_names_what_it_may_be(value: Any) -> None:
    from rdu_sim.config.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        api.load(LLAMA_1S, {"hardware": "dgx-h100", "stack.decode_attention_split": value})
    message = str(caught.value)
    assert "decode_attention_split" in message and "stacks/tensorrt-llm.yaml" in message
    assert "must be 'whole', 'fill' or the tokens" in message and repr(value) in message
