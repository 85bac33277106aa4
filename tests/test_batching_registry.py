"""The batching policies' registry (rdu_sim.serving.batching): the one list of valid names
for ``serving.prefill_priority``; a duplicate is refused, an unknown name is one ``error:``
line naming the file (at the name's line), the field and the valid names, before anything
is simulated, from ``rdu-sim run`` (a workload or a cluster's pool, named where it is
written) and ``rdu-sim check``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_bad_input_kinds import clean_error, invoke, one_error

from rdu_sim.serving.batching import BatchingPolicy, batching_names, make_batching, register
from rdu_sim.serving.batching.prefill_first import PrefillFirst

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"
WORDS = ("serving.prefill_priority", "'first_come'", f"valid: {', '.join(batching_names())}")


def test_names_are_unique_and_each_makes_its_own_policy() -> None:
    assert {"prefill_first", "decode_first"} <= set(batching_names())
    first, second = make_batching("prefill_first"), make_batching("prefill_first")
    assert isinstance(first, PrefillFirst) and first is not second
    with pytest.raises(ValueError, match="'prefill_first' is already registered"):
        register("prefill_first", BatchingPolicy)
    with pytest.raises(ValueError, match=f"valid: {', '.join(batching_names())}"):
        make_batching("first_come")


def test_run_refuses_an_unknown_policy_naming_the_field() -> None:
    result = invoke("run", LLAMA, "--set", "serving.prefill_priority=first_come")
    error = one_error(result, *WORDS)
    assert error.startswith(f"error: {LLAMA}: serving.prefill_priority:")  # no line: not the file's
    assert error.endswith("(from --set serving.prefill_priority)")


def test_a_name_written_in_the_file_is_refused_at_its_line(tmp_path: Path) -> None:
    """By ``rdu-sim run`` and ``rdu-sim check`` alike (as a router's name is)."""
    data = yaml.safe_load(LLAMA.read_text())
    data["hardware"] = str((LLAMA.parent / data["hardware"]).resolve())
    data["serving"]["prefill_priority"] = "first_come"
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(data))
    line = 1 + path.read_text().splitlines().index("  prefill_priority: first_come")
    for command in ("run", "check"):
        stderr = clean_error(invoke(command, path), *WORDS)
        assert stderr.startswith(f"error: {path}:{line}: serving.prefill_priority: unknown")


def _cluster(folder: Path, workload: Path, pool_set: dict[str, str]) -> Path:
    cluster = {
        "name": "pol",
        "pools": {"serve": {"workload": str(workload), "replicas": 2, "set": pool_set}},
        "traffic": {"rate": 4, "requests": 8, "prompt_tokens": 128, "output_tokens": 16},
        "slo": {"ttft": "2 s", "tpot": "100 ms", "attainment": 0.9},
    }
    path = folder / "c.yaml"
    path.write_text(yaml.safe_dump(cluster, sort_keys=False))
    return path


def test_a_pools_policy_is_the_cluster_files_error_where_it_is_written(tmp_path: Path) -> None:
    """A name in a pool's ``set`` is the cluster file's error at that line; one written in
    the workload is the workload file's, under the pool's (run and check alike)."""
    cluster = _cluster(tmp_path, LLAMA, {"serving.prefill_priority": "first_come"})
    line = 1 + cluster.read_text().splitlines().index("      serving.prefill_priority: first_come")
    for command in ("run", "check"):
        errors = clean_error(invoke(command, cluster), *WORDS).splitlines()
        assert errors[0].startswith(
            f"error: {cluster}:{line}: pools.serve.set.serving.prefill_priority: unknown"
        )
    data = yaml.safe_load(LLAMA.read_text())
    data["hardware"] = str((LLAMA.parent / data["hardware"]).resolve())
    data["serving"]["prefill_priority"] = "first_come"
    workload = tmp_path / "w.yaml"
    workload.write_text(yaml.safe_dump(data))
    at = 1 + workload.read_text().splitlines().index("  prefill_priority: first_come")
    cluster = _cluster(tmp_path, workload, {})
    for command in ("run", "check"):
        errors = clean_error(invoke(command, cluster), *WORDS).splitlines()
        assert errors[0].startswith(f"error: {cluster}:3: pools.serve: pool 'serve'")
        assert f"{workload}:{at}: serving.prefill_priority: unknown" in errors[1]
