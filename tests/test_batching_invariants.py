"""Every registered batching policy and every registered router, whatever its name, through
small runs that must conserve what they serve: each request served once, every output token
generated, no more requests in a server's slots (or reserving its paged KV pool's pages) than
it has, and arrival <= admission <= first token <= finish for each request. A policy or
router added to a registry (a shipped one, or a plugin's loaded through ``RDU_SIM_PLUGINS``
before the tests are collected) is checked here without a line changed; the names of the
shipped ones are pinned only where the docs must list them (tests/test_cluster.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_cluster import LLAMA, assert_served_once, fake, write_cluster, write_trace
from test_serving_alone import policy_of, requests_of, round_step

from rdu_sim.api_cluster import run_cluster
from rdu_sim.cluster.routers import base as routers_base
from rdu_sim.cluster.routers import router_names
from rdu_sim.kv import policies as kv_policies
from rdu_sim.kv.paged import PagedKV
from rdu_sim.plugins import code_of
from rdu_sim.serving.batching import base as batching_base
from rdu_sim.serving.batching import batching_names
from rdu_sim.serving.batching.prefill_first import PrefillFirst
from rdu_sim.serving.records import ServingRecords
from rdu_sim.serving.server import ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.step_cache import StepCache
from rdu_sim.serving.traces.synthetic import SyntheticTrace, synthetic_table

SLOTS = 4
POOL = PagedKV(page_tokens=16, pages=160, slot_tokens=4096)
"""A paged pool that holds about two of the runs' average requests at once (a queue that
waits for pages as well as for slots)."""

SETUPS: dict[str, dict[str, Any]] = {
    "slots": {},
    "chunked": {"prefill_chunk_tokens": 256, "mixed_batching": True},
    "packed": {"prefill_batch_tokens": 4096},
    "paged": {"kv_pool": POOL, "decode_rows": "live"},
    "paged_packed": {"kv_pool": POOL, "prefill_batch_tokens": 4096},
}
"""Server setups that take different paths through the scheduler (an admission alone,
chunks, packed prefills, a pool that refuses admissions)."""


def held_at_most(records: ServingRecords, weight: np.ndarray[Any, Any]) -> int:
    """The most ``weight`` the requests between admission and completion held at once (a
    completion at an instant frees before an admission at that instant)."""
    events = sorted(
        [(int(t), 1, int(w)) for t, w in zip(records.admit_ps, weight, strict=True)]
        + [(int(t), 0, -int(w)) for t, w in zip(records.finish_ps, weight, strict=True)]
    )
    held = most = 0
    for _, _, change in events:
        held += change
        most = max(most, held)
    return most


def assert_conserved(records: ServingRecords, slots: int, pool: PagedKV | None) -> None:
    """The run's conservation invariants (module docstring)."""
    assert (records.completions == 1).all()
    outputs = records.output_tokens
    assert records.counts.tokens_generated == int(outputs.sum())
    assert (records.arrival_ps <= records.admit_ps).all()
    assert (records.admit_ps <= records.first_token_ps).all()
    assert (records.first_token_ps <= records.finish_ps).all()
    assert (records.admit_ps < records.first_token_ps).all()  # a prefill step takes time
    assert held_at_most(records, np.ones(len(records), dtype=np.int64)) <= slots
    if pool is not None:
        pages = np.array(
            [
                pool.request_pages(int(p), int(o))
                for p, o in zip(records.prompt_tokens, outputs, strict=True)
            ]
        )
        assert held_at_most(records, pages) <= pool.pages
        assert 0 < records.counts.kv_pages_peak <= pool.pages


@pytest.mark.parametrize("setup", sorted(SETUPS))
@pytest.mark.parametrize("name", batching_names())
def test_every_batching_policy_conserves_what_it_serves(name: str, setup: str) -> None:
    config = SETUPS[setup]
    requests = requests_of(3, 60, 4000)  # bursts: a queue forms and drains
    server = ServerConfig(SLOTS, 4096, name, **config)
    records = serve(requests, policy_of("full"), StepCache(round_step), server)
    assert_conserved(records, SLOTS, config.get("kv_pool"))


def test_the_setups_make_admissions_wait_for_pages() -> None:
    """The paged setup binds: some admission waits while a slot is free (the same requests
    on static slots are admitted earlier), so the pool's check is exercised."""
    requests = requests_of(3, 60, 4000)
    admitted = {
        setup: serve(
            requests, policy_of("full"), StepCache(round_step), ServerConfig(SLOTS, 4096, **c)
        ).admit_ps
        for setup, c in (("slots", {}), ("paged", {"kv_pool": POOL}))
    }
    assert (admitted["paged"] >= admitted["slots"]).all()
    assert (admitted["paged"] > admitted["slots"]).any()


PAGED_GPU = {  # a TensorRT-LLM pool small enough that its pages bind beside the prefix cache
    "hardware": "dgx-h100",
    "stack": "tensorrt-llm",
    "stack.kv_memory_fraction": 0.03,
}


