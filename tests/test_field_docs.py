"""A config field in words with its unit, from its own description and type (the labels of
sweep tables and plots)."""

from __future__ import annotations

import pytest

from rdu_sim.config.field_docs import axis_label, field_doc
from rdu_sim.config.workload import ServingConfig


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("serving.max_context", "longest sequence a slot holds (tokens)"),  # unit: its noun
        ("serving.batch_slots", "static batch slots"),  # a count: no unit
        ("kv.budget", "KV tokens kept per slot by a compressing policy"),  # part + noun
        ("kv.policy", "KV-cache policy by registered name"),  # the part is named already
        ("hw.socket.hbm.bandwidth", "HBM peak bytes/s"),  # a quantity: said in the words
        ("hw.socket.hbm.capacity", "HBM bytes per socket"),
        ("hw.socket.kernel.sync", "host/AGCU sync at a kernel boundary (s)"),  # Seconds
        ("speculation.decoding.draft_tokens", "tokens the draft proposes per round"),  # k:
        ("hw.system.intra_node_link.bandwidth", "intra-node link bytes/s per direction"),
    ],
)
def test_axis_labels(path: str, label: str) -> None:
    assert axis_label(path) == label


def test_the_words_are_the_fields_own_description() -> None:
    doc = field_doc("serving.max_context")
    assert doc is not None
    assert doc.description == ServingConfig.model_fields["max_context"].description


@pytest.mark.parametrize("path", ["serving.nope", "hw.socket.nope.bandwidth", "nope", "serving"])
def test_a_path_without_a_documented_field_is_shown_as_is(path: str) -> None:
    assert axis_label(path) == path
