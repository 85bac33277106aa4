"""How well a fit's targets determine its values (rdu_sim.validate.identification): the
Gauss-Newton covariance of the residuals' Jacobian, in closed form on small Jacobians."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rdu_sim.validate.fit_result import describe
from rdu_sim.validate.identification import identify
from rdu_sim.validate.scope import FitParameter, Scoped

LINK = FitParameter("hw.system.intra_node_link.bandwidth", 8e9, 72e9, "sn40l")
STEP = FitParameter("stack.host.serial_per_step", 0.0, 2e-3, "sambastack-2025")


def test_independent_values_move_by_the_inverse_of_their_slope_times_their_span() -> None:
    """Residuals that each read one value: J'J is diagonal, a value's half-width is
    1 / (its column's norm) on [0, 1], times its bounds' span; nothing trades off."""
    jac = np.array([[4.0, 0.0], [0.0, 2.0], [0.0, 2.0], [0.0, 0.0]])
    found = identify(jac, [LINK, STEP])
    assert found.plus_minus[0] == pytest.approx(64e9 / 4)
    assert found.plus_minus[1] == pytest.approx(2e-3 / math.sqrt(8))
    assert found.trade_offs == ()


def test_two_values_the_targets_see_only_together_trade_off() -> None:
    """Every residual reads the two values' sum: the targets fix it, not each, so neither is
    determined within its bounds and the two are anti-correlated (one up, the other down
    leaves every residual as it is)."""
    jac = np.array([[3.0, 3.0], [1.0, 1.0]])
    found = identify(jac, [LINK, STEP])
    assert found.plus_minus == (math.inf, math.inf)
    (pair,) = found.trade_offs
    assert (pair.first, pair.second) == (0, 1)
    assert pair.correlation == pytest.approx(-1.0, abs=1e-6)


def test_a_near_degenerate_pair_trades_off_and_an_unread_value_is_undetermined() -> None:
    """Two columns 1% apart: correlation near -1, each determined only to ~100x its slope's
    inverse; a zero column (a value no trained target reads) is undetermined and in no
    pair."""
    third = FitParameter("hw.gpu.kernel.sync", 0.0, 1e-5, "dgx-h100")
    jac = np.array([[100.0, 101.0, 0.0], [100.0, 99.0, 0.0]])
    found = identify(jac, [LINK, STEP, third])
    normal = jac[:, :2].T @ jac[:, :2]
    covariance = np.linalg.inv(normal)
    assert found.plus_minus[0] == pytest.approx(math.sqrt(covariance[0, 0]) * 64e9, rel=1e-6)
    assert found.plus_minus[2] == math.inf
    (pair,) = found.trade_offs
    assert (pair.first, pair.second) == (0, 1)
    expected = covariance[0, 1] / math.sqrt(covariance[0, 0] * covariance[1, 1])
    assert pair.correlation == pytest.approx(expected, rel=1e-6) and pair.correlation < -0.9


def test_a_fitted_value_is_told_with_its_half_width_in_its_unit() -> None:
    scoped = Scoped(LINK, "/hw/sn40l.yaml", "sn40l")
    told = describe(scoped, 36.24e9, "36.24 GB/s", 1.234e9)
    assert told.endswith("= 36.24 GB/s ± 1.2 GB/s (bounds 8 GB/s..72 GB/s)")
    assert "undetermined" in describe(scoped, 36.24e9, "36.24 GB/s", math.inf)
    step = Scoped(STEP, "/stacks/sambastack-2025.yaml", "sambastack-2025")
    assert "= 1.287 ms ± 370 us (bounds" in describe(step, 1.287e-3, "1.287 ms", 3.7e-4)
    assert "±" not in describe(scoped, 36.24e9, "36.24 GB/s")
