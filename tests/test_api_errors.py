"""What a Python caller catches: every bad-input error shares one base, `rdu_sim.InputError`
(messages unchanged), and a workload argument of the wrong type is named as such."""

from __future__ import annotations

import pytest

import rdu_sim
from rdu_sim import api


def test_every_input_error_is_an_input_error() -> None:
    """ConfigError, CapacityError, StoreError, ... shared no base class: a script had to
    know and catch each one."""
    from rdu_sim.compiler import CapacityError
    from rdu_sim.config.errors import ConfigError
    from rdu_sim.engine import EventBudgetError
    from rdu_sim.extras import MissingDependencyError
    from rdu_sim.models.presets import UnknownModelError
    from rdu_sim.sweep.store import StoreError

    for error in (
        ConfigError,
        StoreError,
        UnknownModelError,
        CapacityError,
        EventBudgetError,
        MissingDependencyError,
    ):
        assert issubclass(error, rdu_sim.InputError), error


def test_the_base_class_changes_no_message() -> None:
    from rdu_sim.compiler import CapacityError
    from rdu_sim.config.errors import ConfigError
    from rdu_sim.models.presets import UnknownModelError

    assert str(CapacityError("too big")) == "too big"
    assert str(ConfigError.single("w.yaml", "serving.requests", "bad")).startswith("w.yaml")
    assert str(UnknownModelError("no model 'x'")) == "no model 'x'"


@pytest.mark.parametrize("given", [42, None, 1.5, ["w.yaml"]])
def test_a_workload_of_the_wrong_type_is_named(given: object) -> None:
    """`api.run(42)` raised pathlib's "argument should be a str or an os.PathLike object
    ..., not 'int'", naming no argument."""
    with pytest.raises(TypeError, match="scenario_or_path") as caught:
        api.run(given)  # type: ignore[arg-type]
    assert type(given).__name__ in str(caught.value)
    with pytest.raises(TypeError, match="scenario_or_path"):
        api.load(given)  # type: ignore[arg-type]


def test_a_missing_workload_is_an_input_error() -> None:
    with pytest.raises(rdu_sim.InputError, match="no-such-workload"):
        api.run("no-such-workload.yaml")
