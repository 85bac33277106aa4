"""How well a fit's targets determine its values (rdu_sim.validate.identification): the
Gauss-Newton covariance of the residuals' Jacobian, checked in closed form on small
Jacobians and against the objective itself."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from rdu_sim.validate.fit_result import FitResult, describe
from rdu_sim.validate.identification import Identification, TradeOff, identify
from rdu_sim.validate.scope import FitParameter, Scoped

LINK = FitParameter("hw.system.intra_node_link.bandwidth", 8e9, 72e9, "sn40l")
STEP = FitParameter("stack.host.serial_per_step", 0.0, 2e-3, "sambastack-2025")
SYNC = FitParameter("hw.gpu.kernel.sync", 0.0, 1e-5, "dgx-h100")


def test_independent_values_move_by_the_inverse_of_their_slope_times_their_span() -> None:
    """Residuals that each read one value: a value's half-width is 1 / (its column's norm)
    on [0, 1], times its bounds' span, however unlike the two columns' sizes; nothing
    trades off."""
    jac = np.array([[4.0, 0.0], [0.0, 2.0], [0.0, 2.0], [0.0, 0.0]])
    found = identify(jac, [LINK, STEP])
    assert found.plus_minus[0] == pytest.approx(64e9 / 4)
    assert found.plus_minus[1] == pytest.approx(2e-3 / math.sqrt(8))
    assert found.trade_offs == ()
    unlike = identify(np.array([[1e7, 0.0], [0.0, 3.0]]), [LINK, STEP])
    assert unlike.plus_minus == pytest.approx((64e9 / 1e7, 2e-3 / 3), rel=1e-9)


def test_the_half_width_is_the_move_that_adds_one_to_the_objective() -> None:
    """Against the objective itself: fix one value half-width away from the solution, let
    the others follow (least squares on the linear model), and the sum of squared residuals
    has grown by exactly one."""
    rng = np.random.default_rng(7)
    jac = rng.normal(size=(12, 3)) * np.array([5.0, 9.0, 4.0])
    found = identify(jac, [LINK, STEP, SYNC])
    for i, p in enumerate((LINK, STEP, SYNC)):
        move = found.plus_minus[i] / (p.high - p.low)  # in units of the span
        others = [k for k in range(3) if k != i]
        rest, *_ = np.linalg.lstsq(jac[:, others], -jac[:, i] * move, rcond=None)
        residual = jac[:, i] * move + jac[:, others] @ rest
        assert float(residual @ residual) == pytest.approx(1.0, rel=1e-9)


def test_two_values_the_targets_see_only_together_trade_off() -> None:
    """Every residual reads the two values' sum: the targets fix it, not each, so neither is
    determined within its bounds and the two are anti-correlated (one up, the other down
    leaves every residual as it is)."""
    found = identify(np.array([[3.0, 3.0], [1.0, 1.0]]), [LINK, STEP])
    assert found.plus_minus == (math.inf, math.inf)
    (pair,) = found.trade_offs
    assert (pair.first, pair.second) == (0, 1)
    assert pair.correlation == pytest.approx(-1.0, abs=1e-6)


def test_a_near_degenerate_pair_trades_off_and_an_unread_value_is_undetermined() -> None:
    """Two columns 1% apart trade off (correlation near -1) and are fixed only loosely; a
    zero column (a value no trained target reads) is undetermined and in no pair."""
    jac = np.array([[1000.0, 1010.0, 0.0], [1000.0, 990.0, 0.0]])
    found = identify(jac, [LINK, STEP, SYNC])
    assert found.plus_minus[2] == math.inf
    (pair,) = found.trade_offs
    # the 2 x 2 inverse in closed form: J'J = [[a, b], [b, c]]
    a, b, c = 2e6, 2e6, 1010.0**2 + 990.0**2
    det = a * c - b * b
    assert pair.correlation == pytest.approx(-b / math.sqrt(a * c), rel=1e-6)
    assert found.plus_minus[0] == pytest.approx(math.sqrt(c / det) * 64e9, rel=1e-6)
    assert found.plus_minus[0] > 5 * 64e9 / math.sqrt(a)  # far looser than its own slope says


def test_undetermined_beyond_half_the_span() -> None:
    """A half-width of exactly half the span is told; a little more is not (its interval
    would reach past the bounds)."""
    assert identify(np.array([[2.0]]), [STEP]).plus_minus == pytest.approx((1e-3,))
    assert identify(np.array([[1.99]]), [STEP]).plus_minus == (math.inf,)


def test_a_value_held_at_a_bound_is_left_out_and_the_others_are_fixed_without_it() -> None:
    """The fit ended with the first value at its bound: that value is not a free one (nan),
    and the second's width is its own column's alone, as with the first held fixed."""
    jac = np.array([[2.0, 2.0], [0.0, 2.0]])
    held = identify(jac, [LINK, STEP], at_bound=[True, False])
    assert math.isnan(held.plus_minus[0])
    assert held.plus_minus[1] == pytest.approx(2e-3 / math.sqrt(8))
    free = identify(jac, [LINK, STEP])
    assert free.plus_minus[1] == pytest.approx(2e-3 * 0.5)  # (J'J)^-1 [1,1] = 1/4


def test_a_jacobian_with_no_finite_slope_determines_nothing() -> None:
    found = identify(np.array([[np.nan, 1.0], [np.inf, 2.0]]), [LINK, STEP])
    assert found.plus_minus == (math.inf, math.inf) and found.trade_offs == ()


def test_a_fitted_value_is_told_with_its_half_width_in_its_unit() -> None:
    scoped = Scoped(LINK, "/hw/sn40l.yaml", "sn40l")
    told = describe(scoped, 36.24e9, "36.24 GB/s", 1.234e9)
    assert told.endswith("= 36.24 GB/s ± 1.2 GB/s (bounds 8 GB/s..72 GB/s)")
    assert "undetermined" in describe(scoped, 36.24e9, "36.24 GB/s", math.inf)
    assert "±" not in describe(scoped, 36.24e9, "36.24 GB/s")
    step = Scoped(STEP, "/stacks/sambastack-2025.yaml", "sambastack-2025")
    assert "= 1.287 ms ± 370 us (bounds" in describe(step, 1.287e-3, "1.287 ms", 3.7e-4)
    at_zero = describe(step, 0.0, "0", math.nan)
    assert "±" not in at_zero and "at its low bound" in at_zero


def test_fit_json_says_which_values_are_determined_and_which_trade_off() -> None:
    """plus_minus is a number only where it is finite (JSON has no inf or nan); determined
    says so; a fit without a Jacobian claims nothing."""
    scoped = (
        Scoped(LINK, "/hw/sn40l.yaml", "sn40l"),
        Scoped(STEP, "/s.yaml", "sambastack-2025"),
        Scoped(SYNC, "/g.yaml", "dgx-h100"),
    )
    ident = Identification((1e9, math.inf, math.nan), (TradeOff(0, 1, -0.97),))
    result = FitResult(scoped, (36e9, 1e-3, 0.0), ("36 GB/s", "1 ms", "0"), (), 1, 1, 0, 0.0)
    with_ident = replace(result, identification=ident)
    data = json.loads(json.dumps(with_ident.to_dict(), allow_nan=False))
    assert [(p["plus_minus"], p["determined"]) for p in data["parameters"]] == [
        (1e9, True),
        (None, False),
        (None, False),
    ]
    assert data["trade_offs"] == [
        {"parameters": ["sn40l:" + LINK.path, "sambastack-2025:" + STEP.path],
         "correlation": -0.97}
    ]  # fmt: skip
    bare = result.to_dict()
    assert [p["determined"] for p in bare["parameters"]] == [False] * 3
    assert bare["trade_offs"] == []
