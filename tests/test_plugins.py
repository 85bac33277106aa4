"""Policies from outside rdu-sim (``rdu_sim.plugins``, docs/architecture.md "Where to add a
batching policy", docs/cluster.md's routers): named in YAML through ``RDU_SIM_PLUGINS`` or an
entry point, run by the CLI, compiled and from source alike, and by a sweep's workers; their
admission order (``BatchingPolicy.admit_from``); their answers checked where they are used,
each refusal one line naming the policy; a reloaded plugin registering again; a changed
plugin recomputed by a sweep; a router given the cluster's seed."""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from test_bad_input_kinds import invoke, one_error
from test_cluster import assert_served_once, fake, write_cluster
from test_serving_alone import policy_of, round_step

from rdu_sim import native, plugins
from rdu_sim.cluster.routers import PoolState
from rdu_sim.cluster.routers import base as routers_base
from rdu_sim.config.cluster import UnreadRouterFieldWarning
from rdu_sim.kv.paged import PagedKV
from rdu_sim.plugins import PolicyAnswerError
from rdu_sim.provenance import outside_code
from rdu_sim.serving.batching import ADMIT, NO_PREFILL, QueueView, register
from rdu_sim.serving.batching import base as batching_base
from rdu_sim.serving.batching.prefill_first import PrefillFirst
from rdu_sim.serving.requests import RequestSet
from rdu_sim.serving.server import ServerConfig
from rdu_sim.serving.simulate import serve
from rdu_sim.serving.slots import DECODING, EMPTY, Slots
from rdu_sim.serving.step_cache import StepCache

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
LOAD = ("--set", "serving.requests=120", "--set", "serving.arrival.rate=1.5")
"""An overloaded 8B server (1.5 requests/s of 512-4,096-token prompts): a queue to order."""


def doc_block(doc: str, first_line: str) -> str:
    """The fenced Python block of ``docs/<doc>`` whose first line is ``first_line``, as
    written (the docs' example is what the tests run)."""
    text = (ROOT / "docs" / doc).read_text()
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        block = textwrap.dedent(block)
        if block.startswith(first_line):
            return block
    raise AssertionError(f"no block starting {first_line!r} in docs/{doc}")


def import_doc_module(folder: Path, doc: str, name: str) -> None:
    """Import the block of ``docs/<doc>`` that starts ``# <name>.py`` as module ``name``,
    written to ``folder`` (its registrations stay; the module is forgotten after)."""
    (folder / f"{name}.py").write_text(doc_block(doc, f"# {name}.py"))
    sys.path.insert(0, str(folder))
    try:
        importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)


