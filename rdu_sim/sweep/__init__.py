"""Design-space sweeps: expand a spec, run its points locally or on Dask, store rows in SQLite.

    from rdu_sim.sweep import run_sweep, load
    summary = run_sweep("workloads/sweeps/llama8b-batch.yaml", workers=2)
    frame = load(summary.db)

- `check_spec(path)`: validate a spec and resolve every point, running nothing.
- `run_sweep(spec, db=, workers=, cluster=, retry_failed=, dry_run=, progress=, evaluator=)`.
- `load(db)`: a pandas DataFrame, one row per point; `export(frame, path)`: CSV or Parquet.
See docs/sweeps.md for the spec format and the database schema.
"""

from rdu_sim.sweep.evaluators import evaluator_names, register
from rdu_sim.sweep.expand import Expansion, Point, expand
from rdu_sim.sweep.load import export, load, parquet_available
from rdu_sim.sweep.run import Plan, SpecCheck, SweepSummary, check_spec, default_db, run_sweep
from rdu_sim.sweep.spec import LoadedSpec, SweepSpec, load_spec

__all__ = [
    "Expansion", "LoadedSpec", "Plan", "Point", "SpecCheck", "SweepSpec", "SweepSummary",
    "check_spec", "default_db", "evaluator_names", "expand", "export", "load", "load_spec",
    "parquet_available", "register", "run_sweep",
]
