"""A paged KV pool in a cluster and in `rdu-sim check`: a request bigger than a pool's whole
pool is refused before simulating (run and check alike), and every replica's pool holds no
more than its pages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from rdu_sim.api_cluster import run_cluster
from rdu_sim.cli.main import cli
from rdu_sim.serving.step_cache import PS_PER_S

REPO = Path(__file__).resolve().parents[1]
L8 = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
GPU_SMALL_POOL = (
    "{hardware: dgx-h100, stack: tensorrt-llm, serving.batch_slots: auto, "
    "serving.max_context: 131072, stack.kv_memory_fraction: 0.05}"
)
BIG_REQUESTS = """\
traffic:
  rate: 5
  requests: 20
  prompt_tokens: {dist: uniform, low: 100, high: 120000}
  output_tokens: 100
  seed: 3
slo: {ttft: 3 s, tpot: 50 ms, attainment: 0.9}
"""


def _mixed_big(tmp_path: Path) -> Path:
    path = tmp_path / "mixed_big.yaml"
    path.write_text(
        f"name: mixed-big\npools:\n  serve:\n    workload: {L8}\n    replicas: 1\n"
        f"    set: {GPU_SMALL_POOL}\nrouter: {{policy: least_outstanding}}\n{BIG_REQUESTS}"
    )
    return path


@pytest.mark.parametrize("command", ["run", "check"])
def test_a_cluster_request_bigger_than_a_pool_is_refused(tmp_path: Path, command: str) -> None:
    """Before, the run deadlocked into "cluster lost or duplicated requests (scheduler bug)"
    and check said OK: now both refuse in the lone run's words, naming the pool."""
    path = _mixed_big(tmp_path)
    result = CliRunner().invoke(cli, [command, str(path)])
    assert result.exit_code == 2, result.output
    first = result.output.splitlines()[0]
    assert first.startswith(f"error: {L8}: serving.max_context: 12 of 20 requests reserve")
    assert "the pool has 415 (26,560 tokens" in first
    assert first.endswith(f"(pool 'serve' of {path})")
    assert "Traceback" not in result.output and "scheduler bug" not in result.output


def test_check_refuses_a_workload_whose_requests_outgrow_its_pool(tmp_path: Path) -> None:
    """`rdu-sim check` said OK to a workload its run refuses: it now makes the run's
    requests and asks the same ``check_pool``, the same one line, exit 2."""
    stack = (REPO / "stacks" / "tensorrt-llm.yaml").read_text()
    stack = stack.replace("name: tensorrt-llm\n", "name: trt-small\n")
    stack = stack.replace("kv_memory_fraction: 0.9\n", "kv_memory_fraction: 0.05\n")
    assert "kv_memory_fraction: 0.05" in stack
    (tmp_path / "trt-small.yaml").write_text(stack)
    workload = tmp_path / "big.yaml"
    workload.write_text(
        "name: big\nhardware: dgx-h100\nstack: trt-small.yaml\nmodel: llama-3.1-8b\n"
        "dtypes: {weights: bf16, kv: bf16, activations: bf16}\nparallelism: {tp: 1}\n"
        "kv: {policy: full}\nserving:\n  batch_slots: auto\n  max_context: 131072\n"
        "  prompt_tokens: {dist: uniform, low: 100, high: 120000}\n  output_tokens: 100\n"
        "  prefill_chunk_tokens: 8192\n  arrival: {process: poisson, rate: 1.0}\n"
        "  requests: 20\n  seed: 0\n"
    )
    runner = CliRunner()
    checked, ran = (
        runner.invoke(cli, ["check", str(workload)]),
        runner.invoke(cli, ["run", str(workload)]),
    )
    assert checked.exit_code == ran.exit_code == 2, checked.output
    words = f"error: {workload}:10: serving.max_context: 16 of 20 requests reserve more KV pages"
    assert checked.output.splitlines()[0] == ran.output.splitlines()[0]
    assert checked.output.startswith(words), checked.output