@pytest.fixture
def registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registries as they are, restored after the test (it registers its own)."""
    monkeypatch.setattr(batching_base, "_REGISTRY", dict(batching_base._REGISTRY))
    monkeypatch.setattr(routers_base, "_REGISTRY", dict(routers_base._REGISTRY))


def rdu_sim(
    *args: str | Path, plugins_path: Path, names: str = "", pure: bool = False
) -> subprocess.CompletedProcess[str]:
    """``rdu-sim ARGS`` in a fresh interpreter with ``plugins_path`` on PYTHONPATH and
    ``RDU_SIM_PLUGINS=names`` (compiled, or from source when ``pure``)."""
    env = {k: v for k, v in os.environ.items() if k not in (native.PURE_VARIABLE, plugins.VARIABLE)}
    env["PYTHONPATH"] = str(plugins_path)
    if names:
        env[plugins.VARIABLE] = names
    if pure:
        env[native.PURE_VARIABLE] = "1"
    return subprocess.run(
        [sys.executable, "-m", "rdu_sim.cli.entry", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=plugins_path,
        timeout=300,
    )


def run_json(*args: str, plugins_path: Path, names: str = "", pure: bool = False) -> Any:
    done = rdu_sim("run", LLAMA, *args, "--json", plugins_path=plugins_path, names=names, pure=pure)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# --- the docs' plugin, through the CLI and a sweep ------------------------------------------


def test_the_docs_spf_plugin_runs_from_the_cli_compiled_and_from_source(tmp_path: Path) -> None:
    """The ten lines of docs/architecture.md as a plugin module: named in YAML (``--set``)
    through RDU_SIM_PLUGINS; the compiled scheduler calls its Python ``admit_from`` (the
    same records as from source, and not prefill_first's); it lowers the mean TTFT below
    FIFO's under load and raises the p99, every request served; its code in provenance."""
    spf = tmp_path / "spf.py"
    spf.write_text(doc_block("architecture.md", "# spf.py"))
    policy = ("--set", "serving.prefill_priority=spf")
    compiled = run_json(*LOAD, *policy, plugins_path=tmp_path, names="spf")
    pure = run_json(*LOAD, *policy, plugins_path=tmp_path, names="spf", pure=True)
    fifo = run_json(*LOAD, plugins_path=tmp_path)
    if native.compiled():  # (this build is; from source, both legs run from source)
        assert compiled["provenance"]["simulator"]["compiled"] is True
    assert pure["provenance"]["simulator"]["compiled"] is False
    for result in (compiled, pure):
        del result["provenance"]["simulator"]
    assert compiled == pure
    assert compiled["batching_policy"] == "spf"
    assert compiled["requests_completed"] == fifo["requests_completed"] == 120
    assert compiled["output_tokens"] == fifo["output_tokens"]
    assert compiled["ttft_s"]["mean"] < 0.8 * fifo["ttft_s"]["mean"]
    assert compiled["ttft_s"]["p99"] > fifo["ttft_s"]["p99"]  # the long prompts wait
    assert compiled["provenance"]["config"]["plugins"] == {
        "serving.prefill_priority": {
            "name": "spf.ShortestPromptFirst",
            "package": "spf",
            "sha256": hashlib.sha256(
                b"spf.py\0" + str(len(spf.read_bytes())).encode() + b"\0" + spf.read_bytes()
            ).hexdigest(),
        }
    }
    assert "plugins" not in fifo["provenance"]["config"]  # a shipped policy: keys unchanged


def test_a_sweep_of_two_workers_runs_a_plugin_and_recomputes_it_when_it_changes(
    tmp_path: Path,
) -> None:
    """The sweep's workers inherit RDU_SIM_PLUGINS and find the policy; the point key holds
    the plugin's source digest: after an edit the plugin's point runs again, the shipped
    policy's row is reused."""
    spf = tmp_path / "spf.py"
    spf.write_text(doc_block("architecture.md", "# spf.py"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"base: {LLAMA}\n"
        "axes:\n  serving.prefill_priority: [prefill_first, spf]\n"
        "set: {serving.requests: 120, serving.arrival.rate: 1.5}\n"
        "metrics: [ttft_s.mean, requests_completed]\n"
    )
    db = tmp_path / "spf.sqlite"
    args = ("sweep", spec, "--workers", "2", "--db", db, "--no-progress")
    first = rdu_sim(*args, plugins_path=tmp_path, names="spf")
    assert first.returncode == 0, first.stderr
    assert "0 already done, 2 to run" in first.stderr and "2 done, 0 failed" in first.stdout
    rows = _rows(db)
    assert [r["requests_completed"] for r in rows.values()] == [120, 120]
    assert rows["spf"]["ttft_s.mean"] < rows["prefill_first"]["ttft_s.mean"]
    spf.write_text(spf.read_text() + "# edited\n")
    again = rdu_sim(*args, plugins_path=tmp_path, names="spf")
    assert again.returncode == 0, again.stderr
    assert "1 already done, 1 to run" in again.stderr  # the plugin's point, not FIFO's
    assert _rows(db) == rows  # the same code behaviour: the same numbers


def _rows(db: Path) -> dict[str, dict[str, Any]]:
    """Each done row's metrics, by its batching policy (the newest row of a point)."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        found = conn.execute(
            "SELECT overrides, metrics FROM results WHERE status = 'done' ORDER BY finished"
        )
        out = {}
        for overrides, metrics in found:
            out[json.loads(overrides)["serving.prefill_priority"]] = json.loads(metrics)
    return dict(sorted(out.items()))


def test_an_entry_point_names_a_plugin_and_a_broken_one_is_one_error(tmp_path: Path) -> None:
    """An installed distribution's ``rdu_sim.plugins`` entry point is imported without the
    variable; one that fails to import is one line naming the entry point, the module and
    the exception, exit 2 (and only when a name is missed: a shipped policy still runs)."""
    (tmp_path / "epplug.py").write_text(
        "from rdu_sim.serving.batching import register\n"
        "from rdu_sim.serving.batching.decode_first import DecodeFirst\n"
        "class Mine(DecodeFirst):\n    pass\n"
        "register('ep_first', Mine)\n"
    )
    dist = tmp_path / "epplug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: epplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[rdu_sim.plugins]\nmine = epplug\n")
    ours = run_json("--set", "serving.prefill_priority=ep_first", plugins_path=tmp_path)
    theirs = run_json("--set", "serving.prefill_priority=decode_first", plugins_path=tmp_path)
    assert ours["provenance"]["config"]["plugins"]["serving.prefill_priority"]["name"] == (
        "epplug.Mine"
    )
    for result in (ours, theirs):
        del result["provenance"], result["batching_policy"]
    assert ours == theirs  # a subclass that changes nothing simulates as its base
    (dist / "entry_points.txt").write_text("[rdu_sim.plugins]\nmine = epplug_gone\n")
    broken = rdu_sim(
        "run", LLAMA, "--set", "serving.prefill_priority=ep_first", plugins_path=tmp_path
    )
    assert broken.returncode == 2 and "Traceback" not in broken.stderr
    assert broken.stderr.strip().splitlines()[-1] == (
        "error: entry point 'mine' (rdu_sim.plugins, of epplug 0.1): plugin module "
        "'epplug_gone' failed to import: ModuleNotFoundError: No module named 'epplug_gone'"
    )
    shipped = rdu_sim("check", LLAMA, plugins_path=tmp_path)
    assert shipped.returncode == 0, shipped.stderr


def test_a_plugin_named_in_the_variable_that_fails_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "raising.py").write_text("raise RuntimeError('half\\nwritten')\n")
    done = rdu_sim(
        "run",
        LLAMA,
        "--set",
        "serving.prefill_priority=spf",
        plugins_path=tmp_path,
        names="raising",
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: RDU_SIM_PLUGINS: plugin module 'raising' failed to import: "
        "RuntimeError: half written"
    )


def test_a_plugin_that_exits_at_import_is_one_error_and_a_stop_is_a_stop(
    tmp_path: Path,
) -> None:
    """A plugin calling sys.exit(3) at import ended rdu-sim with status 3 and no word; one
    raising KeyboardInterrupt printed "Aborted!": the first is the plugin's failure (one
    line, exit 2), the second the interrupt rule's stop (its line, exit 130)."""
    (tmp_path / "exiting.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "stopping.py").write_text("raise KeyboardInterrupt\n")
    args = ("run", LLAMA, "--set", "serving.prefill_priority=spf")
    done = rdu_sim(*args, plugins_path=tmp_path, names="exiting")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: RDU_SIM_PLUGINS: plugin module 'exiting' failed to import: SystemExit: 3"
    )
    stopped = rdu_sim(*args, plugins_path=tmp_path, names="stopping")
    assert stopped.returncode == 130, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1].startswith("interrupted (SIGINT): ")


