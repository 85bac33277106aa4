"""Speed benchmarks of the simulator itself: ``python -m benchmarks`` (from the repo root).

Eleven cases, each measured in a fresh subprocess (``python -m benchmarks --case NAME --child``)
so that cold caches are really cold and peak memory (RSS) of one case never mixes with
another's:

1. ``engine-step``: one decode step of DeepSeek-R1 on 16 sockets at 128k with SnapStream
   (load, batch capacity, compile and simulate; engine only);
2. ``serve-snapstream``: serving 10,000 requests of the calibration workload
   (workloads/deepseek-r1-128k-snapstream.yaml);
3. ``serve-full``: the same with full attention (workloads/deepseek-r1-128k-full.yaml);
4. ``sweep-200``: a 200-point sweep (benchmarks/sweep-200.yaml) on the local pool with 2
   workers, through the in-process sweep API;
5. ``sweep-hw-1000``: the 1,000-point DeepSeek-R1 hardware sweep of issue 23
   (benchmarks/sweep-deepseek-1000.yaml), 2 workers;
6. ``serve-million``: 1,000,000 SnapStream DeepSeek-R1 requests (time and peak memory);
7. ``step-cold``: one full-attention DeepSeek-R1 decode step through ``api.step``;
8. ``cli-help``: ``rdu-sim --help`` as whole processes (the median of 5);
9. ``cli-step``: ``rdu-sim step deepseek-r1-128k-snapstream --json`` as whole processes (the
   median of 5; its imports and the rest timed apart); both with Python's bytecode cached
   (in a temporary ``PYTHONPYCACHEPREFIX``, filled by one untimed run), as an installed
   package's is, whatever ``PYTHONDONTWRITEBYTECODE`` says;
10. ``cluster-mooncake-hour`` and 11. ``cluster-million``: the cluster cases
    (benchmarks/cluster_cases.py).

``--smoke`` runs the same cases at tiny sizes (the test suite uses it so the command
never rots); ``--check`` exits 1 when a case is over its budget. Budgets, the definition of
"events" and the measured figures are in docs/performance.md.
"""

SCHEMA = 1
"""Version of the ``--json`` layout (bump when a key changes meaning)."""
