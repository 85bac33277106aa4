"""``python -m rdu_sim ARGS``: the ``rdu-sim`` command (``rdu_sim.cli.entry.main``), for an
environment without the console script on its PATH (a notebook kernel's, a plain checkout
with ``PYTHONPATH``)."""

from __future__ import annotations

from rdu_sim.cli.entry import main

if __name__ == "__main__":
    main()
