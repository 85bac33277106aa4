"""Write the fuzz corpus: >= 200 broken config files that must each fail with exit status 2.

Usage (from the repository root): python tests/fuzz/make_corpus.py [--seed N]

Deterministic for a given seed and rdu-sim version. Mutations start from the shipped
workloads and hardware files (plus workloads with custom architectures inline) and break
them in the ways people and tools break YAML: wrong types, missing and unknown keys, huge,
negative, denormal and non-finite numbers, bad units (and units whose case could mean bits
or bytes, and unit strings built to make a regular expression backtrack), wrong nesting,
object-construction tags, duplicate keys, integers in any base too long to print, a
hardware path pointing nowhere, and raw text nobody meant as a config (binary garbage,
empty files, 10,000-level nesting, alias bombs, a sweep spec whose axis is an alias bomb).
Request traces (trace-*.csv, trace-*.jsonl) break the trace reader (non-ASCII digits,
text that is not UTF-8, a field over the csv module's limit, a quoted newline, JSON nested
deep, arrivals past the serving clock), each with a workload (wl-trace-*) that uses it.

Every file is checked in-process before it is kept: it must be rejected with a ConfigError
(with `--set serving.requests=1` too, for workload files), so the corpus never holds a file
that happens to be valid. A mutation that raises anything else stops the script: that is a
bug in rdu_sim.config to fix, not a file to keep.

File names say what was done: wl-* are workload-shaped, hw-* hardware-shaped, raw-* neither.
`bad_overrides.yaml` beside this script lists `--set` strings that must each be rejected.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from rdu_sim.cli.check_cmd import check_file
from rdu_sim.config import ConfigError
from rdu_sim.config.hardware_file import read_hardware, validate_hardware
from rdu_sim.config.loader import MAX_DEPTH
from rdu_sim.models import get_model
from rdu_sim.scenario import load_scenario
from rdu_sim.serving.requests import make_requests

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OVERRIDES_NAME = "bad_overrides.yaml"
RUN_OVERRIDE = "serving.requests=1"  # what the test adds when it runs a workload file

Data = dict[str, Any]
Path_ = tuple[Any, ...]

WRONG_TYPES: list[Any] = [
    [1, 2],
    {"x": 1},
    "not-a-number",
    True,
    False,
    None,
    3.5,
    -7,
    "",
    "1e3",
    [],
    {},
]
BAD_NUMBERS: list[Any] = [
    10**30,
    -(10**30),
    1e308,
    -1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    2**63,
    2**64,
    -1,
    0,
    -0.0,
    1e-300,
]
BAD_UNIT_TEMPLATES = [
    "{n} parsecs",
    "{n} TB/s/s",
    "{n}{n} GiB",
    "-{n} TB/s",
    "{n} GHz",
    "{n} ns",
    "fast",
    "GiB",
    "{n},5 GB",
    "0x10 GiB",
    "1e999 GB",
    "{n} TFLOP",
    "{n} Tb/s",
    "{n} gigabytes",
    "∞ GiB",
    "{n} µ",
    "NaN TB/s",
    "{n} GiB extra",
    "{n}",
    "{n} TiB/s per socket",
]
TAGS = [
    '!!python/object/apply:os.system ["true"]',
    "!!python/object/new:builtins.dict {}",
    "!!python/name:builtins.eval",
    "!!python/module:os",
    '!!python/object/apply:subprocess.check_output [["id"]]',
    "!!python/tuple [1, 2]",
    "!!binary aGVsbG8=",
    "!!set {a, b}",
    "!!timestamp 2001-12-14t21:59:43.10-05:00",
    "!custom {a: 1}",
    "!!float not-a-float",
]


def _hardware_paths(hw_dir: str) -> list[str]:
    """`hardware:` values that point nowhere useful (hw_dir is hw_configs/ seen from the file)."""
    repo = hw_dir.removesuffix("hw_configs")
    return [
        f"{hw_dir}/nowhere.yaml",
        "/nonexistent/sn40l.yaml",
        hw_dir,
        "/dev/null",
        "/dev/zero",
        ".",
        "",
        "a\0b.yaml",
        "x" * 5000,
        f"{repo}workloads/llama3.1-8b-1socket.yaml",
        f"{repo}README.md",
        f"{repo}pyproject.toml",
        "~/sn40l.yaml",
        "https://example.com/sn40l.yaml",
    ]


JUNK_KEYS = [
    "hbm_bandwith",
    "batch_slot",
    "tp ",
    "Serving",
    "kv-policy",
    "__class__",
    "1",
    "ffn_intermediate_size",
    "num_layers",
    "seed ",
    "model_name",
    "sockets_per_nodes",
]


def _base_workloads(hw_dir: str, corpus: Path) -> dict[str, Data]:
    """Shipped workloads (hardware and config.json paths rewritten for the corpus folder)
    and custom models."""
    bases: dict[str, Data] = {}
    for path in sorted((REPO / "workloads").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        data["hardware"] = f"{hw_dir}/{Path(data['hardware']).name}"
        model = data.get("model")
        if isinstance(model, dict) and "config_json" in model:
            model["config_json"] = os.path.relpath(path.parent / model["config_json"], corpus)
        bases[path.stem] = data
    for name, hardware, tp in (
        ("llama-3.1-8b", "sn40l.yaml", 1),
        ("deepseek-r1", "sn40l-16.yaml", 16),
    ):
        model = get_model(name).model_dump()
        model["name"] = f"custom-{name}"
        bases[f"custom-{name}"] = {
            "name": f"custom-{name}",
            "hardware": f"{hw_dir}/{hardware}",
            "model": model,
            "parallelism": {"tp": tp},
            "serving": {"batch_slots": 4, "max_context": 4096, "requests": 10},
        }
    return bases


def _base_hardware() -> dict[str, Data]:
    return {
        path.stem: yaml.safe_load(path.read_text())
        for path in sorted((REPO / "hw_configs").glob("*.yaml"))
    }


def _paths(data: Any, path: Path_ = ()) -> list[tuple[Path_, Any]]:
    """Every (path, value) in a document, parents before children."""
    found: list[tuple[Path_, Any]] = [(path, data)]
    if isinstance(data, dict):
        for key, value in data.items():
            found.extend(_paths(value, (*path, key)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found.extend(_paths(value, (*path, index)))
    return found


def _get(data: Any, path: Path_) -> Any:
    for part in path:
        data = data[part]
    return data


def _set(data: Any, path: Path_, value: Any) -> None:
    _get(data, path[:-1])[path[-1]] = value


def _leaves(data: Data) -> list[Path_]:
    return [p for p, v in _paths(data) if p and not isinstance(v, dict | list)]


def _mappings(data: Data) -> list[Path_]:
    return [p for p, v in _paths(data) if isinstance(v, dict)]


def _typo(rng: random.Random, key: str) -> str:
    """A plausible misspelling: drop, double or swap a letter, or change case."""
    if len(key) < 2:
        return key + "x"
    i = rng.randrange(len(key) - 1)
    choice = rng.randrange(4)
    if choice == 0:
        return key[:i] + key[i + 1 :]
    if choice == 1:
        return key[:i] + key[i] + key[i:]
    if choice == 2:
        return key[:i] + key[i + 1] + key[i] + key[i + 2 :]
    return key.upper() if key.islower() else key + "_"


# --- mutations of parsed documents: each returns the new data (or None if not applicable) ---


def m_misspell(rng: random.Random, data: Data) -> Data | None:
    doc = copy.deepcopy(data)
    candidates = [p for p in _paths(doc) if p[0] and isinstance(p[0][-1], str)]
    path, _ = rng.choice(candidates)
    parent = _get(doc, path[:-1])
    typo = _typo(rng, path[-1])
    if typo in parent:
        return None
    parent[typo] = parent.pop(path[-1])
    return doc


def m_unknown_key(rng: random.Random, data: Data) -> Data | None:
    doc = copy.deepcopy(data)
    parent = _get(doc, rng.choice(_mappings(doc)))
    parent[rng.choice(JUNK_KEYS)] = rng.choice([1, "x", {"a": 1}, [1]])
    return doc


def m_drop_key(rng: random.Random, data: Data) -> Data | None:
    doc = copy.deepcopy(data)
    path, _ = rng.choice([p for p in _paths(doc) if p[0] and isinstance(p[0][-1], str)])
    del _get(doc, path[:-1])[path[-1]]
    return doc


def m_wrong_type(rng: random.Random, data: Data) -> Data | None:
    doc = copy.deepcopy(data)
    _set(doc, rng.choice(_leaves(doc)), copy.deepcopy(rng.choice(WRONG_TYPES)))
    return doc


def m_bad_number(rng: random.Random, data: Data) -> Data | None:
    doc = copy.deepcopy(data)
    numeric = [
        p
        for p in _leaves(doc)
        if isinstance(_get(doc, p), int | float) and not isinstance(_get(doc, p), bool)
    ]
    if not numeric:
        return None
    _set(doc, rng.choice(numeric), rng.choice(BAD_NUMBERS))
    return doc


def m_bad_unit(rng: random.Random, data: Data) -> Data | None:
    doc = copy.deepcopy(data)
    quantities = [
        p
        for p in _leaves(doc)
        if isinstance(_get(doc, p), str)
        and any(c.isdigit() for c in _get(doc, p))
        and " " in _get(doc, p)
    ]
    if not quantities:
        return None
    path = rng.choice(quantities)
    number = _get(doc, path).split()[0]
    _set(doc, path, rng.choice(BAD_UNIT_TEMPLATES).format(n=number))
    return doc


def m_wrong_nesting(rng: random.Random, data: Data) -> Data | None:
    doc = copy.deepcopy(data)
    path, value = rng.choice([(p, v) for p, v in _paths(doc) if p])
    how = rng.randrange(4)
    if how == 0:  # wrapped in a list
        _set(doc, path, [value])
    elif how == 1:  # moved to the top level
        del _get(doc, path[:-1])[path[-1]]
        doc[str(path[-1]) + ("_" if path[-1] in doc else "")] = value
    elif how == 2:  # pushed one level down
        _set(doc, path, {str(path[-1]): value})
    else:  # a mapping flattened to its first value
        if not isinstance(value, dict) or not value:
            return None
        _set(doc, path, next(iter(value.values())))
    return doc


TINY_RATES = [5e-324, 1e-300, 1e-9, "5e-324 TB/s", "0.5 B/s", "1e-300 TFLOP/s"]


def m_tiny_rate(rng: random.Random, data: Data) -> Data | None:
    """A rate (a unit string ending in /s, or an efficiency) set to a denormal or below 1/s."""
    doc = copy.deepcopy(data)
    rates = [
        p
        for p in _leaves(doc)
        if (isinstance(_get(doc, p), str) and _get(doc, p).endswith("/s"))
        or p[-1] in ("efficiency", "max_gemm_efficiency", "usable_fraction")
    ]
    if not rates:
        return None
    _set(doc, rng.choice(rates), rng.choice(TINY_RATES))
    return doc


DATA_MUTATIONS: dict[str, Callable[[random.Random, Data], Data | None]] = {
    "misspell": m_misspell,
    "unknown-key": m_unknown_key,
    "drop-key": m_drop_key,
    "wrong-type": m_wrong_type,
    "bad-number": m_bad_number,
    "bad-unit": m_bad_unit,
    "nesting": m_wrong_nesting,
    "tiny-rate": m_tiny_rate,
}


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000)


# --- mutations of text ---


def t_tag(rng: random.Random, data: Data) -> str | None:
    lines = _dump(data).splitlines()
    scalar_lines = [
        i for i, line in enumerate(lines) if ": " in line and not line.rstrip().endswith(":")
    ]
    i = rng.choice(scalar_lines)
    key = lines[i].split(": ", 1)[0]
    lines[i] = f"{key}: {rng.choice(TAGS)}"
    return "\n".join(lines) + "\n"


def t_truncate(rng: random.Random, data: Data) -> str | None:
    text = _dump(data)
    return text[: rng.randrange(1, max(2, len(text) * 2 // 3))]


def _is_int_line(line: str) -> bool:
    return ": " in line and line.split(": ", 1)[1].strip().lstrip("-").isdigit()


def _replace_value(
    rng: random.Random, data: Data, selects: Callable[[str], bool], value: str
) -> str | None:
    """The document's text with one line chosen by `selects` given `value` (None if none)."""
    lines = _dump(data).splitlines()
    candidates = [i for i, line in enumerate(lines) if selects(line)]
    if not candidates:
        return None
    i = rng.choice(candidates)
    lines[i] = f"{lines[i].split(': ', 1)[0]}: {value}"
    return "\n".join(lines) + "\n"