# --- admission order ------------------------------------------------------------------------


class ShortestFirst(PrefillFirst):
    """Shortest prompt first, written in Python (a subclass of a compiled policy)."""

    def __init__(self) -> None:
        self.views: list[list[tuple[int, int]]] = []

    def admit_from(self, queue: QueueView) -> int:
        self.views.append([(queue.request(i), queue.prompt_tokens(i)) for i in range(len(queue))])
        return min(range(len(queue)), key=queue.prompt_tokens)


def _serve(name: str, prompts: list[int], slots: int = 1, **config: Any) -> Any:
    requests = RequestSet(
        np.array(prompts, dtype=np.int64),
        np.full(len(prompts), 3, dtype=np.int64),
        np.zeros(len(prompts)),
        None,
    )
    server = ServerConfig(slots, 4096, name, **config)
    return serve(requests, policy_of("full"), StepCache(round_step), server)


def test_admit_from_chooses_the_request_an_admission_takes(registries: None) -> None:
    """Four requests at one instant, one slot: FIFO admits them in arrival order, shortest
    prompt first by prompt length, each asked over the queue as it is then (ids and prompt
    tokens); every request served either way."""
    register("shortest_test", ShortestFirst)
    prompts = [900, 100, 500, 300]
    fifo = _serve("prefill_first", prompts)
    assert np.argsort(fifo.admit_ps, kind="stable").tolist() == [0, 1, 2, 3]
    spf = _serve("shortest_test", prompts)
    assert np.argsort(spf.admit_ps, kind="stable").tolist() == [1, 3, 2, 0]
    for records in (fifo, spf):
        assert (records.completions == 1).all() and (records.first_token_ps > 0).all()


