"""How a MoE model's tokens load its experts, and how whole experts are placed on devices.

Routing is not uniform: some experts are asked for more than others, and with whole experts
per device (expert parallelism) a layer waits for the device whose experts were asked for
most. ``experts.load`` says how often each expert is chosen (its share of the token-expert
pairs): ``uniform``; ``zipf`` (expert of popularity rank r, from 0, chosen with weight
1 / (r + 1)^exponent, the ranks dealt to the experts at random by ``seed``, since how hot an
expert is has nothing to do with its number); or ``counts``, a measured count per expert
(inline, or a file of one count per line, relative to the workload, else to the current
folder). ``experts.redundant`` copies of the hottest experts (DeepSeek's EPLB) and
``experts.placement`` decide which device holds what (``compiler.expert_load``).
"""

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from rdu_sim.config.base import StrictModel
from rdu_sim.config.errors import FieldProblem

MAX_EXPERTS = 100_000  # an architecture's routed_experts bound


class UniformLoad(StrictModel):
    """Every expert chosen as often."""

    dist: Literal["uniform"] = Field(default="uniform", description="the distribution: uniform")


class ZipfLoad(StrictModel):
    """Expert popularity falling as a power of its rank, ranks dealt at random."""

    dist: Literal["zipf"] = Field(description="the distribution: zipf")
    exponent: float = Field(
        ge=0.0, le=10.0, description="s: the rank-r expert is chosen with weight 1/(r+1)^s"
    )
    seed: int = Field(
        default=0, ge=0, le=2**63 - 1, description="which expert gets which popularity rank"
    )


class CountsLoad(StrictModel):
    """Measured token counts per expert (a load balancer's statistics)."""

    dist: Literal["counts"] = Field(description="the distribution: counts")
    counts: list[float] | None = Field(
        default=None,
        max_length=MAX_EXPERTS,
        description="tokens routed to each expert, in expert order",
    )
    file: str | None = Field(
        default=None,
        min_length=1,
        description="a text file of one count per expert per line, relative to the workload "
        "file, else to the current folder (a --set on a shipped workload); read into counts "
        "when the workload is loaded",
    )

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.counts is None) == (self.file is None):
            raise ValueError("dist counts needs counts or file (one of them)")
        if self.counts is not None:
            if any(c < 0 or c != c or c == float("inf") for c in self.counts):
                raise FieldProblem("counts", "must be finite and >= 0")
            if not any(self.counts):
                raise FieldProblem("counts", "are all 0: no expert was ever chosen")
        return self


Load = Annotated[UniformLoad | ZipfLoad | CountsLoad, Field(discriminator="dist")]


class ExpertsConfig(StrictModel):
    """The load on a MoE model's routed experts and their placement (module docstring)."""

    load: Load = Field(
        default_factory=UniformLoad,
        description="how often each expert is chosen: {dist: uniform}, {dist: zipf, "
        "exponent, seed} or {dist: counts, counts | file}",
    )
    redundant: int = Field(
        default=0,
        ge=0,
        le=MAX_EXPERTS,
        description="extra copies of the hottest experts over the expert-parallel devices "
        "(DeepSeek's redundant experts); each copy takes an equal share of its expert's "
        "tokens",
    )
    placement: Literal["in_order", "balanced"] = Field(
        default="in_order",
        description="'in_order': expert e on device e // (E / ep), as a model is loaded; "
        "'balanced': a load balancer's (EPLB): copies given to the experts with the most "
        "tokens per copy, then the heaviest copy first onto the least loaded device",
    )

    @model_validator(mode="after")
    def _redundant_needs_balance(self) -> Self:
        if self.redundant and self.placement == "in_order":
            raise FieldProblem(
                "redundant",
                "copies are placed by a load balancer over whole experts: set "
                "experts.placement: balanced (with expert parallelism, parallelism.ep > 1)",
            )
        return self

    @property
    def is_default(self) -> bool:
        """Uniform load, no copies, in order: what a step assumes without the section."""
        return (
            isinstance(self.load, UniformLoad)
            and not self.redundant
            and self.placement == "in_order"
        )
