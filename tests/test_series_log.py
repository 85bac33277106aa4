"""The serving time series' packed log (serving.records.SeriesLog): one row per instant, the
last state of it, and views that stay valid while the log grows."""

from __future__ import annotations

import numpy as np

from rdu_sim.serving.records import SeriesLog


def test_one_row_per_instant_holding_its_last_state() -> None:
    log = SeriesLog()
    log.append((0, 1, 0, 0, 0))
    log.append((5, 0, 1, 0, 0))
    log.append((5, 0, 0, 1, 64))  # same instant: replaces the row above
    log.append((9, 2, 0, 1, 64))
    assert len(log) == 3
    assert log.as_array().tolist() == [[0, 1, 0, 0, 0], [5, 0, 0, 1, 64], [9, 2, 0, 1, 64]]


def test_a_view_survives_later_appends() -> None:
    log = SeriesLog()
    log.append((1, 1, 1, 1, 1))
    view = log.as_array()  # exports the buffer: the next append must not resize it
    log.append((2, 2, 2, 2, 2))
    log.append((2, 3, 3, 3, 3))
    assert view.tolist() == [[1, 1, 1, 1, 1]]
    assert log.as_array().tolist() == [[1, 1, 1, 1, 1], [2, 3, 3, 3, 3]]
    assert log.as_array().dtype == np.int64 and SeriesLog().as_array().shape == (0, 5)
