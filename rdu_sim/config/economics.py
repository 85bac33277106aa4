"""What running the machine draws and costs: a hardware file's ``power`` and ``cost``.

Power is the electrical draw while serving, per socket (or GPU) and per host (the node's
CPUs, NICs, fans and switches, shared by its ``system.sockets_per_node`` sockets): a stated
average, or a datasheet's maximum (``power.figure``, which the reports name);
cost is an explicit price per socket-hour (the machine's capital and operating cost
without electricity, amortised: an owner's figure or a cloud's rental price) plus
electricity per kWh. ``rdu_sim.report.energy`` turns them into a run's joules, output
tokens per joule and dollars per million output tokens. The shipped files give each
figure with its source or its reasoning; none is tuned to a result.
"""

from typing import Literal

from pydantic import Field

from rdu_sim.config.base import StrictModel
from rdu_sim.config.units import Watts

__all__ = ["MIXED", "CostConfig", "PowerConfig", "PowerFigure", "figure_words"]


PowerFigure = Literal["average", "maximum"]


class PowerConfig(StrictModel):
    """Electrical draw while serving, in watts (bare, or with a unit: ``800 W``,
    ``1.5 kW``): an average while serving, or a datasheet's maximum (``figure``), which the
    reports say beside every energy and tokens-per-joule figure from it. A run's draw is the
    file's, whatever its load: the simulator does not model power."""

    socket_w: Watts = Field(
        gt=0, le=100_000, description="one socket (or GPU) while serving, watts"
    )
    host_w: Watts = Field(
        ge=0,
        le=1_000_000,
        description="one node's host share (CPUs, NICs, fans, switches), watts; a system "
        "of fewer sockets than a node carries its share (sockets / sockets_per_node)",
    )
    figure: PowerFigure = Field(
        default="average",
        description="what socket_w and host_w are: 'average' (a stated average draw while "
        "serving) or 'maximum' (a datasheet's maximum: energy is then an upper bound and "
        "tokens per joule a lower one); the reports name it beside each figure from them",
    )


MIXED = "mixed"
"""A fleet's power figure when its machines' files give an average and a maximum."""


def figure_words(figure: str) -> str:
    """What a power figure is, in the reports' words, beside each energy and tokens-per-joule
    figure from it (``5.74 kW, an average``; ``10.2 kW, a maximum, an upper bound``): the
    one place those words are made."""
    return {
        "average": "an average",
        "maximum": "a maximum, an upper bound",
        MIXED: "averages and maxima summed",
    }[figure]


class CostConfig(StrictModel):
    """What a socket-hour and a kWh cost, in US dollars."""

    usd_per_socket_hour: float | None = Field(
        default=None,
        ge=0,
        le=1_000_000,
        description="the machine per socket (or GPU) and hour, electricity excluded "
        "(amortised purchase and operation, or a rental price); null: not priced",
    )
    usd_per_kwh: float = Field(
        default=0.12,
        ge=0,
        le=100,
        description="electricity per kWh (default 0.12: about the US commercial average "
        "of 2023-2024, EIA Electric Power Monthly table 5.3)",
    )