def test_a_batched_prefill_packs_in_the_policys_order(registries: None) -> None:
    """With prefill_batch_tokens, the prompts packed behind an admission are the ones the
    policy's admissions would take, until one pads to another shape."""
    register("shortest_test", ShortestFirst)
    prompts = [100, 120, 110, 900]  # three of one prompt bucket, one of a larger
    fifo = _serve("prefill_first", prompts, 4, prefill_batch_tokens=8192)
    spf = _serve("shortest_test", prompts, 4, prefill_batch_tokens=8192)
    assert fifo.slot.tolist() == [0, 1, 2, 3]
    assert spf.slot.tolist() == [0, 2, 1, 3]  # 100, then 110, then 120 take the slots
    assert fifo.admit_ps[0] == fifo.admit_ps[1] == fifo.admit_ps[2] < fifo.admit_ps[3]
    assert spf.admit_ps[0] == spf.admit_ps[1] == spf.admit_ps[2] < spf.admit_ps[3]


def test_the_shipped_policies_are_never_asked_where_to_admit() -> None:
    assert not any(
        batching_base.chooses_admission(batching_base.make_batching(name))
        for name in ("prefill_first", "decode_first", "static")
    )
    assert batching_base.chooses_admission(ShortestFirst())


class Rotating(PrefillFirst):
    """Each answer the next position round the queue: a policy with state, whose every call
    answers differently (the queue as it was and the request chosen, call by call; each one
    made is kept in ``MADE``)."""

    MADE: ClassVar[list[Rotating]] = []

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], int]] = []
        Rotating.MADE.append(self)

    def admit_from(self, queue: QueueView) -> int:
        position = len(self.calls) % len(queue)
        self.calls.append(([queue.request(i) for i in range(len(queue))], queue.request(position)))
        return position


def _rotating(prompts: list[int], slots: int) -> tuple[Any, Rotating]:
    """``prompts`` served by ``slots`` under :class:`Rotating`, in a paged pool of 200 pages of
    16 tokens (a 3,000-token prompt takes 188, a 100-token one 7): the records and the
    policy."""
    register("rotating_test", Rotating)
    Rotating.MADE.clear()
    pool = PagedKV(page_tokens=16, pages=200, slot_tokens=4096)
    records = _serve("rotating_test", prompts, slots, kv_pool=pool)
    (policy,) = Rotating.MADE
    assert (records.completions == 1).all() and (records.first_token_ps > 0).all()
    assert 0 < records.counts.kv_pages_peak <= 200
    return records, policy


def test_an_admission_takes_the_request_its_decision_checked(registries: None) -> None:
    """A pool that holds one long prompt and one short, three slots: a policy whose every
    answer differs is asked once a decision, and the request the KV pool was checked for is
    the one admitted (asked again at the admission, it admitted one that did not fit:
    'admitted beyond the KV pool'). Between two calls at most one request left the queue,
    the one the earlier call chose."""
    prompts = [100, 3000, 100, 100, 3000, 3000, 100]
    _records, policy = _rotating(prompts, 3)
    calls = policy.calls
    left = [set(before) - set(after) for (before, _), (after, _) in itertools.pairwise(calls)]
    assert all(gone <= {chosen} for gone, (_, chosen) in zip(left, calls[:-1], strict=True))
    assert sum(map(len, left)) == len(prompts) - 1  # the last admitted after the last call


