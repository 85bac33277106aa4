"""A step's bound names what its critical path waits for (issue 42's trial): the links'
latency (``P2PLink.flight_time``: a transfer under way from its first byte to its arrival),
a stage starved of PCUs, and the PMUs' SRAM bandwidth; and the capacity and compile
refusals a hardware file causes are located at its fields, by ``run`` and ``check`` alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from step_bounds import bound_of

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.compiler.errors import CapacityError
from rdu_sim.report.bound import remedy_words
from rdu_sim.serving.backend import EngineBackend
from rdu_sim.serving.run import plan_capacity

ROOT = Path(__file__).resolve().parents[1]
LLAMA_8S = str(ROOT / "workloads/llama3.1-8b-8socket.yaml")
LLAMA_1S = str(ROOT / "workloads/llama3.1-8b-1socket.yaml")
RACKS = str(ROOT / "workloads/ep/deepseek-r1-sn40l-4racks-ep64.yaml")
BACKEND = EngineBackend()


def test_link_latency_binds_by_its_latency_field() -> None:
    """Llama 8B on 8 sockets with 1 ms in-node links: 65 collectives (two all-reduces a
    layer, the logits' all-gather), one hop each, wait ~1 ms apiece: the links bind by their
    latency, the remedy names the latency field, and nothing is left unaccounted. Each
    collective's direction pays the added latency at least once (its pieces, sent as the
    producer's tiles come, more): the link time grows by at least 65 x 0.9 ms over the
    default's 100 us."""
    _, fast_bound = bound_of(LLAMA_8S, {})
    slow, bound = bound_of(LLAMA_8S, {"hw.system.intra_node_link.latency": "1 ms"})
    assert fast_bound.bound == "hbm" and fast_bound.link_term == "bandwidth"
    assert bound.bound == "link" and bound.link == "intra_node_link"
    assert bound.link_term == "latency" and bound.unaccounted_s == 0.0
    assert bound.link_s > 0.9 * slow.device_s
    assert 65 * 0.9e-3 <= bound.link_s - fast_bound.link_s <= slow.device_s
    # the serialisation alone is a small part (busy_s keeps it)
    assert slow.busy_s["link"] < 0.2 * bound.link_s
    assert remedy_words(bound.bound, bound.link, bound.link_term) == (
        "a lower hw.system.intra_node_link.latency"
    )
    assert "the latency of intra_node_link" in bound.resource


def test_a_slow_rack_latency_names_the_rack_links() -> None:
    """DeepSeek-R1 on 4 racks with 500 us between racks: the step doubles, and the links
    between racks bind by their latency (HBM did before)."""
    timing, bound = bound_of(RACKS, {"hw.system.inter_rack_link.latency": "500 us"})
    assert bound.bound == "link" and bound.link == "inter_rack_link"
    assert bound.link_term == "latency" and bound.unaccounted_s == 0.0
    assert bound.link_s == timing.critical_s["link"]


def test_a_stage_starved_of_pcus_binds_by_compute() -> None:
    """104 PCUs for Llama 8B's prefill: its stages get unequal shares, and the busiest
    stage's PCU time is the step (the PCUs on average are idle a fifth of it)."""
    timing, bound = bound_of(LLAMA_1S, {"hw.socket.pcu.count": 104}, phase="prefill")
    assert bound.bound == "compute" and bound.unaccounted_s == 0.0
    assert bound.compute_s > 0.95 * timing.device_s
    average = timing.busy_s["pcu"] * 104 / 93  # over the usable PCUs: floor(0.9 x 104)
    assert average < 0.9 * bound.compute_s


def test_slow_pmus_name_the_pmu_sram_bandwidth() -> None:
    """PMUs at 1 GB/s: the busiest stage's PMU ports' time names the PMU bandwidth, longer
    than the step's HBM reads (the busy table's average over all PMUs is far smaller). Not
    all of the step: its tiles cross ~10 single-PMU stages in series, each write then read,
    a chain no one stage's time is (the report's unaccounted part)."""
    timing, bound = bound_of(LLAMA_1S, {"hw.socket.pmu.bandwidth": "1 GB/s"})
    assert bound.bound == "pmu" and bound.pmu_s == timing.critical_s["pmu"]
    assert bound.pmu_s > bound.hbm_s and bound.pmu_s > 2 * timing.busy_s["pmu"]
    assert remedy_words("pmu") == "more PMU SRAM bandwidth (hw.socket.pmu.bandwidth)"


def test_explicit_slots_beyond_the_capacity_have_no_cliff() -> None:
    """8 slots on 16 GiB of HBM, fewer than the weights and 8 slots need: under ``hbm``
    (every weight in HBM) refused, as at 16.05 GiB, where one slot fits beside them, and at
    14 GiB, where the weights alone do not fit; under a hot set as large as the weights, the
    least-read weights go to DDR at 16 and 16.05 GiB alike (docs/memory.md): no cliff
    between them either way. 16 slots on 15.9 GiB: their KV cache alone does not fit,
    refused at serving.batch_slots, with the numbers."""
    hot = {"memory.weights": "hot_set", "memory.hot_set_fraction": 0.95}  # all 14.96 GiB
    # beside all the weights, not one slot fits at 16 GiB and one at 16.05 GiB
    for capacity, beside in (("16 GiB", 0), ("16.05 GiB", 1)):
        overrides = {"serving.batch_slots": 8, "hw.socket.hbm.capacity": capacity}
        with pytest.raises(CapacityError, match=r"memory\.weights hot_set"):
            plan_capacity(api.load(LLAMA_1S, overrides), BACKEND)
        plan = plan_capacity(api.load(LLAMA_1S, {**overrides, **hot}), BACKEND)
        assert plan[:2] == (beside, 8) and plan[2].tiers["ddr"].weights_bytes > 7.4e9
    overrides = {"serving.batch_slots": 16, "hw.socket.hbm.capacity": "15.9 GiB", **hot}
    with pytest.raises(CapacityError) as caught:
        plan_capacity(api.load(LLAMA_1S, overrides), BACKEND)
    message = str(caught.value)
    assert message.endswith(
        "(from overrides: serving.batch_slots, overrides: hw.socket.hbm.capacity)"
    ), message
    assert "the KV cache of 16 slots (16 GiB" in message
    overrides = {"serving.batch_slots": 8, "hw.socket.hbm.capacity": "14 GiB"}
    with pytest.raises(CapacityError, match="the weights alone do not fit"):
        plan_capacity(api.load(LLAMA_1S, overrides), BACKEND)


def _bad_hardware(tmp: Path, body: str) -> Path:
    (tmp / "hw.yaml").write_text(f"extends: sn40l-8\nname: bad\nsocket:\n{body}")
    text = Path(LLAMA_8S).read_text().replace("../hw_configs/sn40l-8.yaml", "hw.yaml")
    assert "hardware: hw.yaml" in text
    workload = tmp / "wl.yaml"
    workload.write_text(text)
    return workload


@pytest.mark.parametrize(
    ("body", "located"),
    [
        ("  pmu:\n    count: 2\n", "hw.yaml:5: socket.pmu.count: kernel 'decoder' has 19 stages"),
        ("  pcu:\n    count: 2\n", "hw.yaml:5: socket.pcu.count: kernel 'decoder' has 19 stages"),
        ("  pmu:\n    sram: 100 B\n", "hw.yaml:5: socket.pmu.sram: kernel 'decoder': its stages'"),
    ],
)
def test_check_compiles_and_locates_the_hardware_field(
    tmp_path: Path, body: str, located: str
) -> None:
    """A hardware file whose socket cannot hold the decoder: ``check`` refuses it as ``run``
    does, at the hardware file's line and field."""
    workload = _bad_hardware(tmp_path, body)
    checked = CliRunner().invoke(cli, ["check", str(workload)])
    assert checked.exit_code == 2 and located in checked.output
    ran = CliRunner().invoke(cli, ["step", str(workload)])
    assert ran.exit_code == 2 and located in ran.output


def test_a_set_hardware_field_is_named_with_its_override() -> None:
    """``--set hw.socket.pcu.count=2``: the refusal names the override that set it."""
    ran = CliRunner().invoke(cli, ["step", LLAMA_8S, "--set", "hw.socket.pcu.count=2"])
    assert ran.exit_code == 2
    assert "hw.socket.pcu.count: kernel 'decoder' has 19 stages" in ran.output
    assert ran.output.rstrip().endswith("(from --set hw.socket.pcu.count)")


def test_every_override_of_a_blamed_hardware_field_is_named() -> None:
    """Two ``--set hw.`` overrides of the fields a kernel's refusal blames: the second (the
    usable fraction that leaves 10 PCUs and PMUs for 19 stages) is named too, not only the
    first (a PCU count the file already had)."""
    overrides = ["hw.socket.pcu.count=1040", "hw.socket.usable_fraction=0.01"]
    ran = CliRunner().invoke(cli, ["step", LLAMA_8S, *(a for o in overrides for a in ("--set", o))])
    assert ran.exit_code == 2, ran.output
    assert "kernel 'decoder' has 19 stages" in ran.output
    assert ran.output.rstrip().endswith(
        "(from --set hw.socket.pcu.count, --set hw.socket.usable_fraction)"
    )


def test_a_hardware_field_is_located_by_the_lines_read_at_load(tmp_path: Path) -> None:
    """The refusal's line is the hardware file's as loaded: a file changed on disk after
    loading does not move it (the file was read again to locate it)."""
    workload = _bad_hardware(tmp_path, "  pcu:\n    count: 2\n")
    scenario = api.load(workload)
    (tmp_path / "hw.yaml").write_text(f"# moved\n\n{(tmp_path / 'hw.yaml').read_text()}")
    with pytest.raises(CapacityError) as caught:
        api.step(scenario)
    assert "hw.yaml:5: socket.pcu.count: kernel 'decoder' has 19 stages" in str(caught.value)