def t_huge_int_text(rng: random.Random, data: Data) -> str | None:
    huge = rng.choice(["9" * 5000, "-" + "9" * 400, "1" + "0" * 4299])
    return _replace_value(rng, data, _is_int_line, huge)


def t_garbage_splice(rng: random.Random, data: Data) -> str | None:
    text = _dump(data).encode()
    at = rng.randrange(len(text))
    junk = rng.randbytes(rng.randrange(1, 64))
    return (text[:at] + junk + text[at:]).decode("utf-8", errors="surrogateescape")


def t_duplicate_key(rng: random.Random, data: Data) -> str | None:
    """A `key: value` line repeated (with another value) right below itself."""
    lines = _dump(data).splitlines()
    scalar_lines = [
        i for i, line in enumerate(lines) if ": " in line and not line.lstrip().startswith("-")
    ]
    i = rng.choice(scalar_lines)
    key = lines[i].split(": ", 1)[0]
    lines.insert(i + 1, f"{key}: {rng.choice(['1', 'x', '2 GiB', '[1]'])}")
    return "\n".join(lines) + "\n"


def t_unit_case(rng: random.Random, data: Data) -> str | None:
    """A unit whose case decides bits or bytes written in another case (gb/s, gib, MB/S)."""
    text = _dump(data)
    units = [u for u in ("TB/s", "GB/s", "GiB", "MiB", "KiB", "GB") if f" {u}" in text]
    if not units:
        return None
    unit = rng.choice(units)
    return text.replace(f" {unit}", f" {rng.choice([unit.lower(), unit.upper()])}", 1)


