"""One trace reader for workloads and clusters: a workload's ``serving.trace`` reads the
published formats (Azure, Mooncake, BurstGPT) a cluster reads, with one rule for repeated
header columns and ASCII digits, and a cluster filters and groups by extra Mooncake fields.

Every file is written here with the formats' real field names; nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rdu_sim import api
from rdu_sim.cluster.traffic import class_labels, replay
from rdu_sim.config.cluster import ClassesConfig, TrafficConfig
from rdu_sim.config.errors import ConfigError
from rdu_sim.serving.traces import read_trace
from rdu_sim.serving.traces.published import read_table

AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,4808,10\n"
    "2023-11-16 18:15:50.9951690,3180,8\n"
    "2023-11-16 18:15:51.0000000,0,0\n"
    "2023-11-16 18:15:53.1000000,91,2\n"
)
BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,GPT-4,1087,0,1087,Conversation log\n"
    "46,GPT-4,210,96,306,API log\n"
)
MOONCAKE_ROWS = [
    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]},
    {"timestamp": 30535, "input_length": 1200, "output_length": 180, "hash_ids": [46]},
    {"timestamp": 31000, "input_length": 700, "output_length": 0, "hash_ids": [50]},
    {"timestamp": 40000, "input_length": 512, "output_length": 20},
]
KINDS = ["chat", "tool", "chat", "chat"]
TIERS = [2, 1, 1, 2]


def _mooncake(tmp_path: Path, name: str = "m.jsonl", extra: bool = True) -> Path:
    path = tmp_path / name
    rows = [
        {**row, "type": kind, "tier": tier} if extra else row
        for row, kind, tier in zip(MOONCAKE_ROWS, KINDS, TIERS, strict=True)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("name", "text", "skipped", "prompts", "arrivals"),
    [
        ("a.csv", AZURE, 1, [4808, 3180, 91], [0.0, 4.314579, 6.41941]),
        ("b.csv", BURSTGPT, 1, [472, 210], [0.0, 41.0]),
        ("m.jsonl", "", 1, [6955, 1200, 512], [0.0, 3.053, 12.518]),
    ],
    ids=["azure", "burstgpt", "mooncake"],
)
def test_a_workload_trace_reads_each_published_format_as_a_cluster_does(
    tmp_path: Path,
    name: str,
    text: str,
    skipped: int,
    prompts: list[int],
    arrivals: list[float],
) -> None:
    path = _mooncake(tmp_path) if name.endswith("jsonl") else _write(tmp_path, name, text)
    trace = read_trace(path)
    assert trace.skipped == skipped  # zero-token rows: failed requests, counted, not served
    assert trace.prompt_tokens.tolist() == prompts
    assert trace.arrival_s is not None
    np.testing.assert_allclose(trace.arrival_s, arrivals, atol=1e-7, rtol=0)
    table = read_table(path, "auto")  # the cluster's view: the same reader, the same rows
    assert trace.format == table.format and trace.skipped == table.skipped
    np.testing.assert_array_equal(trace.prompt_tokens, table.prompt_tokens)
    np.testing.assert_array_equal(trace.output_tokens, table.output_tokens)
    np.testing.assert_array_equal(trace.arrival_s, table.arrival_s)


def test_trace_format_names_the_format_when_the_file_does_not(tmp_path: Path) -> None:
    assert read_trace(_mooncake(tmp_path, "requests.log")).format == "mooncake"  # its first line
    path = _write(tmp_path, "rows.log", '{"prompt_tokens": 5, "output_tokens": 2}\n')
    assert read_trace(path).format == "jsonl"  # the project's own first line
    with pytest.raises(ConfigError, match=r"unknown format '\.log'.*or a published trace"):
        read_trace(_write(tmp_path, "rows.log", "when,how_many\n1,2\n"))
    assert read_trace(_mooncake(tmp_path, "m.csv"), format="mooncake").format == "mooncake"
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_trace(_write(tmp_path, "b.csv", BURSTGPT), format="mooncake")
    with pytest.raises(ConfigError, match="lacks column"):
        read_trace(_write(tmp_path, "a.csv", AZURE), format="csv")


def test_a_run_replays_a_mooncake_trace_and_trace_format_needs_a_trace(tmp_path: Path) -> None:
    path = _mooncake(tmp_path)
    result = api.run("llama3.1-8b-1socket", [f"serving.trace={path}", "serving.requests=8"])
    requests = result.requests()
    assert requests["prompt_tokens"].tolist() == [6955, 1200, 512]  # one row a failed request
    assert requests["arrival_s"].tolist() == pytest.approx([0.0, 3.053, 12.518], abs=1e-9)
    forced = api.run(
        "llama3.1-8b-1socket",
        [f"serving.trace={path}", "serving.requests=8", "serving.trace_format=mooncake"],
    )
    assert forced.to_dict()["makespan_s"] == result.to_dict()["makespan_s"]
    with pytest.raises(ConfigError, match=r"serving\.trace_format: 'azure' names the format"):
        api.load("llama3.1-8b-1socket", ["serving.trace_format=azure"])


def test_a_shipped_trace_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    scenario = api.load("llama3.1-8b-1socket", ["serving.trace=mooncake-300"])
    assert scenario.workload.serving.trace == "mooncake-300"
    result = api.run(scenario, ["serving.requests=4"])
    assert result.requests()["prompt_tokens"].tolist() == [1186, 650, 1624, 5520]


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens,ContextTokens\n", "ContextTokens"),
        (
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type,Model\n",
            "Model",
        ),
        ("c.csv", "arrival_s,prompt_tokens,output_tokens,note,note\n", "note"),
    ],
    ids=["azure", "burstgpt", "project"],
)
def test_every_csv_reader_refuses_a_repeated_column(
    tmp_path: Path, name: str, text: str, where: str
) -> None:
    path = _write(tmp_path, name, text + ",".join(["1"] * text.count(",")) + ",1\n")
    for read in (lambda: read_trace(path), lambda: read_table(path, "auto")):
        with pytest.raises(ConfigError) as caught:
            read()
        assert f"{path}:1: CSV header names column(s) ['{where}'] more than once" in str(
            caught.value
        )


@pytest.mark.parametrize(
    ("name", "text", "column"),
    [
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n２０２３-11-16 18:15:46,5,2\n",
            "TIMESTAMP",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,５,2\n",
            "ContextTokens",
        ),
        (
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "٥,ChatGPT,472,18,490,Conversation log\n",
            "Timestamp",
        ),
        ("m.jsonl", '{"timestamp": 1, "input_length": "١٢", "output_length": 2}\n', "input_length"),
    ],
    ids=["azure-time", "azure-tokens", "burstgpt-time", "mooncake-tokens"],
)
def test_every_reader_reads_ascii_digits_only(
    tmp_path: Path, name: str, text: str, column: str
) -> None:
    path = _write(tmp_path, name, text)
    line = text.count("\n")  # the last line holds the digits
    for read in (lambda: read_trace(path), lambda: read_table(path, "auto")):
        with pytest.raises(ConfigError) as caught:
            read()
        assert f"{path}:{line}: {column}:" in str(caught.value)


@pytest.mark.parametrize(
    ("first", "row", "key"),
    [
        (
            json.dumps(MOONCAKE_ROWS[0]),
            '{"timestamp": 1, "input_length": 12, "output_length": 2, "input_length": 900}',
            "input_length",
        ),
        (
            '{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 1}',
            '{"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 2, "prompt_tokens": 7}',
            "prompt_tokens",
        ),
        (  # a key of an object inside a row: not the row's field
            '{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 1}',
            '{"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 2, "meta": {"a": 1, "a": 2}}',
            "a",
        ),
    ],
    ids=["mooncake", "project", "nested"],
)
def test_every_jsonl_reader_refuses_a_key_given_twice_in_a_row(
    tmp_path: Path, first: str, row: str, key: str
) -> None:
    path = _write(tmp_path, "t.jsonl", first + "\n" + row + "\n")
    for read in (lambda: read_trace(path), lambda: read_table(path, "auto")):
        with pytest.raises(ConfigError) as caught:
            read()
        message = f"{path}:2: duplicate key '{key}'; a key may appear once in an object (JSON "
        assert message + "keeps the last)" in str(caught.value)


def test_a_cluster_filters_and_groups_by_an_extra_mooncake_field(tmp_path: Path) -> None:
    table = read_table(_mooncake(tmp_path), "auto")
    assert table.columns["type"].tolist() == ["chat", "tool", "chat"]  # the failed row is out
    assert table.columns["tier"].tolist() == ["2", "1", "2"]
    chats = replay(
        table, TrafficConfig.model_validate({"trace": "t", "filter": {"type": "chat"}}), "c"
    )
    assert chats.prompt_tokens.tolist() == [6955, 512]
    assert chats.summary.filtered_out == 1
    tier2 = replay(table, TrafficConfig.model_validate({"trace": "t", "filter": {"tier": 2}}), "c")
    assert tier2.prompt_tokens.tolist() == [6955, 512]  # a YAML number matches the JSON one
    everything = replay(table, TrafficConfig.model_validate({"trace": "t"}), "c")
    labels = class_labels(
        everything, ClassesConfig.model_validate({"by": "column", "column": "type"}), "c"
    )
    assert labels is not None
    assert labels.names == ("chat", "tool") and labels.values.tolist() == ["chat", "tool", "chat"]
    plain = read_table(_mooncake(tmp_path, "plain.jsonl", extra=False), "auto")
    with pytest.raises(ConfigError, match=r"traffic.filter.type: the mooncake trace has no column"):
        replay(plain, TrafficConfig.model_validate({"trace": "t", "filter": {"type": "chat"}}), "c")
