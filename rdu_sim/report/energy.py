"""A run's energy and cost, from the hardware file's ``power`` and ``cost``
(``rdu_sim.config.economics``): the one place these are computed, for the run report, its
JSON and sweep rows.

The machine draws its average serving power for the whole makespan (an open-loop run whose
slots stand idle still pays for them: accelerators and hosts idle at a large share of
their serving draw): ``joules = makespan x (sockets x socket_w + sockets / sockets_per_node
x host_w)``. Output tokens per joule divide the run's output tokens by that; dollars are
``sockets x makespan in hours x usd_per_socket_hour`` (when priced) plus ``kWh x
usd_per_kwh``, per million output tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdu_sim.config.economics import CostConfig, PowerConfig

__all__ = ["Energy", "energy_of"]

J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class Energy:
    """Power, energy and cost of one run (``usd`` and ``usd_per_million_output_tokens``
    None when the socket-hour has no price)."""

    average_power_w: float
    joules: float
    output_tokens_per_joule: float | None
    energy_usd: float
    usd: float | None
    usd_per_million_output_tokens: float | None


def energy_of(
    power: PowerConfig | None,
    cost: CostConfig,
    sockets: int,
    sockets_per_node: int,
    makespan_s: float | None,
    output_tokens: int,
) -> Energy | None:
    """The run's energy and cost; None when the hardware gives no power or nothing ran."""
    if power is None or makespan_s is None or makespan_s <= 0:
        return None
    watts = sockets * power.socket_w + sockets / sockets_per_node * power.host_w
    joules = watts * makespan_s
    energy_usd = joules / J_PER_KWH * cost.usd_per_kwh
    usd = (
        None
        if cost.usd_per_socket_hour is None
        else sockets * makespan_s / 3600.0 * cost.usd_per_socket_hour + energy_usd
    )
    return Energy(
        average_power_w=watts,
        joules=joules,
        output_tokens_per_joule=output_tokens / joules if output_tokens else None,
        energy_usd=energy_usd,
        usd=usd,
        usd_per_million_output_tokens=(
            usd / output_tokens * 1e6 if usd is not None and output_tokens else None
        ),
    )
