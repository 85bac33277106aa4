"""The serving time series' packed log (serving.records.SeriesLog): one row per instant, the
last state of it, and views that stay valid while the log grows."""

from __future__ import annotations

import numpy as np

from rdu_sim.serving.records import SeriesLog


def test_one_row_per_instant_holding_its_last_state() -> None:
    log = SeriesLog()
    log.append(0, 1, 0, 0, 0)
    log.append(5, 0, 1, 0, 0)
    log.append(5, 0, 0, 1, 64)  # same instant: replaces the row above
    log.append(9, 2, 0, 1, 64)
    assert len(log) == 3
    assert log.as_array().tolist() == [[0, 1, 0, 0, 0], [5, 0, 0, 1, 64], [9, 2, 0, 1, 64]]


def test_views_survive_later_appends() -> None:
    log = SeriesLog()
    log.append(1, 1, 1, 1, 1)
    times, counts = log.times(), log.counts()  # export the buffers: appends must not resize them
    log.append(2, 2, 2, 2, 2)
    log.append(2, 3, 3, 3, 3)
    assert times.tolist() == [1] and counts.tolist() == [[1, 1, 1, 1]]
    assert log.as_array().tolist() == [[1, 1, 1, 1, 1], [2, 3, 3, 3, 3]]
    assert log.as_array().dtype == np.int64 and SeriesLog().as_array().shape == (0, 5)


def test_a_view_of_the_times_alone_leaves_no_half_row() -> None:
    """The counts grow first and the times second: when only the times are exported the
    append fails half-way, and the retry must not leave the counts a row ahead."""
    log = SeriesLog()
    log.append(1, 1, 1, 1, 1)
    times = log.times()
    log.append(2, 2, 2, 2, 2)
    log.append(3, 4, 4, 4, 4)
    assert times.tolist() == [1]
    assert log.as_array().tolist() == [[1, 1, 1, 1, 1], [2, 2, 2, 2, 2], [3, 4, 4, 4, 4]]
    assert log.counts().shape == (3, 4)


def test_rows_past_a_chunk_and_a_view_taken_mid_instant() -> None:
    """Rows pending and packed read alike: a row replaced after a view packed it, and more
    rows than one chunk holds, give the rows a list would."""
    log = SeriesLog()
    expected = []
    for i in range(10_000):
        log.append(2 * i, i % 7, i % 3, i % 5, 64)
        expected.append([2 * i, i % 7, i % 3, i % 5, 64])
        if i % 997 == 0:
            view = log.times()  # packs, and holds the buffer
            log.append(2 * i, 9, 9, 9, 128)  # same instant: replaces the packed row
            expected[-1] = [2 * i, 9, 9, 9, 128]
            assert view.tolist() == [row[0] for row in expected[:-1]] + [2 * i]
    assert len(log) == len(expected)
    assert log.as_array().tolist() == expected