def _disaggregated(tmp_path: Path) -> Path:
    """One prefill and one decode replica of Llama 8B on TensorRT-LLM; the decode pool's
    KV share is small (kv_memory_fraction 0.1), so its pages bind before its slots do."""
    gpu = "hardware: dgx-h100, stack: tensorrt-llm, serving.batch_slots: auto"
    path = tmp_path / "disagg.yaml"
    path.write_text(
        f"name: gpu-disagg\npools:\n"
        f"  prefill:\n    workload: {L8}\n    replicas: 1\n    role: prefill\n"
        f"    set: {{{gpu}}}\n"
        f"  decode:\n    workload: {L8}\n    replicas: 1\n    role: decode\n"
        f"    set: {{{gpu}, stack.kv_memory_fraction: 0.1}}\n"
        "router: {policy: least_outstanding}\n"
        "traffic:\n  rate: 200\n  requests: 600\n"
        "  prompt_tokens: {dist: uniform, low: 16, high: 6000}\n"
        "  output_tokens: {dist: uniform, low: 16, high: 2000}\n  seed: 3\n"
        "slo: {ttft: 3 s, tpot: 50 ms, attainment: 0.9}\n"
        "kv_transfer: {bandwidth: 50 GB/s, latency: 10 us}\n"
    )
    return path


def test_a_decode_replica_holds_no_more_kv_pages_than_its_pool(tmp_path: Path) -> None:
    """Before, a decode replica's hand-off reserved slots only: it held requests whose
    reservations were several times its pool (the reviewer's probe: 52,011 pages in a pool
    of 7,436). Now the hand-off takes the pages as an admission does: counted independently
    from the records (each decoded request's pages from its cache's arrival to its finish),
    no instant holds more than the pool, and the JSON says each pool's peak."""
    result = run_cluster(_disaggregated(tmp_path))
    pools = {p.pool.name: p.placement.kv_pool for p in result.pools}
    decode = pools["decode"]
    assert decode is not None and decode.pages < 1000
    columns, records = result.requests(), result.run.records
    moved = columns["decode_replica"] >= 0
    assert int(moved.sum()) == 600
    pages = [
        decode.request_pages(int(p), int(o))
        for p, o in zip(
            columns["prompt_tokens"][moved], columns["output_tokens"][moved], strict=True
        )
    ]
    finish = np.round(columns["finish_s"][moved] * PS_PER_S).astype(np.int64)
    changes = sorted(
        [(int(t), n) for t, n in zip(records.kv_start_ps[moved], pages, strict=True)]
        + [(int(t), -n) for t, n in zip(finish, pages, strict=True)]
    )
    held = np.cumsum([n for _, n in changes])
    assert int(held.max()) <= decode.pages
    assert sum(pages) > 3 * decode.pages  # the pool binds: without it, it would overfill
    data = result.to_dict()["pools"]
    for name, pool in pools.items():
        assert pool is not None
        shown = data[name]["kv_pool"]
        assert shown["pages"] == pool.pages and shown["page_tokens"] == 64
        assert 0 < shown["peak_pages"] <= pool.pages, name
    assert int(held.max()) == data["decode"]["kv_pool"]["peak_pages"]


def test_an_arrival_behind_a_head_waiting_for_pages_does_not_cut_a_decode_run(
    tmp_path: Path,
) -> None:
    """While the queue's head waits for pages only a completion frees, an arrival (here a
    hand-off to the decode replica) queues behind it: cutting the decode run for it only
    re-decided the same run. The decode replica's runs are no longer cut so (1,848 events
    for its 50,327 steps before, 1,282 now), and what it serves is unchanged."""
    replicas = run_cluster(_disaggregated(tmp_path)).to_dict()["per_replica"]
    decode = next(r for r in replicas if r["role"] == "decode")
    assert decode["steps"] == {"prefill": 0, "decode": 50327, "decode_events": 1282}