@pytest.mark.parametrize("device", ["sn40l", "paged-gpu"])
@pytest.mark.parametrize("disaggregated", [False, True], ids=["mixed", "disaggregated"])
@pytest.mark.parametrize("router", router_names())
def test_every_router_conserves_what_it_serves(
    tmp_path: Path, router: str, disaggregated: bool, device: str
) -> None:
    """A Mooncake trace with shared prefixes and a prefix cache (what every shipped router
    may read) over three replicas of 8 slots, or a prefill and a decode pool, on SN40L
    static slots or a paged GPU pool the cache shares: every request served once, every
    output token generated, no replica holding more than its slots or its pages, and the
    times of each request in order."""
    spec = SyntheticTrace(requests=90, rate=8.0, prompt_median=2000, prompt_high=6000, seed=4)
    trace = write_trace(tmp_path, "m.jsonl", synthetic_table(spec), "mooncake")
    fields: dict[str, Any] = {
        "traffic": {"trace": trace},
        "router": {"policy": router},
        "prefix_cache": {"block_tokens": 512},
    }
    pool_set = {"serving.batch_slots": 8, **(PAGED_GPU if device == "paged-gpu" else {})}
    serve_pool = {"workload": str(LLAMA), "set": pool_set}
    if disaggregated:
        fields["pools"] = {
            "prefill": {**serve_pool, "replicas": 2, "role": "prefill"},
            "decode": {**serve_pool, "replicas": 2, "role": "decode"},
        }
    else:
        fields["pools"] = {"serve": {**serve_pool, "replicas": 3}}
    path = write_cluster(tmp_path, **fields)  # (the fake backend sizes SN40L slots only)
    result = run_cluster(path) if device == "paged-gpu" else fake(path)
    assert_served_once(result)
    records, serving = result.run.records, result.run.serving
    served = ~result.run.fit.rejected
    assert served.all()  # (no request of this trace is over the context)
    generated = sum(
        replica.server.scheduler.counts.tokens_generated for replica in result.run.cluster.replicas
    )
    assert generated == int(serving.output_tokens.sum())
    assert (serving.arrival_ps <= serving.admit_ps).all()
    assert (serving.admit_ps < serving.first_token_ps).all()
    assert (serving.first_token_ps <= serving.finish_ps).all()
    held = serving.first_token_ps if disaggregated else serving.finish_ps  # a prefill slot's
    for replica in np.unique(records.replica):
        mine = records.replica == replica
        events = sorted(
            [(int(t), 1) for t in serving.admit_ps[mine]] + [(int(t), -1) for t in held[mine]]
        )
        assert max(np.cumsum([change for _, change in events])) <= 8
    for pool in result.to_dict()["pools"].values():
        paged = pool.get("kv_pool")
        assert (paged is not None) == (device == "paged-gpu")
        if paged is not None:
            assert 0 < paged["peak_pages"] <= paged["pages"]


# --- the registries are the one list of names ------------------------------------------------


def test_the_schema_lists_what_the_registries_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """`rdu-sim schema` lists serving.prefill_priority's and router.policy's valid names from
    the registries (as kv.policy's), so a policy registered later is listed too; the fields'
    help texts name none by hand (the docs describe the shipped ones)."""
    from rdu_sim.cli.schema_cmd import json_schema
    from rdu_sim.config.cluster import RouterConfig
    from rdu_sim.config.workload import ServingConfig

    monkeypatch.setattr(batching_base, "_REGISTRY", dict(batching_base._REGISTRY))
    monkeypatch.setattr(routers_base, "_REGISTRY", dict(routers_base._REGISTRY))
    batching_base.register("later_test", type("Later", (PrefillFirst,), {}))
    routers_base.register("later_test")(type("Later", (), {"choose": lambda s, r, p: 0}))
    serving = json_schema("workload")["$defs"]["ServingConfig"]["properties"]
    router = json_schema("cluster")["$defs"]["RouterConfig"]["properties"]
    assert serving["prefill_priority"]["enum"] == batching_names()
    assert router["policy"]["enum"] == router_names()
    assert "later_test" in batching_names() and "later_test" in router_names()
    helps = (
        ServingConfig.model_fields["prefill_priority"].description,
        RouterConfig.model_fields["policy"].description,
    )
    names = {*batching_names(), *router_names()}
    assert not any(f"'{name}'" in str(text) for name in names for text in helps)


def shipped(registry: dict[str, Any]) -> set[str]:
    """The names a registry holds of rdu-sim's own classes (not a plugin's)."""
    return {name for name, made in registry.items() if code_of(made) is None}


def test_every_shipped_name_is_documented() -> None:
    """The one place names are pinned: each shipped batching policy, router and KV policy
    has its entry in the docs that describe them (a bullet, or a table row)."""
    docs = Path(__file__).resolve().parents[1] / "docs"
    serving, cluster, kv = (
        (docs / doc).read_text() for doc in ("serving.md", "cluster.md", "kv.md")
    )
    for name in shipped(batching_base._REGISTRY):
        assert f"  - `{name}`" in serving, name
    for name in shipped(routers_base._REGISTRY):
        assert f"  - `{name}`:" in cluster, name
    for name in shipped(kv_policies._REGISTRY):
        assert f"| `{name}` |" in kv, name
    assert shipped(batching_base._REGISTRY) >= {"prefill_first", "decode_first", "static"}