def t_unit_bomb(rng: random.Random, data: Data) -> str | None:
    """A quantity replaced by a digit, a long run of spaces and a stray character."""
    units = ("B/s", "iB", "Hz", "FLOP", " us", " ns")
    bomb = f"'1{' ' * rng.randrange(10_000, 60_000)}{rng.choice('x!1é')}'"
    return _replace_value(rng, data, lambda line: any(u in line for u in units), bomb)


def t_long_int_literal(rng: random.Random, data: Data) -> str | None:
    """An integer too long to print, in a base Python converts without a limit."""
    literal = rng.choice(
        ["0x" + "f" * 5000, "0b" + "1" * 3000, ":".join(["59"] * 2000), "0o" + "7" * 2000]
    )
    return _replace_value(rng, data, _is_int_line, literal)


TEXT_MUTATIONS: dict[str, Callable[[random.Random, Data], str | None]] = {
    "tag": t_tag,
    "truncated": t_truncate,
    "huge-int": t_huge_int_text,
    "garbage": t_garbage_splice,
    "dup-key": t_duplicate_key,
    "unit-case": t_unit_case,
    "unit-bomb": t_unit_bomb,
    "long-int": t_long_int_literal,
}


def _raw_documents(rng: random.Random) -> list[tuple[str, bytes]]:
    """Files that are not a mutated config at all."""
    deep_list = "[" * 10_000 + "]" * 10_000
    deep_map = "a: " * 0 + "".join("{a: " for _ in range(10_000)) + "1" + "}" * 10_000
    over_depth = "model:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(MAX_DEPTH + 8))
    over_depth += "  " * (MAX_DEPTH + 9) + "v: 1\n"
    laughs = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    laughs += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    laughs += ["hardware: sn40l.yaml", "model: *a9"]
    sweep_laughs = ["name: bomb", "base: ../../../workloads/llama3.1-8b-1socket.yaml"]
    sweep_laughs += [line.replace("a0:", "x0:") for line in laughs[:1]]
    sweep_laughs += [f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    sweep_laughs += ["axes:", "  serving.batch_slots: *a8"]
    texts: list[tuple[str, str | bytes]] = [
        ("empty", ""),
        ("whitespace", "   \n\n\t\n"),
        ("comment-only", "# nothing here\n"),
        ("document-marker", "---\n"),
        ("end-marker", "...\n"),
        ("null", "~\n"),
        ("empty-list", "[]\n"),
        ("empty-map", "{}\n"),
        ("number", "42\n"),
        ("string", '"just a string"\n'),
        ("list-of-workloads", "- hardware: a\n- model: b\n"),
        ("two-documents", "hardware: a.yaml\nmodel: llama-3.1-8b\n---\nsocket: {}\n"),
        ("deep-list", deep_list),
        ("deep-map", deep_map),
        ("over-depth", over_depth),
        ("alias-bomb", "\n".join(laughs) + "\n"),
        ("undefined-alias", "hardware: *nowhere\nmodel: llama-3.1-8b\n"),
        ("unclosed-quote", "hardware: 'sn40l.yaml\nmodel: llama-3.1-8b\n"),
        ("unclosed-flow", "hardware: sn40l.yaml\nmodel: {family: llama\n"),
        ("tab-indent", "socket:\n\tclock: 1 GHz\nsystem: {}\n"),
        ("bad-indent", "socket:\n  clock: 1 GHz\n   pcu: 3\nsystem: {}\n"),
        ("unhashable-key", "? [a, b]\n: 1\nhardware: x\n"),
        ("long-key", "k" * 20_000 + ": 1\nmodel: x\n"),
        ("long-line", "hardware: " + "y" * 50_000 + "\nmodel: x\n"),
        ("only-unknown", "frobnicate: 1\nwidgets: [1, 2]\n"),
        ("nul-bytes", b"hardware: a\x00b\nmodel: llama-3.1-8b\n"),
        ("invalid-utf8", b"hardware: \xff\xfe\xfd\nmodel: llama\n"),
        ("utf16", "hardware: a.yaml\nmodel: x\n".encode("utf-16")),
        ("control-chars", "hardware: a\x07\x1b[31m\nmodel: x\n"),
        ("python-apply-top", '!!python/object/apply:os.system ["true"]\n'),
        ("sweep-alias-bomb", "\n".join(sweep_laughs) + "\n"),
        ("sweep-huge-int-axis", "base: x.yaml\naxes:\n  serving.seed: [0x" + "f" * 4000 + "]\n"),
        ("duplicate-top-keys", "hardware: a.yaml\nmodel: llama-3.1-8b\nmodel: x\n"),
        ("python-object-top", "!!python/object:builtins.object {}\n"),
    ]
    for i in range(10):
        size = rng.randrange(16, 4096)
        texts.append((f"random-bytes-{i}", rng.randbytes(size)))
    return [
        (name, text.encode("utf-8", errors="surrogateescape") if isinstance(text, str) else text)
        for name, text in texts
    ]


TRACE_HEADER = "arrival_s,prompt_tokens,output_tokens\n"


def _traces() -> list[tuple[str, bytes]]:
    """(file name, bytes) of request traces the reader must refuse, one per class."""
    texts: list[tuple[str, str | bytes]] = [
        ("arabic-digits.csv", TRACE_HEADER + "0,١٢,5\n"),
        ("superscript-digits.csv", TRACE_HEADER + "0,12,5²\n"),
        ("arabic-arrival.csv", TRACE_HEADER + "١,12,5\n"),
        ("latin1.csv", (TRACE_HEADER + "0,caf\xe9,1\n0,12,5\n").encode("latin-1")),
        ("utf16.jsonl", '{"prompt_tokens": 1, "output_tokens": 2}\n'.encode("utf-16")),
        ("nul.csv", TRACE_HEADER.encode() + b"0,1\x002,3\n"),
        ("wide-field.csv", TRACE_HEADER + '0,1,"' + "9" * 140_000 + '"\n'),
        ("quoted-newline.csv", TRACE_HEADER + '0,"12\n34",5\n1,2,3\n'),
        ("bad-quote.csv", TRACE_HEADER + '0,"12,5\n'),
        ("duplicate-column.csv", "prompt_tokens,output_tokens,prompt_tokens\n1,2,3\n"),
        ("header-only.csv", TRACE_HEADER),
        ("late-arrival.csv", TRACE_HEADER + "1e9,1,1\n0,1,1\n"),
        ("deep.jsonl", "[" * 5000 + "]" * 5000 + "\n"),
        ("deep-object.jsonl", '{"a":' * 5000 + "1" + "}" * 5000 + "\n"),
        ("huge-int.jsonl", '{"prompt_tokens": ' + "9" * 5000 + ', "output_tokens": 1}\n'),
        ("nan.jsonl", '{"prompt_tokens": 1, "output_tokens": 1, "arrival_s": NaN}\n'),
        ("bool.jsonl", '{"prompt_tokens": true, "output_tokens": 1}\n'),
        ("array.jsonl", "[1, 2, 3]\n"),
        ("unknown-suffix.tsv", "prompt_tokens\toutput_tokens\n1\t2\n"),
    ]
    return [(n, t.encode() if isinstance(t, str) else t) for n, t in texts]


def _rejected(path: Path, workload: bool) -> bool:
    """True when the file fails `check` (and `run --set serving.requests=1`) as bad input."""
    try:
        check_file(path)
    except ConfigError:
        pass
    else:
        return False
    if workload:  # what `run` reads before it simulates: the scenario and the requests
        try:
            scenario = load_scenario(path, [RUN_OVERRIDE])
            serving = scenario.workload.serving
            make_requests(serving, 1, scenario.base_dir, scenario.workload_file)
        except ConfigError:
            return True
        return False
    return True


def _bad_overrides(rng: random.Random) -> list[str]:
    """`--set` strings that must each be refused on a shipped workload."""
    candidates = [
        "serving.batch_slot=4",
        "serving.batch_slots=0",
        "serving.batch_slots=-1",
        "serving.batch_slots=autoo",
        "serving.requests=0",
        "serving.requests=true",
        "serving.requests=1e99",
        "serving.max_context=999999999",
        "parallelism.tp=3",
        "parallelism.tp=0",
        "parallelism.tpp=2",
        "kv.policy=lru",
        "kv.budget=-5",
        "kv.kernel_size=4",
        "model=gpt-5",
        "model.layers=0",
        "model.heads=7",
        "model.family=gpt",
        "hardware=nowhere.yaml",
        "hardware=",
        "dtypes.kv=fp7",
        "hw.socket.hbm.bandwith=2 TB/s",
        "hw.socket.hbm.bandwidth=-1 TB/s",
        "hw.socket.hbm.capacity=0 GiB",
        "hw.socket.hbm.capacity=64 GiBs",
        "hw.socket.hbm.latency=1.6 GB",
        "hw.system.sockets=0",
        "hw.socket=3",
        "hw.socket.pcu.count=1.5",
        "hw.system.topology=mesh",
        "serving.seed=-1",
        "serving=[1, 2]",
        "serving.requests.x=1",
        "noequals",
        "=5",
        "serving..seed=1",
        "serving.arrival.process=poisson",
        "serving.prompt_tokens={dist: zipf}",
        "kernel_looping=maybe",
        "engine.max_events=1",
        "serving.requests=" + "9" * 50,
        "kv={policy: snapstream, budget: 10}",
        "hw.system.intra_node_link.bandwidth=400 gb/s",
        "hw.socket.hbm.bandwidth=1.8 TB/S",
        "hw.socket.hbm.capacity=64 gib",
        "hw.socket.hbm.bandwidth=5e-324",
        "hw.socket.pcu.peak_flops=1e-300 TFLOP/s",
        "hw.socket.hbm.efficiency=1e-300",
        "hw.socket.pcu.count=1",
        "hw.socket.usable_fraction=1e-9",
        "serving.requests=" + "[" * 1000 + "]" * 1000,
        "serving.requests=0x" + "f" * 5000,
        "serving.seed=" + ":".join(["59"] * 3000),
        "serving.requests={a: 1, a: 2}",
        "hw.socket.hbm.latency=1" + " " * 5000 + "x",
        ".".join(["serving"] * 100) + "=1",
    ]
    rng.shuffle(candidates)
    workload = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
    kept = []
    for override in candidates:
        try:
            load_scenario(workload, [override])
        except ConfigError:
            kept.append(override)
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=20241122)
    parser.add_argument("--per-base", type=int, default=20, help="mutated files per base document")
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE,
        help="folder for corpus/ and bad_overrides.yaml (default: beside this)",
    )
    parser.add_argument(
        "--min-files", type=int, default=200, help="fail (exit 1) if fewer files were written"
    )
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    corpus = args.out / "corpus"
    overrides_file = args.out / OVERRIDES_NAME
    hw_dir = os.path.relpath(REPO / "hw_configs", corpus)

    corpus.mkdir(parents=True, exist_ok=True)
    for old in corpus.iterdir():
        old.unlink()

    written: list[str] = []

    def write(name: str, payload: bytes, workload: bool, suffix: str = ".yaml") -> bool:
        path = corpus / f"{name}{suffix}"
        path.write_bytes(payload)
        if _rejected(path, workload):
            written.append(path.name)
            return True
        path.unlink()
        return False

    workloads = _base_workloads(hw_dir, corpus)
    bases = [("wl", name, data, True) for name, data in workloads.items()]
    bases += [("hw", name, data, False) for name, data in _base_hardware().items()]
    mutations = [*DATA_MUTATIONS, *TEXT_MUTATIONS]
    for prefix, base_name, data, workload in bases:
        kept = attempts = 0
        while kept < args.per_base and attempts < args.per_base * 20:
            attempts += 1
            kind = mutations[attempts % len(mutations)]  # every kind in turn
            if kind in DATA_MUTATIONS:
                mutated = DATA_MUTATIONS[kind](rng, data)
                text = None if mutated is None else _dump(mutated)
            else:
                text = TEXT_MUTATIONS[kind](rng, data)
            if text is None:
                continue
            name = f"{prefix}-{base_name}-{kind}-{kept:02d}"
            if write(name, text.encode("utf-8", errors="surrogateescape"), workload):
                kept += 1
    for i, hardware in enumerate(_hardware_paths(hw_dir)):
        doc = copy.deepcopy(workloads["llama3.1-8b-1socket"])
        doc["hardware"] = hardware
        if not write(f"wl-hardware-path-{i:02d}", _dump(doc).encode(), True):
            print(f"hardware path {hardware[:40]!r} was not rejected", file=sys.stderr)
    for trace_name, payload in _traces():
        stem, suffix = os.path.splitext(trace_name)
        (corpus / f"trace-{trace_name}").write_bytes(payload)
        doc = copy.deepcopy(workloads["llama3.1-8b-1socket"])
        doc["serving"]["trace"] = f"trace-{trace_name}"
        if not write(f"wl-trace-{stem}", _dump(doc).encode(), True):
            print(f"trace {trace_name!r} was not rejected", file=sys.stderr)
        elif suffix in (".csv", ".jsonl") and not _rejected(corpus / f"trace-{trace_name}", False):
            print(f"trace {trace_name!r} was not rejected by check", file=sys.stderr)
    for name, payload in _raw_documents(rng):
        if not write(f"raw-{name}", payload, False):
            print(f"raw document {name!r} was not rejected", file=sys.stderr)

    overrides = _bad_overrides(rng)
    overrides_file.write_text(
        "# --set strings that rdu-sim must refuse (exit 2). Written by make_corpus.py.\n"
        + _dump(overrides)
    )
    # Sanity: the shipped hardware still validates, so failures above are the mutations'.
    for path in sorted((REPO / "hw_configs").glob("*.yaml")):
        data, lines = read_hardware(path)  # an overlay merged over the file it extends
        validate_hardware(data, str(path), lines)  # either kind (SN40L or kind: gpu)
    print(
        f"wrote {len(written)} files to {corpus} and {len(overrides)} overrides to {overrides_file}"
    )
    return 0 if len(written) >= args.min_files else 1


if __name__ == "__main__":
    sys.exit(main())