def test_batch_auto_follows_the_rule_of_the_pool_a_role_runs(tmp_path: Path) -> None:
    """On an on-demand stack (vllm-2024) a mixed pool's ``auto`` batch is sized by prompt
    pages (pages given on demand), a disaggregated decode pool's by what each request
    reserves (its pages handed over whole, `kv.paged.gives_on_demand`), a prefill pool's by
    its prompt and first token. Before, placement knew no role and sized them all as on
    demand."""
    from dataclasses import replace

    from rdu_sim.api import EngineBackend, resolve_batch_slots
    from rdu_sim.api_cluster import resolve_pools
    from rdu_sim.cluster import load_cluster
    from rdu_sim.compiler.placement import smallest_request_pages
    from rdu_sim.scenario import load_scenario

    given = {
        "hardware": "dgx-h100",
        "stack": "vllm-2024",
        "serving.batch_slots": "auto",
        "stack.memory_utilization": 0.3,  # memory, not max_batch_slots, bounds the batch
    }
    stack = "{" + ", ".join(f"{k}: {v}" for k, v in given.items()) + "}"
    pools = {}
    for roles in (("mixed",), ("prefill", "decode")):
        path = tmp_path / f"{roles[0]}.yaml"
        path.write_text(
            "name: roles\npools:\n"
            + "".join(
                f"  {role}:\n    workload: {L8}\n    replicas: 1\n    role: {role}\n"
                f"    set: {stack}\n"
                for role in roles
            )
            + f"router: {{policy: least_outstanding}}\n{BIG_REQUESTS}"
        )
        pools.update({p.pool.name: p for p in resolve_pools(load_cluster(path))})
    lone = load_scenario(L8, given)
    assert lone.stack.kv_allocation == "on_demand"
    # the reserving rule: what the same stack gives with pages reserved
    reserving = load_scenario(L8, {**given, "stack.kv_allocation": "reserve"})
    on_demand = resolve_batch_slots(lone, EngineBackend())[1]
    reserves = resolve_batch_slots(reserving, EngineBackend())[1]
    assert smallest_request_pages(reserving) > smallest_request_pages(lone)
    assert reserves < on_demand
    assert pools["mixed"].runtime.config.batch_slots == on_demand
    assert pools["decode"].runtime.config.batch_slots == reserves
    # a prefill pool reserves its prompt and first token (`kv.paged.held_output`): more fit
    prefill = resolve_batch_slots(replace(lone, role="prefill"), EngineBackend())[1]
    assert pools["prefill"].runtime.config.batch_slots == prefill == 137
    assert reserves < prefill
    # each role compiles apart here, so each pool's steps are its own compiler's
    assert pools["prefill"].runtime.step_times is not pools["decode"].runtime.step_times


def test_pools_of_one_workload_share_step_times_where_their_compile_is_one() -> None:
    """Static slots: a disaggregated cluster's prefill and decode pools (one workload) share
    one memo of step times, as their compile is one (`compiler.view.compile_role`)."""
    from rdu_sim.api_cluster import resolve_pools
    from rdu_sim.cluster import load_cluster

    pools = resolve_pools(load_cluster(REPO / "workloads/clusters/llama3.1-8b-disaggregated.yaml"))
    assert [p.pool.name for p in pools] == ["prefill", "decode"]
    assert pools[0].runtime.step_times is pools[1].runtime.step_times


def test_a_pools_role_splits_its_compile_only_where_it_sizes_the_pool() -> None:
    """The role changes a compile only where it sizes a paged pool's requests: on static
    slots never; on a reserving stack a prefill pool's (it holds the prompt and the first
    token), its decode and mixed pools compiling one program set; on vLLM's on-demand stack
    every role's (only a mixed server's requests grow page by page)."""
    from dataclasses import replace

    from rdu_sim import api
    from rdu_sim.compiler.view import compile_view

    groups = {
        ("sn40l-8", "sambastack-2025"): [{"mixed", "prefill", "decode"}],
        ("dgx-h100", "tensorrt-llm-2024"): [{"mixed", "decode"}, {"prefill"}],
        ("dgx-h100", "vllm-2024"): [{"mixed"}, {"prefill"}, {"decode"}],
    }
    for (hardware, stack), expected in groups.items():
        scenario = api.load("llama3.1-8b-1socket", {"hardware": hardware, "stack": stack})
        by_digest: dict[str, set[str]] = {}
        for role in ("mixed", "prefill", "decode"):
            digest = compile_view(replace(scenario, role=role)).digest
            by_digest.setdefault(digest, set()).add(role)
        assert sorted(map(sorted, by_digest.values())) == sorted(map(sorted, expected)), stack


def test_a_prefill_pool_sizes_its_batch_by_the_prompt_and_first_token() -> None:
    """A prefill server holds a request's prompt and the token its prefill emits until the
    hand-off (`kv.paged.held_output`), so its smallest request is 512 + 1 tokens: 9 pages of
    64 on TensorRT-LLM 2024 where a mixed or decode server's 512 + 128 is 10; the words say
    what it holds."""
    from dataclasses import replace

    from rdu_sim import api
    from rdu_sim.compiler.placement import capacity_words, smallest_request_pages

    scenario = api.load(
        "llama3.1-8b-1socket",
        {
            "hardware": "dgx-h100",
            "stack": "tensorrt-llm-2024",
            "serving.output_tokens": {"dist": "uniform", "low": 128, "high": 1024},
        },
    )
    pages = {
        role: smallest_request_pages(replace(scenario, role=role))
        for role in ("mixed", "prefill", "decode")
    }
    assert pages == {"mixed": 10, "prefill": 9, "decode": 10}
    words = capacity_words(replace(scenario, role="prefill"), 100, 100)
    assert "each request reserves its prompt and first output token at admission" in words
