"""Request generation, trace files and prompt buckets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.workload import KVConfig, ServingConfig
from rdu_sim.serving.buckets import prompt_bucket, prompt_buckets
from rdu_sim.serving.requests import make_requests, typical_length
from rdu_sim.serving.traces import read_trace


def serving_config(**data: Any) -> ServingConfig:
    """A validated ServingConfig from plain data (as a workload file would give it)."""
    return ServingConfig.model_validate(data)


def kv_config(**data: Any) -> KVConfig:
    """A validated KVConfig from plain data."""
    return KVConfig.model_validate(data)


def test_same_seed_same_requests_and_no_global_state() -> None:
    config = serving_config(
        requests=500,
        seed=11,
        arrival={"process": "poisson", "rate": 3},
        prompt_tokens={"dist": "lognormal", "median": 2000, "sigma": 1, "high": 8000},
        output_tokens={"dist": "uniform", "low": 5, "high": 900},
    )
    a = make_requests(config, 8)
    np.random.seed(1)  # global state must not matter
    np.random.random(10)
    b = make_requests(config, 8)
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)
    np.testing.assert_array_equal(a.output_tokens, b.output_tokens)
    assert a.arrival_s is not None and b.arrival_s is not None
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    c = make_requests(config.model_copy(update={"seed": 12}), 8)
    assert not np.array_equal(a.prompt_tokens, c.prompt_tokens)


def test_distributions_and_poisson_rate() -> None:
    config = serving_config(
        requests=20000,
        max_context=100_000,
        arrival={"process": "poisson", "rate": 4.0},
        prompt_tokens={
            "dist": "lognormal",
            "median": 2000,
            "sigma": 0.5,
            "low": 100,
            "high": 50000,
        },
        output_tokens={"dist": "uniform", "low": 10, "high": 20},
    )
    r = make_requests(config, 8)
    assert np.median(r.prompt_tokens) == pytest.approx(2000, rel=0.03)
    assert r.output_tokens.min() == 10 and r.output_tokens.max() == 20
    assert r.arrival_s is not None
    assert len(r) / r.arrival_s[-1] == pytest.approx(4.0, rel=0.03)
    assert (np.diff(r.arrival_s) >= 0).all()
    assert r.concurrency is None and not r.closed_loop


def test_closed_loop_defaults_to_batch_slots_and_all_at_once_is_time_zero() -> None:
    r = make_requests(serving_config(requests=10), 7)
    assert r.closed_loop and r.concurrency == 7
    r = make_requests(
        serving_config(requests=10, arrival={"process": "closed_loop", "concurrency": 3}), 7
    )
    assert r.concurrency == 3
    r = make_requests(serving_config(requests=10, arrival={"process": "all_at_once"}), 7)
    assert r.arrival_s is not None and (r.arrival_s == 0).all()


def test_lengths_are_clipped_to_max_context() -> None:
    r = make_requests(
        serving_config(
            requests=50,
            max_context=1000,
            prompt_tokens={"dist": "uniform", "low": 1, "high": 2000},
            output_tokens={"dist": "uniform", "low": 1, "high": 2000},
        ),
        4,
    )
    assert (r.prompt_tokens + r.output_tokens <= 1000).all()
    assert (r.prompt_tokens >= 1).all() and (r.output_tokens >= 1).all()
    assert r.prompt_tokens.max() == 999


def test_typical_length_is_the_median() -> None:
    config = serving_config(
        prompt_tokens={"dist": "lognormal", "median": 4096, "sigma": 0.8, "low": 256, "high": 65536}
    )
    assert typical_length(config.prompt_tokens) == 4096
    assert typical_length(serving_config(prompt_tokens=300).prompt_tokens) == 300
    assert (
        typical_length(
            serving_config(prompt_tokens={"dist": "uniform", "low": 10, "high": 20}).prompt_tokens
        )
        == 15
    )


def test_trace_csv_and_jsonl(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(
        "output_tokens,prompt_tokens,arrival_s,extra\n10,100,0.5,x\n20,200,0.1,y\n\n30,300,0.9,z\n"
    )
    (tmp_path / "t.jsonl").write_text(
        '{"prompt_tokens": 100, "output_tokens": 10}\n\n'
        '{"prompt_tokens": 200, "output_tokens": 20}\n'
    )
    csv = serving_config(trace="t.csv", requests=10, arrival={"process": "poisson", "rate": 1})
    r = make_requests(csv, 4, tmp_path)
    assert r.arrival_s is not None
    np.testing.assert_array_equal(r.arrival_s, [0.1, 0.5, 0.9])  # sorted by arrival
    np.testing.assert_array_equal(r.prompt_tokens, [200, 100, 300])
    r = make_requests(csv.model_copy(update={"requests": 2}), 4, tmp_path)
    assert len(r) == 2
    r = make_requests(serving_config(trace="t.jsonl"), 4, tmp_path)
    assert r.closed_loop and list(r.output_tokens) == [10, 20]


@pytest.mark.parametrize(
    ("name", "text", "line", "words"),
    [
        ("a.csv", "prompt_tokens,output_tokens\n10,5\n10,abc\n", 3, "output_tokens"),
        ("b.csv", "prompt_tokens\n10\n", 1, "lacks"),
        ("c.csv", "prompt_tokens,output_tokens\n10,5,7\n", 2, "fields"),
        (
            "d.jsonl",
            '{"prompt_tokens": 1, "output_tokens": 2}\n{"prompt_tokens": 0, "output_tokens": 2}\n',
            2,
            "prompt_tokens",
        ),
        ("e.jsonl", '{"prompt_tokens": 1, "output_tokens": 2}\nnot json\n', 2, "JSON"),
        ("f.jsonl", "[1, 2]\n", 1, "object"),
        ("g.csv", "arrival_s,prompt_tokens,output_tokens\n1,2,3\n-1,2,3\n", 3, "arrival_s"),
        ("h.csv", "arrival_s,prompt_tokens,output_tokens\n1,2,3\n,2,3\n", 3, "arrival_s"),
        ("i.jsonl", '{"prompt_tokens": 1.5, "output_tokens": 2}\n', 1, "whole number"),
        ("j.csv", "prompt_tokens,output_tokens\n", 1, "no requests"),
    ],
)
def test_bad_trace_rows_name_the_file_and_line(
    tmp_path: Path, name: str, text: str, line: int, words: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_trace(path)
    issue = info.value.issues[0]
    assert issue.file == str(path)
    assert issue.line == line
    assert words in str(info.value)


def test_missing_or_unknown_trace_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        make_requests(serving_config(trace="nope.csv"), 4, tmp_path, "w.yaml")
    (tmp_path / "t.txt").write_text("x")
    with pytest.raises(ConfigError, match="unknown format"):
        make_requests(serving_config(trace="t.txt"), 4, tmp_path, "w.yaml")
    (tmp_path / "t.csv").write_text("prompt_tokens,output_tokens\n1,2\n")
    with pytest.raises(ConfigError, match="arrival_s"):
        make_requests(
            serving_config(trace="t.csv", arrival={"process": "poisson", "rate": 1}),
            4,
            tmp_path,
            "w.yaml",
        )


def test_prompt_buckets() -> None:
    assert [prompt_bucket(t, 131072) for t in (1, 128, 129, 1000, 1025, 5000, 16385)] == [
        128,
        128,
        256,
        1024,
        2048,
        5120,
        18432,
    ]
    assert prompt_bucket(100, 64) == 100  # never above max_context (nor below the prompt)
    buckets = prompt_buckets(131072)
    assert len(buckets) == 43 and buckets[-1] == 131072
    for tokens in range(1, 131073, 97):
        b = prompt_bucket(tokens, 131072)
        assert tokens <= b and b in buckets
        assert b - tokens < max(1024, tokens / 8) or b <= 1024
