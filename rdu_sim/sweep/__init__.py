"""Design-space sweeps: expand a spec, run its points locally or on Dask, store rows in SQLite.

    from rdu_sim.sweep import run_sweep, load
    summary = run_sweep("workloads/sweeps/llama8b-batch.yaml", workers=2)
    frame = load(summary.db)            # one row per point: axes, metrics, status, error

API
- `check_spec(path) -> SpecCheck`: validate a spec and resolve every point, running nothing
  (`rdu-sim check` calls it). Errors are ConfigErrors naming the spec file, field and line.
- `run_sweep(spec, db=None, workers=None, cluster=None, retry_failed=False, rerun=False,
  dry_run=False, progress=False, evaluator=None) -> SweepSummary`: run or resume (for
  users: README.md, "From Python"); bad input raises a ConfigError (a StoreError for the
  database), both `rdu_sim.InputError`s. `workers=1` runs in this
  process, N a local process pool (default: the core count; 0 or less is a ValueError, as
  `--workers 0` is refused); `cluster="local"` or `"tcp://host:port"` runs on
  dask.distributed. `progress` is a bool or a `progress.Reporter` (not a callable).
- `load(db, sweep=None, keys=None, metrics=None) -> pandas.DataFrame` (a `sweep` the
  database does not hold is a StoreError naming those it does); `export(frame,
  "x.csv"|"x.parquet")`.
- `expand(load_spec(path)) -> Expansion` (the resolved `Point`s), `register(name, options)`
  to add an evaluator.

Spec format (YAML; full rules in rdu_sim/sweep/spec.py)
    name: llama8b-batch                       # default: the file's stem
    base: ../llama3.1-8b-1socket.yaml         # workload, relative to the spec
    set: {serving.requests: 32}               # fixed overrides (dotted paths; hw.* = hardware)
    axes:                                     # grid product, in this order
      serving.batch_slots: [1, 2, 4, 8]       # a list ...
      hw.socket.hbm.bandwidth: {start: 0.8, stop: 3.2, num: 7, unit: TB/s}   # ... or a range:
      # {start, stop, step} or {start, stop, num, scale: linear|log}; stop inclusive
    zip:                                      # groups that step together (equal lengths)
      - {parallelism.tp: [1, 2, 4], hw.system.sockets: [1, 2, 4]}
    metrics: [decode_tokens_per_s, ttft_s]    # result keys to keep; a mapping keeps its leaves
    evaluator: {name: simulate}               # or synthetic (a test hook, see evaluators.py)

Database (table `results`, one row per point; see store.py): key (sha256 of the resolved
config), sweep, overrides, config, metrics (JSON), status (done|failed), error, version,
worker, wall_s, started, finished, attempts. View `results_flat` spreads axes and metrics
into columns. Table `claims` holds the points a running sweep is computing (claims.py), so
two sweeps on one database compute each point once.
"""

from rdu_sim.sweep.evaluators import evaluator_names, register
from rdu_sim.sweep.expand import Expansion, Point, expand
from rdu_sim.sweep.load import export, load, parquet_available
from rdu_sim.sweep.run import Plan, SpecCheck, SweepSummary, check_spec, default_db, run_sweep
from rdu_sim.sweep.spec import LoadedSpec, SweepSpec, load_spec

__all__ = [
    "Expansion",
    "LoadedSpec",
    "Plan",
    "Point",
    "SpecCheck",
    "SweepSpec",
    "SweepSummary",
    "check_spec",
    "default_db",
    "evaluator_names",
    "expand",
    "export",
    "load",
    "load_spec",
    "parquet_available",
    "register",
    "run_sweep",
]
