"""A pool's load board computes every replica's outstanding tokens in one reused array: it
must agree, row by row and read after read, with the one-server rule on plain ints."""

from __future__ import annotations

import numpy as np

from rdu_sim.cluster.load_board import LoadBoard
from rdu_sim.serving.load import outstanding_at


def test_board_reads_match_the_rule_per_row_at_every_read() -> None:
    rng = np.random.default_rng(3)
    board = LoadBoard(37)
    first = None
    for _ in range(200):
        row = board.row(int(rng.integers(len(board))))
        if rng.integers(2):
            start = int(rng.integers(0, 10**9))
            step = int(rng.integers(1, 10**6))
            row.begin_run(
                start, start + step * int(rng.integers(1, 50)), step, int(rng.integers(1, 9))
            )
        else:
            row.end_run(int(rng.integers(0, 5)))
        row.add(int(rng.integers(0, 3000)))
        now = int(rng.integers(0, 2 * 10**9))
        tokens = board.tokens(now)
        first = tokens if first is None else first
        assert tokens is first  # one array, rewritten at every read
        expected = [
            int(
                outstanding_at(
                    now,
                    int(board.outstanding[i]),
                    int(board.run_start[i]),
                    int(board.run_end[i]),
                    int(board.run_step[i]),
                    int(board.run_decoding[i]),
                )
            )
            for i in range(len(board))
        ]
        assert tokens.tolist() == expected
