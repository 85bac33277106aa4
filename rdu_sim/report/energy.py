"""A run's energy and cost, from the hardware file's ``power`` and ``cost``
(``rdu_sim.config.economics``): the one place these are computed, for the run report, its
JSON and sweep rows.

The machine draws its average serving power for the whole makespan (an open-loop run whose
slots stand idle still pays for them: accelerators and hosts idle at a large share of
their serving draw): ``joules = makespan x (sockets x socket_w + sockets / sockets_per_node
x host_w)``. Output tokens per joule divide the run's output tokens by that; dollars are
``sockets x makespan in hours x usd_per_socket_hour`` (when priced) plus ``kWh x
usd_per_kwh``, per million output tokens. A cluster is a fleet of such machines (one per
pool), all powered for the cluster's makespan: its watts, joules and dollars are the sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rdu_sim.config.economics import MIXED, CostConfig, PowerConfig

__all__ = ["Energy", "Machine", "energy_of", "fleet_energy", "machine_watts"]

J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class Energy:
    """Power, energy and cost of one run (``usd`` and ``usd_per_million_output_tokens``
    None when the socket-hour has no price)."""

    # the hardware files' draw (``power``; the key keeps its name): not the run's average,
    # which the simulator does not model, but the file's figure whatever the load
    average_power_w: float
    joules: float
    output_tokens_per_joule: float | None
    energy_usd: float
    usd: float | None
    usd_per_million_output_tokens: float | None
    # what that draw is (``power.figure``: ``average``, ``maximum``; ``mixed`` for a fleet
    # of both; ``config.economics.figure_words`` says it)
    power_figure: str = "average"


@dataclass(frozen=True)
class Machine:
    """Sockets of one hardware file, with its power and prices (a run's machine, or one
    pool of a cluster)."""

    power: PowerConfig | None
    cost: CostConfig
    sockets: int
    sockets_per_node: int


def machine_watts(power: PowerConfig, sockets: int, sockets_per_node: int) -> float:
    """What ``sockets`` of a hardware file draw while serving: each socket's ``socket_w`` and
    their share of the hosts' ``host_w`` (``sockets / sockets_per_node`` nodes): the one power
    rule of a run's energy and of ``rdu-sim compare``'s tokens per joule."""
    return sockets * power.socket_w + sockets / sockets_per_node * power.host_w


def energy_of(
    power: PowerConfig | None,
    cost: CostConfig,
    sockets: int,
    sockets_per_node: int,
    makespan_s: float | None,
    output_tokens: int,
) -> Energy | None:
    """The run's energy and cost; None when the hardware gives no power or nothing ran."""
    machine = Machine(power, cost, sockets, sockets_per_node)
    return fleet_energy([machine], makespan_s, output_tokens)


def fleet_energy(
    machines: Sequence[Machine], makespan_s: float | None, output_tokens: int
) -> Energy | None:
    """Machines all powered for ``makespan_s``: summed power, energy and cost; None when
    one gives no power or nothing ran; unpriced when one has no socket-hour price."""
    if makespan_s is None or makespan_s <= 0 or not machines:
        return None
    watts = joules = energy_usd = hire_usd = 0.0
    priced = True
    for m in machines:
        if m.power is None:
            return None
        machine_w = machine_watts(m.power, m.sockets, m.sockets_per_node)
        machine_j = machine_w * makespan_s
        machine_energy_usd = machine_j / J_PER_KWH * m.cost.usd_per_kwh
        watts += machine_w
        joules += machine_j
        energy_usd += machine_energy_usd
        if m.cost.usd_per_socket_hour is None:
            priced = False
        else:
            hire_usd += m.sockets * makespan_s / 3600.0 * m.cost.usd_per_socket_hour
    usd = hire_usd + energy_usd if priced else None
    figures = {m.power.figure for m in machines if m.power is not None}
    return Energy(
        power_figure=figures.pop() if len(figures) == 1 else MIXED,
        average_power_w=watts,
        joules=joules,
        output_tokens_per_joule=output_tokens / joules if output_tokens else None,
        energy_usd=energy_usd,
        usd=usd,
        usd_per_million_output_tokens=(
            usd / output_tokens * 1e6 if usd is not None and output_tokens else None
        ),
    )
