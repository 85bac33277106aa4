"""NumPy values in overrides are the Python values they hold (``config.overrides.plain``):
``np.int64`` for ``serving.batch_slots`` and ``np.bool_`` for ``kernel_looping`` were refused
("Input should be a valid integer") while ``np.float64`` passed as a float subclass, and a
study over ``2 ** np.arange(12, 15)`` or ``np.array([1, 4])`` failed; a result's provenance
records plain values."""

from __future__ import annotations

import json

import numpy as np

from rdu_sim import api, studies
from rdu_sim.config.overrides import normalize_overrides, plain

W = "llama3.1-8b-1socket"


def test_numpy_values_become_plain_python_values() -> None:
    given = {
        "a": np.int64(4),
        "b": np.bool_(True),
        "c": np.float64(2.5),
        "d": np.array([1, 2]),
        "e": {"f": [np.int32(3)]},
        "g": np.str_("x"),
    }
    made = normalize_overrides(given)
    assert made == {"a": 4, "b": True, "c": 2.5, "d": [1, 2], "e": {"f": [3]}, "g": "x"}
    types = [type(made[k]) for k in "abcdg"]
    assert types == [int, bool, float, list, str]
    assert type(made["e"]["f"][0]) is int
    assert plain((np.int8(1), "y")) == (1, "y")


def test_a_run_with_numpy_overrides_equals_one_with_python_values() -> None:
    numpy_run = api.run(
        W,
        {
            "serving.batch_slots": np.int64(4),
            "serving.requests": np.int64(3),
            "kernel_looping": np.bool_(True),
            "serving.arrival.rate": np.float64(2.0),
        },
    )
    python_run = api.run(
        W,
        {
            "serving.batch_slots": 4,
            "serving.requests": 3,
            "kernel_looping": True,
            "serving.arrival.rate": 2.0,
        },
    )
    assert numpy_run.to_json() == python_run.to_json()
    recorded = numpy_run.to_dict()["provenance"]["overrides"]
    assert [type(v) for v in recorded.values()] == [int, int, bool, float]


def test_studies_take_numpy_grids() -> None:
    rows = studies.plan_over_contexts(W, 2 ** np.arange(12, 14), policies=("full",))
    assert [r["settings"]["serving.max_context"] for r in rows] == [4096, 8192]
    assert json.dumps([r["settings"] for r in rows])  # plain values: no numpy in the rows
    assert all(type(r["settings"]["serving.max_context"]) is int for r in rows)
    decode = studies.decode_over_batches(W, np.array([1, 4]), policies=("full",))
    assert [(r["batch_slots"], type(r["batch_slots"])) for r in decode] == [(1, int), (4, int)]
