"""Energy and cost of a run (rdu_sim.report.energy, the hardware file's power and cost).

The math is known: joules = makespan x (sockets x socket_w + sockets / sockets_per_node x
host_w); tokens per joule and dollars follow. Checked exactly against the run's own makespan
and tokens, through --set overrides (every parameter moves its result), in sweep rows, and
absent when the hardware gives no power.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rdu_sim import api
from rdu_sim.config.economics import CostConfig, PowerConfig
from rdu_sim.report.energy import J_PER_KWH, Machine, energy_of, fleet_energy

SMALL = {"serving.requests": 12, "serving.output_tokens": 32, "serving.prompt_tokens": 256}


def test_the_formula_on_numbers_worked_by_hand() -> None:
    power = PowerConfig(socket_w=500, host_w=1600)
    cost = CostConfig(usd_per_socket_hour=2.0, usd_per_kwh=0.1)
    e = energy_of(power, cost, sockets=2, sockets_per_node=8, makespan_s=3600, output_tokens=10**6)
    assert e is not None
    assert e.average_power_w == 2 * 500 + 2 / 8 * 1600  # 1,400 W
    assert e.joules == 1400 * 3600
    assert e.energy_usd == pytest.approx(1.4 * 0.1)  # 1.4 kWh
    assert e.usd == pytest.approx(2 * 2.0 + 0.14)
    assert e.usd_per_million_output_tokens == pytest.approx(4.14)
    assert e.output_tokens_per_joule == pytest.approx(10**6 / (1400 * 3600))
    unpriced = energy_of(power, CostConfig(), 2, 8, 3600, 10**6)
    assert unpriced is not None and unpriced.usd is None
    assert unpriced.usd_per_million_output_tokens is None
    assert energy_of(None, cost, 2, 8, 3600, 10) is None  # no power given: not reported
    assert energy_of(power, cost, 2, 8, None, 10) is None  # nothing ran


def test_a_fleet_is_the_sum_of_its_machines() -> None:
    """A cluster's pools all draw for the makespan: watts, joules and dollars add up; one
    unpriced pool leaves the fleet unpriced, one without power leaves it unreported."""
    a = Machine(
        PowerConfig(socket_w=500, host_w=1600),
        CostConfig(usd_per_socket_hour=2.0, usd_per_kwh=0.1),
        2,
        8,
    )
    b = Machine(
        PowerConfig(socket_w=700, host_w=2000),
        CostConfig(usd_per_socket_hour=3.0, usd_per_kwh=0.2),
        16,
        16,
    )
    fleet = fleet_energy([a, b], 1800.0, 10**6)
    parts = [energy_of(m.power, m.cost, m.sockets, m.sockets_per_node, 1800.0, 0) for m in (a, b)]
    assert fleet is not None and parts[0] is not None and parts[1] is not None
    assert fleet.average_power_w == 1400 + 16 * 700 + 2000
    assert fleet.joules == pytest.approx(parts[0].joules + parts[1].joules, rel=1e-15)
    assert fleet.usd == pytest.approx((parts[0].usd or 0) + (parts[1].usd or 0), rel=1e-15)
    assert fleet.output_tokens_per_joule == pytest.approx(10**6 / fleet.joules)
    unpriced = Machine(b.power, CostConfig(usd_per_kwh=0.2), 16, 16)
    partly = fleet_energy([a, unpriced], 1800.0, 10**6)
    assert partly is not None and partly.usd is None and partly.energy_usd == fleet.energy_usd
    assert fleet_energy([a, Machine(None, CostConfig(), 1, 8)], 1800.0, 10) is None
    assert fleet_energy([], 1800.0, 10) is None


@pytest.fixture(scope="module")
def base() -> dict[str, object]:
    return api.run("llama3.1-8b-8socket", SMALL).to_dict()


def test_a_run_reports_its_energy_from_its_makespan(base: dict[str, object]) -> None:
    energy = base["energy"]
    assert isinstance(energy, dict)
    watts = 8 * 530 + 8 / 8 * 1500  # hw_configs/sn40l-8.yaml
    assert energy["average_power_w"] == pytest.approx(watts)
    assert energy["joules"] == pytest.approx(watts * base["makespan_s"], rel=1e-9)  # type: ignore[operator]
    assert energy["output_tokens_per_joule"] == pytest.approx(
        base["output_tokens"] / energy["joules"],
        rel=1e-9,  # type: ignore[operator]
    )
    assert energy["energy_usd"] == pytest.approx(energy["joules"] / J_PER_KWH * 0.12)
    assert energy["usd"] is None  # the shipped files leave the socket-hour unpriced


def test_every_parameter_moves_its_result(base: dict[str, object]) -> None:
    def energy(**sets: object) -> dict[str, float]:
        overrides = {**SMALL, **{f"hw.{k.replace('__', '.')}": v for k, v in sets.items()}}
        data = api.run("llama3.1-8b-8socket", overrides).to_dict()
        assert data["makespan_s"] == base["makespan_s"]  # power changes no timing
        value = data["energy"]
        assert isinstance(value, dict)
        return value

    before = base["energy"]
    assert isinstance(before, dict)
    assert energy(power__socket_w=1060)["average_power_w"] == 8 * 1060 + 1500
    assert energy(power__host_w=0)["average_power_w"] == 8 * 530
    assert energy(cost__usd_per_kwh=0.24)["energy_usd"] == pytest.approx(2 * before["energy_usd"])
    assert (before["power_figure"], energy(power__figure="maximum")["power_figure"]) == (
        "average",
        "maximum",
    )
    priced = energy(cost__usd_per_socket_hour=3.0)
    hours = base["makespan_s"] / 3600  # type: ignore[operator]
    assert priced["usd"] == pytest.approx(8 * hours * 3.0 + before["energy_usd"])
    assert priced["usd_per_million_output_tokens"] == pytest.approx(
        priced["usd"] / base["output_tokens"] * 1e6  # type: ignore[operator]
    )


def test_sweep_rows_carry_energy_and_cost(tmp_path: Path) -> None:
    from rdu_sim.sweep import load, run_sweep

    workload = Path(__file__).resolve().parents[1] / "workloads" / "llama3.1-8b-1socket.yaml"
    spec = tmp_path / "s.yaml"
    spec.write_text(
        f"base: {workload}\n"
        "set: {serving.requests: 4, serving.output_tokens: 16, serving.prompt_tokens: 128,"
        " hw.cost.usd_per_socket_hour: 2.0}\n"
        "axes: {hw.power.socket_w: [400, 800]}\n"
        "metrics: [energy.output_tokens_per_joule, energy.usd_per_million_output_tokens]\n"
    )
    run_sweep(spec, db=tmp_path / "s.sqlite", workers=1)
    frame = load(tmp_path / "s.sqlite").sort_values("hw.power.socket_w")
    low, high = frame["energy.output_tokens_per_joule"]
    assert low > high  # 400 W then 800 W per socket: more watts, fewer tokens per joule
    assert frame["energy.usd_per_million_output_tokens"].notna().all()


def test_a_lone_run_charges_the_sockets_it_uses_as_a_cluster_run_does() -> None:
    """tp=4 on an 8-socket system: the run uses 4 sockets (its header says 4 idle) and is
    charged for those, as a one-replica cluster pool of the same workload is."""
    data = api.run("llama3.1-8b-8socket", {**SMALL, "parallelism.tp": 4}).to_dict()
    energy = data["energy"]
    assert isinstance(energy, dict)
    assert energy["average_power_w"] == pytest.approx(4 * 530 + 4 / 8 * 1500)
    pool = Machine(PowerConfig(socket_w=530, host_w=1500), CostConfig(usd_per_kwh=0.12), 4, 8)
    fleet = fleet_energy([pool], data["makespan_s"], data["output_tokens"])  # type: ignore[arg-type]
    assert fleet is not None and fleet.joules == pytest.approx(energy["joules"], rel=1e-12)


def test_the_reports_say_what_the_files_power_is_beside_each_figure_from_it() -> None:
    """SN40L's power is SambaNova's stated average, a DGX's NVIDIA's datasheet maximum
    (``power.figure``): compare's power cell and a run's energy row say which, so tokens per
    joule side by side are read as they are (the trial read 5.74 kW and 10.2 kW as alike);
    and a run's energy row does not call the file's draw the run's average (it is the same
    at 7% occupancy as at full load)."""
    from rdu_sim.cli.compare_cmd import ROWS
    from rdu_sim.compare import compare
    from rdu_sim.report.console import energy_rows

    cell = dict(ROWS)["power (whole system)"]
    sn40l, h100 = compare("llama3.1-8b-1socket", ["sn40l-8", "dgx-h100"], batch=1).columns
    assert (sn40l.power_figure, h100.power_figure) == ("average", "maximum")
    assert cell(sn40l) == "5.74 kW, an average"
    assert cell(h100) == "10.2 kW, a maximum, an upper bound"
    power = PowerConfig(socket_w=700, host_w=4600, figure="maximum")
    maximum = energy_of(power, CostConfig(), 8, 8, makespan_s=10.0, output_tokens=100)
    assert maximum is not None and maximum.power_figure == "maximum"
    (label, value), *_ = energy_rows(maximum)
    assert "average" not in label and value == "102 kJ at 10.2 kW, a maximum, an upper bound"
    average = Machine(PowerConfig(socket_w=530, host_w=1500), CostConfig(), 8, 8)
    mixed = fleet_energy([average, Machine(power, CostConfig(), 8, 8)], 10.0, 100)
    assert mixed is not None and mixed.power_figure == "mixed"