def test_admit_from_is_asked_once_an_admission_with_one_slot(registries: None) -> None:
    """One slot, a pool that holds any one request: only a decision with the slot free and a
    request waiting asks (not the admission again, nor a decode run's plan), and it admits
    the request chosen: the admissions are the answers, in order."""
    records, policy = _rotating([100, 3000, 300, 900, 50], 1)
    admitted = np.argsort(records.admit_ps, kind="stable").tolist()
    assert [chosen for _, chosen in policy.calls] == admitted == [0, 2, 4, 3, 1]


# --- answers checked where they are used ----------------------------------------------------


class Broken(PrefillFirst):
    """prefill_first, but for one wrong answer of ``MODE``."""

    MODE = ""

    def next_prefill(self, slots: Slots, queued: int, after_prefill: bool) -> Any:
        mode = self.MODE
        phases = slots.phase.tolist()
        if mode == "admit_full" and slots.occupied == slots.n and queued:
            return ADMIT
        if mode == "admit_nobody" and queued == 0:
            return ADMIT
        if mode == "past_the_slots":
            return slots.n + 5
        if mode == "minus_seven":
            return -7
        if mode == "float":
            return 0.5
        if mode == "decoding_slot" and DECODING in phases:
            return phases.index(DECODING)
        if mode == "empty_slot" and EMPTY in phases and queued:
            return phases.index(EMPTY)
        if mode == "never":
            return NO_PREFILL
        return super().next_prefill(slots, queued, after_prefill)

    def prefill_waits(self, slots: Slots, queued: int) -> Any:
        return 1 if self.MODE == "waits_int" else super().prefill_waits(slots, queued)

    def admit_from(self, queue: QueueView) -> Any:
        return len(queue) if self.MODE == "past_the_queue" else 0


@pytest.mark.parametrize(
    ("mode", "chunk", "message"),
    [
        ("admit_full", None, "returned -1 from next_prefill: ADMIT with all 2 slots taken"),
        ("admit_nobody", 256, "returned -1 from next_prefill: ADMIT with no request waiting"),
        ("past_the_slots", None, "returned 7 from next_prefill: no slot 7 (slots 0..1)"),
        ("minus_seven", None, "returned -7 from next_prefill: not a slot, ADMIT (-1) or"),
        ("float", None, "returned 0.5 from next_prefill: a float, not an integer"),
        ("decoding_slot", None, "from next_prefill: slot 0 is decoding, not prefilling"),
        ("empty_slot", None, "returned 0 from next_prefill: slot 0 is empty, not prefilling"),
        ("waits_int", None, "returned 1 from prefill_waits: an int, not a bool"),
        ("past_the_queue", None, "from admit_from: not a position of the 6 waiting requests"),
        ("never", None, "stopped serving with 0 of 6 requests completed: its next_prefill"),
    ],
)
def test_a_wrong_answer_is_the_policys_error(
    registries: None, monkeypatch: pytest.MonkeyPatch, mode: str, chunk: int | None, message: str
) -> None:
    monkeypatch.setattr(Broken, "MODE", mode)
    register("broken", Broken)
    prompts = [1000] if mode == "admit_nobody" else [300, 700, 200, 900, 400, 600]
    with pytest.raises(PolicyAnswerError) as caught:
        _serve("broken", prompts, 2, prefill_chunk_tokens=chunk)
    assert str(caught.value).startswith("batching policy 'broken' ")
    assert message in str(caught.value)


def test_a_stalled_replica_is_its_policys_error(
    tmp_path: Path, registries: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Broken, "MODE", "never")
    register("broken", Broken)
    path = write_cluster(tmp_path, router={"policy": "round_robin"})
    with pytest.raises(
        PolicyAnswerError, match=re.escape("batching policy 'broken' left request 0 (and 119 more)")
    ):
        fake(
            path,
            {"pools.serve.set": {"serving.batch_slots": 8, "serving.prefill_priority": "broken"}},
        )


def test_the_cli_says_it_in_one_line(registries: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Broken, "MODE", "float")
    register("broken", Broken)
    result = invoke("run", LLAMA, "--set", "serving.prefill_priority=broken")
    assert one_error(result) == (
        "error: batching policy 'broken' returned 0.5 from next_prefill: a float, not an integer"
    )


