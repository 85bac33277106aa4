"""An override whose value is a mapping merges into the mapping it is set onto (one rule with
``extends:`` overlays: ``config.merge``): ``{"serving.arrival": {"rate": 2.0}}`` ran a closed
loop (the whole arrival section replaced, its process reset to the default) where
``"serving.arrival.rate": 2.0`` ran Poisson arrivals, and ``{"serving": {"requests": 8}}``
reset the batch slots, the arrival and the prompts. A field the chosen arrival process does
not read warns as a ``kv`` field the policy does not read."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pytest

from rdu_sim import api
from rdu_sim.config.cluster import ClusterConfig
from rdu_sim.config.hardware_file import hardware_schema
from rdu_sim.config.merge import VARIANT_KEYS, merged
from rdu_sim.config.overrides import UnreadFieldWarning, set_fields
from rdu_sim.config.stack import StackConfig
from rdu_sim.config.workload import ARRIVAL_READS, ArrivalConfig, ArrivalProcess, WorkloadConfig
from rdu_sim.kv.policies import UnreadKVFieldWarning
from rdu_sim.serving.run import scenario_requests

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"  # poisson at 1.0/s, 16 slots


def test_mappings_merge_deep_and_other_values_replace() -> None:
    base = {"a": {"b": 1, "c": {"d": 2, "e": 3}}, "f": [1, 2], "g": 4}
    overlay = {"a": {"c": {"d": 5}}, "f": [3], "g": {"h": 6}}
    assert merged(base, overlay) == {"a": {"b": 1, "c": {"d": 5, "e": 3}}, "f": [3], "g": {"h": 6}}
    assert base == {"a": {"b": 1, "c": {"d": 2, "e": 3}}, "f": [1, 2], "g": 4}  # unchanged
    assert merged(None, {"x": 1}) == {"x": 1}


@pytest.mark.parametrize("key", VARIANT_KEYS)
def test_a_mapping_naming_another_variant_replaces(key: str) -> None:
    base = {key: "a", "low": 1, "high": 2}
    assert merged(base, {key: "b", "value": 3}) == {key: "b", "value": 3}
    assert merged(base, {key: "a", "low": 0}) == {key: "a", "low": 0, "high": 2}  # the same one
    assert merged({"low": 1}, {key: "b"}) == {key: "b"}  # a variant the base did not name


def _discriminators(schema: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(schema, dict):
        tag = schema.get("discriminator")
        if isinstance(tag, dict):
            found.add(tag["propertyName"])
        for value in schema.values():
            found |= _discriminators(value)
    elif isinstance(schema, list):
        for value in schema:
            found |= _discriminators(value)
    return found


def test_every_discriminator_of_the_configs_is_a_variant_key() -> None:
    """A union the config tells apart by a key: a mapping naming another of its variants
    must replace the old one, not merge into it (the old variant's fields left over)."""
    schemas = [
        WorkloadConfig.model_json_schema(),
        StackConfig.model_json_schema(),
        ClusterConfig.model_json_schema(),
        hardware_schema().json_schema(),
    ]
    tags = set().union(*(_discriminators(schema) for schema in schemas))
    assert "dist" in tags and "family" in tags  # the walk finds them
    assert tags <= set(VARIANT_KEYS)


def test_the_trials_arrival_mapping_runs_poisson_as_the_dotted_path_does() -> None:
    mapped = api.load(LLAMA, {"serving.requests": 20, "serving.arrival": {"rate": 2.0}})
    dotted = api.load(LLAMA, {"serving.requests": 20, "serving.arrival.rate": 2.0})
    assert mapped.workload == dotted.workload
    arrival = mapped.workload.serving.arrival
    assert (arrival.process, arrival.rate) == ("poisson", 2.0)
    # the command line's form of it, read as YAML
    texts = api.load(LLAMA, ["serving.requests=20", "serving.arrival={rate: 2.0}"])
    assert texts.workload == dotted.workload


def test_a_section_mapping_keeps_the_sections_other_fields() -> None:
    plain = api.load(LLAMA).workload.serving
    serving = api.load(LLAMA, {"serving": {"requests": 8}}).workload.serving
    assert serving == plain.model_copy(update={"requests": 8})
    assert serving.batch_slots == 16 and serving.arrival.process == "poisson"


def test_a_mapping_of_another_distribution_replaces_the_old_one() -> None:
    serving = api.load(LLAMA, {"serving.prompt_tokens": {"dist": "fixed", "value": 64}})
    assert serving.workload.serving.prompt_tokens.model_dump() == {"dist": "fixed", "value": 64}
    # the same distribution: merged (its high kept)
    same = api.load(LLAMA, {"serving.prompt_tokens": {"dist": "uniform", "low": 100}})
    assert same.workload.serving.prompt_tokens.model_dump() == {
        "dist": "uniform",
        "low": 100,
        "high": 4096,
    }


def test_a_mapping_over_a_preset_name_edits_the_preset() -> None:
    """``model: {layers: 4}`` over ``model: llama-3.1-8b`` is ``model.layers=4``."""
    mapped = api.load(LLAMA, {"model": {"layers": 4}})
    dotted = api.load(LLAMA, {"model.layers": 4})
    assert mapped.model == dotted.model and mapped.model.layers == 4


def test_set_fields_names_each_leaf() -> None:
    given = {"serving.arrival": {"rate": 2.0, "x": {"y": None}}, "kv.policy": "full", "e": {}}
    assert set_fields(given) == {
        "serving.arrival.rate": 2.0,
        "serving.arrival.x.y": None,
        "kv.policy": "full",
    }


def test_a_kv_mapping_switching_the_policy_keeps_its_budget() -> None:
    """``kv={policy: streamingllm}`` switches the policy as ``kv.policy=streamingllm`` does
    (``scenario._switched_policy``: the budget kept, the ring derived from it)."""
    file = ROOT / "workloads" / "deepseek-r1-128k-snapstream.yaml"
    mapped = api.load(file, {"kv": {"policy": "streamingllm"}})
    dotted = api.load(file, {"kv.policy": "streamingllm"})
    assert mapped.workload.kv == dotted.workload.kv


def test_every_arrival_process_and_field_is_listed() -> None:
    assert set(ARRIVAL_READS) == set(get_args(ArrivalProcess))
    assert set(ArrivalConfig.model_fields) - {"process"} == {
        name for reads in ARRIVAL_READS.values() for name in reads
    }


@pytest.mark.parametrize("process", sorted(ARRIVAL_READS))
def test_a_field_a_process_does_not_read_changes_nothing(process: str) -> None:
    """The requests each process draws, with every other arrival field at another value: the
    same where ARRIVAL_READS says it is unread, others where it says it is read."""
    base = {"serving.requests": 30, "serving.arrival.process": process}
    if process == "poisson":
        base["serving.arrival.rate"] = 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreadFieldWarning)
        plain = scenario_requests(api.load(LLAMA, base), 16)
        for name, value in (("rate", 7.0), ("concurrency", 3)):
            changed = api.load(LLAMA, {**base, f"serving.arrival.{name}": value})
            other = scenario_requests(changed, 16)
            same = plain.concurrency == other.concurrency and (
                (plain.arrival_s is None and other.arrival_s is None)
                or (
                    plain.arrival_s is not None
                    and other.arrival_s is not None
                    and np.array_equal(plain.arrival_s, other.arrival_s)
                )
            )
            assert same == (name not in ARRIVAL_READS[process]), name


