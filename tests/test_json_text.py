"""The bounded JSON parser (rdu_sim.config.json_text): integers of at most 40 digits, whether
or not the text has a run of digits long enough to need the per-integer check."""

from __future__ import annotations

import json

import pytest

from rdu_sim.config.json_text import MAX_INT_DIGITS, JsonLimitError, loads


@pytest.mark.parametrize(
    "text",
    [
        '{"timestamp": 27482, "hash_ids": [46, 47, -3, 0]}',
        "[" + "9" * MAX_INT_DIGITS + ", -" + "1" * MAX_INT_DIGITS + "]",
        '{"note": "' + "7" * 90 + '", "n": 12}',  # a long run of digits inside a string
        "[1." + "0" * 60 + "1, 2e5]",  # ... or in a float's fraction
    ],
)
def test_accepted_text_parses_as_json_does(text: str) -> None:
    assert loads(text, 8) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        "[" + "9" * (MAX_INT_DIGITS + 1) + "]",
        '{"a": "short", "b": -' + "1" * (MAX_INT_DIGITS + 5) + "}",
    ],
)
def test_an_integer_past_the_limit_is_refused(text: str) -> None:
    with pytest.raises(JsonLimitError, match=f"at most {MAX_INT_DIGITS}"):
        loads(text, 8)
