"""Mixed steps (a prefill step carrying the decode rows: in-flight batching) and dynamic
decode batches (a paged runtime decodes its live sequences only): the shapes, the graphs they
build, their times, and the serving accounting, exactly where the arithmetic is known."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rdu_sim import api
from rdu_sim.config.stack import StackConfig
from rdu_sim.config.stack_file import stack_data, stack_path, validate_stack
from rdu_sim.config.workload import KVConfig
from rdu_sim.graph import Precision, model_groups, operators, totals
from rdu_sim.kv import make_policy
from rdu_sim.models import get_model
from rdu_sim.serving.backend import EngineBackend
from rdu_sim.serving.buckets import decode_batch, decode_rows, octave_rung, program_rows
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.requests import RequestSet
from rdu_sim.serving.server import ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.step_cache import StepCache, StepCost
from rdu_sim.shapes import DecodeRows, StepShape

PREFILL = StepShape("prefill", 2, 384, 0)
DECODE = StepShape("decode", 6, 1, 1536)
MIXED = PREFILL.with_decode(DECODE)


# --- the shape ----------------------------------------------------------------------------
def test_a_mixed_shape_holds_both_parts() -> None:
    assert (MIXED.rows, MIXED.sequences, MIXED.mixed) == (2 * 384 + 6, 8, True)
    assert MIXED.prefill_part() == PREFILL
    assert MIXED.decode_part() == DECODE
    assert PREFILL.prefill_part() is PREFILL and not PREFILL.mixed
    assert pickle.loads(pickle.dumps(MIXED)) == MIXED
    assert hash(pickle.loads(pickle.dumps(MIXED))) == hash(MIXED)
    assert MIXED != PREFILL and hash(MIXED) != hash(PREFILL)
    assert "decode_batch=6, decode_cache_len=1536" in repr(MIXED)
    assert "decode_batch" not in repr(PREFILL)  # the shapes' names, as before, elsewhere


def test_decode_rows_ride_only_on_a_prefill() -> None:
    with pytest.raises(ValueError, match="ride only on a prefill"):
        StepShape("decode", 4, 1, 100, decode_batch=2, decode_cache_len=10)
    with pytest.raises(ValueError, match="ride only on a prefill"):
        StepShape("prefill", 1, 10, 0, decode_cache_len=10)
    with pytest.raises(ValueError, match="carries no decode rows"):
        PREFILL.decode_part()
    with pytest.raises(ValueError, match="not a decode step"):
        PREFILL.with_decode(PREFILL)
    assert MIXED.part(decode_batch=0) == PREFILL
    assert MIXED.part(decode_batch=3).decode_part() == StepShape("decode", 3, 1, 1536)
    # a micro-batch's joint tokens: its share of the rows, its decode rows' share included
    joint = StepShape("prefill", 2, 96, 0, joint_tokens=2 * (2 * 96 + 64), decode_batch=64)
    halves = [joint.part(batch=1, decode_batch=32)] * 2
    assert [h.joint_tokens for h in halves] == [2 * (96 + 32)] * 2


# --- the graph: a mixed step is its two parts' work, its weights read once ------------------
@pytest.mark.parametrize(
    "model", ["llama-3.1-8b", "deepseek-r1", "gpt-oss-120b", "qwen3-235b-a22b"]
)
def test_a_mixed_graph_does_both_parts_work_and_reads_weights_once(model: str) -> None:
    arch = get_model(model)
    precision = Precision()

    def work(shape: StepShape) -> tuple[float, ...]:
        t = totals(model_groups(arch, shape, precision, sample=True))
        return (t.flops, t.vector_flops, t.kv_read_bytes, t.kv_write_bytes)

    mixed, prefill, decode = work(MIXED), work(PREFILL), work(DECODE)
    assert mixed == pytest.approx(tuple(p + d for p, d in zip(prefill, decode, strict=True)))

    def weights(shape: StepShape, part: str = "") -> tuple[int, float]:
        """Resident parameters, and dense weight bytes streamed by operators whose names hold
        ``part`` (routed experts and the embedding gather read by the rows)."""
        groups = model_groups(arch, shape, precision)
        streamed = sum(
            g.count * n.weight_read_bytes
            for g in groups
            for n in operators(g.graph)
            if n.kind != "gather" and "experts" not in n.name and part in n.name
        )
        return totals(groups).weight_params, streamed

    # the same resident weights; every dense weight streamed once, except what the decode
    # part's own operators read again: exactly what those operators read in a decode step
    # (MLA's projections and W_UK/W_UV, gpt-oss's sink logits; nothing for GQA's attention)
    params, streamed = weights(MIXED)
    _, again = weights(MIXED, "decode.")
    assert (params, streamed - again) == weights(PREFILL)
    assert params == weights(DECODE)[0]
    twins = {
        n.name.replace("decode.", "")
        for g in model_groups(arch, MIXED, precision)
        for n in operators(g.graph)
        if "decode." in n.name
    }
    own = sum(
        g.count * n.weight_read_bytes
        for g in model_groups(arch, DECODE, precision)
        for n in operators(g.graph)
        if n.name in twins
    )
    assert again == own
    assert (again > 0) == (model in ("deepseek-r1", "gpt-oss-120b"))


# --- the step: never faster than either part, faster than the two apart --------------------
@pytest.mark.parametrize(
    ("workload", "overrides"),
    [
        ("llama3.1-8b-1socket", ["hardware=dgx-h100", "serving.batch_slots=8"]),
        ("llama3.1-8b-8socket", ["serving.batch_slots=8"]),
    ],
)
def test_a_mixed_step_costs_between_its_longer_part_and_both(
    workload: str, overrides: list[str]
) -> None:
    scenario = api.load(workload, overrides)
    backend = EngineBackend()
    prefill, decode, mixed = (
        backend.step_cost(scenario, shape).step_s for shape in (PREFILL, DECODE, MIXED)
    )
    assert max(prefill, decode) < mixed < prefill + decode


# --- the dynamic batch ladder ---------------------------------------------------------------
def test_decode_batch_ladder() -> None:
    # 1, 2, 4, multiples of 8 to 128 (CUDA graphs' capture sizes), then 8 per octave
    assert [decode_batch(n) for n in range(1, 10)] == [1, 2, 4, 4, 8, 8, 8, 8, 16]
    assert [decode_batch(n) for n in (17, 66, 128, 129, 145, 257, 489, 512, 513)] == [
        24,
        72,
        128,
        144,
        160,
        288,
        512,
        512,
        576,
    ]
    for n in range(1, 5000):
        padded = decode_batch(n)
        assert n <= padded
        assert padded <= (max(n * 1.125, n + 7) if n > 4 else 4)
        assert decode_batch(padded) == padded  # a rung is its own
    assert [octave_rung(n) for n in (1, 8, 9, 17, 100, 1000)] == [1, 8, 9, 18, 104, 1024]
    with pytest.raises(ValueError, match="at least one"):
        decode_batch(0)


# --- serving, on a step time with known parts -----------------------------------------------
MS = 1e-3


def part_times(shape: StepShape) -> StepCost:
    """10 ms a prefill, 5 ms a decode step, 12 ms a prefill that carries decode rows."""
    if shape.phase == "decode":
        return StepCost(5 * MS)
    return StepCost(12 * MS if shape.mixed else 10 * MS)


def served(
    prompts: list[int],
    outputs: list[int],
    arrivals_ms: list[float],
    config: ServerConfig,
    page_tokens: int | None = None,
) -> tuple[ServingRecords, list[StepShape]]:
    """Serve these requests on ``part_times`` (full attention, ``config``'s context): the
    records and every shape the server timed (each once: the step cache keeps it)."""
    seen: list[StepShape] = []

    def timed(shape: StepShape) -> StepCost:
        seen.append(shape)
        return part_times(shape)

    requests = RequestSet(
        prompt_tokens=np.array(prompts, dtype=np.int64),
        output_tokens=np.array(outputs, dtype=np.int64),
        arrival_s=np.array(arrivals_ms) * MS,
        concurrency=None,
    )
    kv = KVConfig.model_validate({"policy": "full"})
    policy = make_policy(kv, config.max_context, page_tokens)
    return serve(requests, policy, StepCache(timed), config), seen


def two_requests(mixed: bool, dynamic: bool = False) -> tuple[ServingRecords, list[StepShape]]:
    """A: 4 output tokens from t=0; B: 2 output tokens, arriving at 12 ms, during A's first
    decode step. Two slots; returns the records and every shape the server timed."""
    config = ServerConfig(
        2, 4096, mixed_batching=mixed, decode_rows="ladder" if dynamic else "slots"
    )
    return served([128, 128], [4, 2], [0.0, 12.0], config)


def ms(values: np.ndarray) -> list[float]:
    return [round(float(v) / 1e9, 6) for v in values]  # ps -> ms


def test_without_mixing_a_prefill_stalls_the_decoding_request() -> None:
    records, _ = two_requests(mixed=False)
    # A: prefill 0-10, decode 10-15; B's prefill 15-25 stalls A; decode 25-30 (B done),
    # decode 30-35 (A done)
    assert ms(records.first_token_ps) == [10.0, 25.0]
    assert ms(records.finish_ps) == [35.0, 30.0]
    assert records.counts.tokens_generated == 6


def test_a_mixed_step_gives_the_decoding_request_its_token() -> None:
    records, seen = two_requests(mixed=True)
    # A: prefill 0-10, decode 10-15; B's prefill carries A's decode row 15-27; one decode
    # step 27-32 ends both
    assert ms(records.first_token_ps) == [10.0, 27.0]
    assert ms(records.finish_ps) == [32.0, 32.0]
    assert records.counts.tokens_generated == 6
    assert records.counts.prefill_steps == 2 and records.counts.decode_steps == 2
    (carried,) = [shape for shape in seen if shape.mixed]
    # the static decode graph's rows (both slots) at the bucket of A's cache
    assert carried.decode_part() == StepShape("decode", 2, 1, carried.decode_cache_len)
    assert carried.decode_cache_len >= 128 + 1


def test_a_dynamic_batch_decodes_the_live_sequences_only() -> None:
    _, static = two_requests(mixed=False)
    _, dynamic = two_requests(mixed=False, dynamic=True)
    assert {s.batch for s in static if s.phase == "decode"} == {2}
    # A alone (10-15, 30-35) runs one row; A and B together two
    assert {s.batch for s in dynamic if s.phase == "decode"} == {1, 2}
    _, carried = two_requests(mixed=True, dynamic=True)
    assert [s.decode_batch for s in carried if s.mixed] == [1]


def test_a_program_picked_by_the_queue_holds_the_decoding_sequences() -> None:
    """Three requests arriving 12 ms apart on 8 slots, each decoding 6 tokens: every slot's
    program runs 8 rows a step; a static runtime picking its program by the queue's length
    runs the smallest power of two holding the decoding sequences (1, 2, then 4 for three),
    one without compiled sizes exactly them, and a paged one the CUDA-graph ladder (4)."""

    def decode_batches(rows: DecodeRows) -> set[int]:
        config = ServerConfig(8, 4096, decode_rows=rows)
        records, seen = served([128] * 3, [6] * 3, [0.0, 12.0, 24.0], config)
        assert records.counts.tokens_generated == 18
        return {s.batch for s in seen if s.phase == "decode"}

    assert decode_batches("slots") == {8}
    assert decode_batches("programs") == {1, 2, 4}
    assert decode_batches("live") == {1, 2, 3}
    assert decode_batches("ladder") == {1, 2, 4}


def test_program_rows_count_the_row_values_a_run_can_take() -> None:
    for slots in (*range(1, 40), 100, 129, 1000, 2048, 2049):
        for rule in ("slots", "programs", "live", "ladder"):
            reached = {decode_rows(rule, d, slots) for d in range(1, slots + 1)}
            assert program_rows(rule, slots) == len(reached), (rule, slots)


def test_decode_rows_counts() -> None:
    assert [decode_rows("slots", d, 16) for d in (0, 1, 5, 16)] == [16] * 4
    assert [decode_rows("programs", d, 16) for d in (0, 1, 3, 5, 9, 16)] == [1, 1, 4, 8, 16, 16]
    assert [decode_rows("programs", d, 12) for d in (5, 9, 12)] == [8, 12, 12]  # never past 12
    assert [decode_rows("live", d, 16) for d in (0, 1, 7, 16)] == [1, 1, 7, 16]
    assert [decode_rows("ladder", d, 200) for d in (3, 9, 130)] == [4, 16, 144]
    assert decode_rows("ladder", 130, 140) == 140


def test_a_paged_step_reads_the_mean_cache_a_static_one_the_longest() -> None:
    """A short and a long prompt decoding together: a static graph is compiled for the
    longest cache, a paged runtime reads each sequence's pages (their mean, in the step)."""
    policy = make_policy(KVConfig.model_validate({"policy": "full"}), 8192, 64)

    def both(dynamic: bool) -> StepShape:
        config = ServerConfig(2, 8192, decode_rows="ladder" if dynamic else "slots")
        _, seen = served([100, 3000], [4, 2], [0.0, 12.0], config, page_tokens=64)
        # (each shape is timed once: the last new decode shape is the one of both)
        return [s for s in seen if s.phase == "decode"][-1]

    # both decode at 25-30 ms: A its second token's step, B its first
    short, long = policy.cache_at(100, 2), policy.cache_at(3000, 1)
    assert both(dynamic=False).cache_len == policy.decode_bucket(long)
    assert both(dynamic=True).cache_len == policy.decode_bucket(-(-(short + long) // 2))
    assert both(dynamic=True).batch == both(dynamic=False).batch == 2


def test_speculative_rounds_keep_their_own_steps() -> None:
    from rdu_sim.serving.decode_rounds import DecodeRounds
    from rdu_sim.serving.speculative import SpeculativeRounds

    assert DecodeRounds().ride_prefill() and not DecodeRounds().per_sequence()
    assert DecodeRounds("ladder").per_sequence() and not DecodeRounds("programs").per_sequence()
    assert SpeculativeRounds.ride_prefill is not DecodeRounds.ride_prefill
    # a round runs the rows plain decoding's step would, reading pages as it does: the one
    # rule, not a copy (tests/test_speculation_serving.py times them against a reference)
    assert SpeculativeRounds.per_sequence is DecodeRounds.per_sequence
    assert SpeculativeRounds._batch is DecodeRounds._batch


# --- the stacks that mix -------------------------------------------------------------------
def test_the_shipped_stacks_say_how_they_batch() -> None:

    def stack(name: str) -> StackConfig:
        data, lines, file = stack_data(stack_path(name, "."))
        return validate_stack(data, file, lines)

    mixing = {n: stack(n).mixed_batching for n in ("tensorrt-llm", "tensorrt-llm-2024")}
    assert mixing == {"tensorrt-llm": True, "tensorrt-llm-2024": True}
    for name in ("vllm-2024", "sglang", "sambastudio-2024", "sambastack-2025"):
        assert not stack(name).mixed_batching, name
    assert stack("tensorrt-llm").dynamic_batch and not stack("sambastack-2025").dynamic_batch
    rows = {
        n: stack(n).decode_rows for n in ("tensorrt-llm", "sambastudio-2024", "sambastack-2025")
    }
    assert rows == {
        "tensorrt-llm": "ladder",
        "sambastudio-2024": "programs",
        "sambastack-2025": "slots",
    }
    live = stack("sambastack-2025").model_copy(update={"decode_program": "live"})
    assert live.decode_rows == "programs"
    assert live.model_copy(update={"batch_programs": "any"}).decode_rows == "live"


def test_a_mixed_step_packs_prompts_within_the_budget_its_decode_rows_share() -> None:
    """Three waiting prompts of 128 tokens while two slots decode: a budget of 384 tokens
    packs all three into one prefill step alone, two beside the decode rows (TensorRT-LLM's
    max_num_tokens counts both)."""

    def packed(mixed: bool) -> list[tuple[int, int]]:
        config = ServerConfig(
            5, 4096, prefill_batch_tokens=384, mixed_batching=mixed, decode_rows="ladder"
        )
        _, seen = served([128] * 5, [50, 50, 2, 2, 2], [0.0, 0.0, 20.0, 20.0, 20.0], config)
        return [(s.batch, s.decode_batch) for s in seen if s.phase == "prefill"]

    assert packed(mixed=False) == [(2, 0), (3, 0)]
    # (every shape timed is a step run: a mixed step times no prefill alone it never runs)
    assert packed(mixed=True) == [(2, 0), (2, 2), (1, 4)]


def test_speculative_decoding_runs_its_prefill_steps_alone() -> None:
    """A stack that mixes, under speculative decoding: its rounds are not one decode step,
    so no prefill step carries decode rows (and every request is still served whole)."""
    overrides: dict[str, object] = {
        "stack.mixed_batching": True,
        "serving.batch_slots": 4,
        "serving.requests": 12,
        "serving.output_tokens": 64,
        "serving.arrival": {"process": "poisson", "rate": 40.0},
    }

    def carried(speculative: bool) -> list[int]:
        changes = overrides if speculative else {**overrides, "speculation": None}
        result = api.run("llama3.1-70b-16socket-specdec", changes)
        assert result.summary().requests_completed == 12
        return [s["decode_batch"] for s in result.step_shapes() if s["phase"] == "prefill"]

    assert any(carried(speculative=False))  # the same server, decoding plainly, mixes
    assert not any(carried(speculative=True))


def test_a_ragged_runtime_packs_prompts_of_one_static_bucket_at_the_widest() -> None:
    """Three prompts at once on a paged runtime: 520, 600 and 700 tokens share the static
    1,024-token bucket, so they pack into one step timed at the widest one's fine bucket
    (704 tokens each); 520 and 1,100 (static buckets 1,024 and 2,048) do not pack. A static
    runtime packs the first three at their common 1,024."""

    def prefills(prompts: list[int], rows: DecodeRows) -> list[tuple[int, int]]:
        config = ServerConfig(4, 4096, prefill_batch_tokens=4096, decode_rows=rows)
        records, seen = served(prompts, [2] * len(prompts), [0.0] * len(prompts), config)
        assert records.counts.tokens_generated == 2 * len(prompts)
        return [(s.batch, s.tokens) for s in seen if s.phase == "prefill"]

    assert prefills([520, 600, 700], "ladder") == [(3, 704)]
    assert prefills([520, 600, 700], "slots") == [(3, 1024)]
    assert prefills([520, 1100], "ladder") == [(1, 544), (1, 1120)]
    # the budget counts the widest: 4 x 1,024 fits 4,096, a fifth would not
    assert prefills([1000, 990, 980, 1024], "ladder") == [(4, 1024)]


def test_a_program_choice_beside_a_paged_cache_is_refused() -> None:
    from rdu_sim.config.errors import ConfigError

    with pytest.raises(ConfigError, match=r"decode_program: 'live' chooses among static programs"):
        api.load(
            "workloads/llama3.1-8b-1socket.yaml",
            {"stack": "sambastudio-2024", "stack.kv_page_tokens": 64},
        )
    paged = api.load(
        "workloads/llama3.1-8b-1socket.yaml",
        {"stack": "sambastudio-2024", "stack.kv_page_tokens": 64, "stack.decode_program": None},
    )
    assert paged.stack.decode_rows == "ladder"