def test_a_rate_under_a_closed_loop_warns_naming_the_override_as_given() -> None:
    sets = {"serving.arrival": {"process": "closed_loop", "rate": 3.0}}
    with pytest.warns(UnreadFieldWarning) as caught:
        api.load(LLAMA, sets)
    (message,) = [str(w.message) for w in caught]
    assert message == (
        f"{LLAMA}: serving.arrival.rate: 3.0 is not read by serving.arrival.process "
        "closed_loop (it reads serving.arrival.concurrency), so it changes nothing (from "
        "overrides: serving.arrival)"
    )
    assert not isinstance(caught[0].message, UnreadKVFieldWarning)
    with pytest.warns(UnreadFieldWarning, match="concurrency: 3 is not read by .* poisson"):
        api.load(LLAMA, ["serving.arrival.concurrency=3"])


def test_the_files_own_arrival_fields_and_read_ones_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreadFieldWarning)
        # switched to a closed loop: the file's own rate is not checked
        api.load(LLAMA, {"serving.arrival": {"process": "closed_loop", "concurrency": 4}})
        api.load(LLAMA, {"serving.arrival.rate": 2.0, "serving.arrival.concurrency": None})


def test_a_recorded_mapping_override_replays_to_the_same_run() -> None:
    """The scenario records the mapping as given; loading the file with it again gives the
    same workload (and so the same run: its provenance replays)."""
    first = api.load(LLAMA, {"serving": {"requests": 4, "arrival": {"rate": 3.0}}})
    again = api.load(LLAMA, dict(first.overrides))
    assert again.workload == first.workload
    recorded = '{"serving": {"requests": 4, "arrival": {"rate": 3.0}}}'
    assert json.dumps(dict(first.overrides)) == recorded