class Fixed:
    """A router answering ``ANSWER`` whatever the pool."""

    ANSWER: Any = 0

    def choose(self, request: int, pool: PoolState) -> Any:
        return self.ANSWER


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (-1, "returned -1 for request 0: outside the pool's replicas 0..2"),
        (3, "returned 3 for request 0: outside the pool's replicas 0..2"),
        (0.0, "returned 0.0 for request 0: a float, not an integer"),
        (True, "returned True for request 0: a bool, not an integer"),
    ],
)
def test_a_routers_wrong_answer_is_its_error(
    tmp_path: Path,
    registries: None,
    monkeypatch: pytest.MonkeyPatch,
    answer: Any,
    problem: str,
) -> None:
    """-1 would be Python's last replica: refused, as past the pool and a float are."""
    monkeypatch.setattr(Fixed, "ANSWER", answer)
    routers_base.register("fixed")(Fixed)
    with pytest.raises(PolicyAnswerError, match=re.escape(f"router 'fixed' {problem}")):
        fake(write_cluster(tmp_path, router={"policy": "fixed"}))


def test_a_numpy_index_routes_as_its_int(
    tmp_path: Path, registries: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Fixed, "ANSWER", np.int64(2))
    routers_base.register("fixed")(Fixed)
    result = fake(write_cluster(tmp_path, router={"policy": "fixed"}))
    assert_served_once(result)
    assert (result.run.records.replica == 2).all()


def test_the_docs_router_gets_the_clusters_seed(tmp_path: Path, registries: None) -> None:
    """docs/cluster.md's power of two choices, registered as written: seeded by the
    cluster's traffic.seed (the front pool's router the seed, the decode pool's the next),
    the same seed the same routing, every request served; its code in the run's
    provenance."""
    import_doc_module(tmp_path, "cluster.md", "p2c")
    seeds: list[int] = []
    factory = routers_base._REGISTRY["p2c"]

    def recording(seed: int) -> Any:
        seeds.append(seed)
        return factory(seed=seed)

    routers_base._REGISTRY["p2c"] = recording
    path = write_cluster(tmp_path, router={"policy": "p2c"})
    one, same = fake(path), fake(path)
    other = fake(path, {"traffic.seed": 6})
    assert seeds == [5, 6, 5, 6, 6, 7]  # the front router's, the decode pool's
    for result in (one, same, other):
        assert_served_once(result)
    assert one.run.records.replica.tolist() == same.run.records.replica.tolist()
    routers_base._REGISTRY["p2c"] = factory
    code = fake(path).provenance()["plugins"]["router.policy"]
    assert (code["name"], code["package"]) == ("p2c.PowerOfTwoChoices", "p2c")


def test_a_router_seed_of_its_own_seeds_a_router_over_a_trace(
    tmp_path: Path, registries: None
) -> None:
    """router.seed seeds a router that takes one, traffic.seed its default (the rule,
    ``ClusterConfig.router_seed``): over a trace (no traffic.seed) 0, or router.seed, which
    changes the routing; with synthetic traffic it overrides traffic.seed. traffic.seed
    with a trace is refused, pointing at router.seed; router.seed given to a router that
    takes none warns that it changes nothing."""

    @routers_base.register("drawing")
    class Drawing:
        seeds: ClassVar[list[int]] = []

        def __init__(self, seed: int) -> None:
            Drawing.seeds.append(seed)
            self.rng = np.random.default_rng(seed)

        def choose(self, request: int, pool: PoolState) -> int:
            return int(self.rng.integers(len(pool)))

    synthetic = write_cluster(tmp_path, router={"policy": "drawing"})
    fake(synthetic, {"router.seed": 9})
    assert Drawing.seeds == [9, 10]  # the front router's, the decode pool's
    traffic = {"trace": "t.csv"}
    (tmp_path / "t.csv").write_text(
        "arrival_s,prompt_tokens,output_tokens\n"
        + "".join(f"{i * 0.05},{300 + 7 * i},{2 + i % 5}\n" for i in range(60))
    )
    path = write_cluster(tmp_path, router={"policy": "drawing"}, traffic=traffic)
    Drawing.seeds.clear()
    zero, three, again = fake(path), fake(path, {"router.seed": 3}), fake(path)
    assert Drawing.seeds == [0, 1, 3, 4, 0, 1]
    for result in (zero, three, again):
        assert_served_once(result)
    routed = [r.run.records.replica.tolist() for r in (zero, three, again)]
    assert routed[0] == routed[2] != routed[1]
    message = one_error(invoke("run", str(path), "--set", "traffic.seed=3"), "traffic").partition(
        "traffic: "
    )[2]
    assert message == (
        "traffic.seed only applies to synthetic traffic, not a trace (a router's seed is "
        "router.seed) (from --set traffic.seed)"
    )
    rr = write_cluster(tmp_path, router={"policy": "round_robin", "seed": 4}, traffic=traffic)
    with pytest.warns(UnreadRouterFieldWarning, match="round_robin takes no seed .* a seed of 4"):
        fake(rr)


