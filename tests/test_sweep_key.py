"""Point keys: sha256 of the fully-resolved config, whatever the spelling or axis order.

Resume trusts these keys: a stored row is reused only for an identical simulation input, so
the key must change with anything simulated and nothing else.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from rdu_sim.scenario import load_scenario
from rdu_sim.sweep import expand, load_spec
from rdu_sim.sweep.expand import resolve
from rdu_sim.sweep.key import canonical_json, config_key, resolved_config

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"


def keys_by_values(tmp_path: Path, name: str, body: str) -> dict[tuple[object, float], str]:
    path = tmp_path / name
    path.write_text(f"base: {BASE}\n" + textwrap.dedent(body).lstrip("\n"))
    return {
        (p.scenario.workload.serving.batch_slots, p.scenario.hardware.socket.hbm.bandwidth): p.key
        for p in expand(load_spec(path)).points
    }


def test_key_ignores_axis_order_and_spelling(tmp_path: Path) -> None:
    first = keys_by_values(
        tmp_path,
        "a.yaml",
        """
        axes:
          serving.batch_slots: [1, 2]
          hw.socket.hbm.bandwidth: ["1.6 TB/s", "2 TB/s"]
        """,
    )
    second = keys_by_values(
        tmp_path,
        "b.yaml",
        """
        axes:
          hw.socket.hbm.bandwidth: ["1600 GB/s", "2000 GB/s"]
          serving.batch_slots: [2, 1]
        """,
    )
    assert first == second
    assert len(set(first.values())) == 4
    assert all(len(k) == 64 and int(k, 16) >= 0 for k in first.values())


def test_key_changes_with_any_simulated_field() -> None:
    base = resolve(load_scenario(BASE)).key
    assert resolve(load_scenario(BASE)).key == base  # deterministic
    for override in (
        "serving.seed=1",
        "serving.requests=7",
        "kv.recent=1024",
        "hw.socket.hbm.latency=1 us",
        "model.layers=2",
    ):
        assert resolve(load_scenario(BASE, [override])).key != base, override


def test_key_ignores_descriptions_and_preset_spelling() -> None:
    base = resolve(load_scenario(BASE)).key
    assert resolve(load_scenario(BASE, ["description=another words"])).key == base
    # The same architecture, named by preset or spelled out in full, is the same input.
    inline = load_scenario(BASE, ["model.layers=32"])  # turns the preset into a mapping
    assert resolve(inline).key == base


def test_canonical_json_is_sorted_and_plain() -> None:
    assert canonical_json({"b": 1, "a": [1.5, float("nan")]}) == '{"a":[1.5,null],"b":1}'
    config = resolved_config(load_scenario(BASE))
    assert set(config) == {"workload", "hardware", "stack", "model"}
    assert config["workload"]["hardware"] is None  # the file path is replaced by its content
    assert config_key(config) == resolve(load_scenario(BASE)).key


def test_a_draft_and_a_router_key_by_what_their_config_json_holds(tmp_path: Path) -> None:
    """A draft or a CoE router given as {config_json: path} keys by the architecture the
    file holds, not its path: the same path holding another model is another point."""
    text = (ROOT / "tests" / "models" / "llama-3.1-8b" / "config.json").read_text()
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    coe = ROOT / "workloads" / "samba-coe-150x8b-8socket.yaml"
    spec = ROOT / "workloads" / "speculative" / "llama3.1-70b-16socket-specdec.yaml"
    for workload, field in ((coe, "coe.router"), (spec, "speculation.draft")):
        keys = []
        for layers in (32, 4):
            path.write_text(
                text.replace('"num_hidden_layers": 32', f'"num_hidden_layers": {layers}')
            )
            keys.append(resolve(load_scenario(workload, {field: {"config_json": str(path)}})).key)
        assert keys[0] != keys[1], field