def test_a_name_unknown_where_it_is_made_says_how_a_worker_finds_a_plugin() -> None:
    """A worker process (a sweep's) knows a policy only when the variable or an entry point
    names its module: the error of a name its registry lacks says so."""
    for make in (batching_base.make_batching, routers_base.make_router):
        with pytest.raises(ValueError, match=r"valid: .*; an import in this process alone"):
            make("imported_elsewhere")


def test_a_router_without_a_seed_parameter_is_made_without_one(registries: None) -> None:
    assert routers_base.takes_seed(routers_base._REGISTRY["round_robin"]) is False
    assert type(routers_base.make_router("round_robin", seed=3)).__name__ == "RoundRobin"


# --- registering again, keys ----------------------------------------------------------------


def test_a_reloaded_plugin_registers_again_and_another_class_is_refused(
    tmp_path: Path, registries: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "notebook_policy.py").write_text(
        "from rdu_sim.serving.batching import register\n"
        "from rdu_sim.serving.batching.prefill_first import PrefillFirst\n"
        "class Mine(PrefillFirst):\n    pass\n"
        "register('mine', Mine)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("notebook_policy")
    try:
        first = batching_base._REGISTRY["mine"]
        importlib.reload(module)
        assert batching_base._REGISTRY["mine"] is module.Mine is not first

        class Mine(PrefillFirst):  # the same class name, another module: another class
            pass

        with pytest.raises(
            ValueError,
            match=r"batching policy 'mine' is already registered \(by notebook_policy.Mine; "
            r"test_plugins.test_a_reloaded_plugin.*\.Mine is another\)",
        ):
            register("mine", Mine)
        with pytest.raises(ValueError, match="'prefill_first' is already registered"):
            register("prefill_first", Mine)
    finally:
        sys.modules.pop("notebook_policy", None)


def test_outside_code_names_a_plugins_source_and_nothing_for_rdu_sims_own(
    tmp_path: Path, registries: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a sweep's point key and a run's provenance hash: a policy's class, package and
    source sha256, which an edit to any file of the package changes; nothing for the
    shipped policies and routers (their keys are what they were)."""
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("from mypkg import policies  # noqa\n")
    (package / "policies.py").write_text(
        "from rdu_sim.serving.batching import register\n"
        "from rdu_sim.serving.batching.prefill_first import PrefillFirst\n"
        "class Pkg(PrefillFirst):\n    pass\n"
        "register('pkg', Pkg)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("mypkg")
    try:
        before = outside_code("pkg", "round_robin")
        assert list(before) == ["serving.prefill_priority"]
        assert before["serving.prefill_priority"]["name"] == "mypkg.policies.Pkg"
        assert before["serving.prefill_priority"]["package"] == "mypkg"
        (package / "policies.py").write_text((package / "policies.py").read_text() + "\n")
        assert outside_code("pkg", None) != before
        assert outside_code("prefill_first", "least_outstanding") == {}
        assert outside_code("no_such_policy", "no_such_router") == {}
    finally:
        for name in ("mypkg", "mypkg.policies"):
            sys.modules.pop(name, None)
