"""Read sweep results back: `load(db)` gives a pandas DataFrame; `export` writes CSV/Parquet.

One row per point: key, sweep, status, the axis values (one column per axis path, as the
spec gave them), the metrics (one column per dotted metric path), then error, timings,
version and worker. Failed points have empty metric columns and their error text.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rdu_sim.config.errors import ConfigError
from rdu_sim.sweep.store import Store

if TYPE_CHECKING:
    import pandas as pd

_LEADING = ("key", "sweep", "status")
_TRAILING = ("error", "wall_s", "started", "finished", "attempts", "version", "worker")


def load(
    db: str | Path, *, sweep: str | None = None, keys: Sequence[str] | None = None
) -> pd.DataFrame:
    """The results in `db` as a DataFrame (only `sweep`'s rows, or `keys`, when given)."""
    import pandas as pd  # here, not at import: workers and `rdu-sim check` do not need it

    with Store(Path(db), create=False) as store:
        rows = store.rows(keys=keys, sweep=sweep)
    axes: dict[str, None] = {}
    metrics: dict[str, None] = {}
    records: list[dict[str, Any]] = []
    for row in rows:
        overrides = json.loads(row["overrides"])
        values = json.loads(row["metrics"]) if row["metrics"] else {}
        axes.update(dict.fromkeys(overrides))
        metrics.update(dict.fromkeys(values))
        record = {name: row[name] for name in (*_LEADING, *_TRAILING)}
        record.update(overrides)
        for name, value in values.items():
            record.setdefault(name, value)
        records.append(record)
    columns = [*_LEADING, *axes, *(m for m in metrics if m not in axes), *_TRAILING]
    return pd.DataFrame.from_records(records, columns=columns)


def parquet_available() -> bool:
    """True when pyarrow can be imported (pandas writes Parquet with it)."""
    return importlib.util.find_spec("pyarrow") is not None


def export(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write `frame` as CSV (.csv) or Parquet (.parquet, needs pyarrow)."""
    out = Path(path)
    suffix = out.suffix.lower()
    if suffix == ".csv":
        frame.to_csv(out, index=False)
    elif suffix in (".parquet", ".pq"):
        if not parquet_available():
            raise ConfigError.single(
                str(out),
                "",
                "Parquet export needs pyarrow, which is not "
                "installed (pip install pyarrow); export to .csv instead",
            )
        mixed = [
            c
            for c in frame.columns
            if frame[c].dtype == object and frame[c].map(type).nunique() > 1
        ]
        frame = frame.astype({c: str for c in mixed})  # Parquet columns have one type
        frame.to_parquet(out, index=False)
    else:
        kind = repr(suffix) if suffix else "a file without an extension"
        raise ConfigError.single(str(out), "", f"cannot export to {kind}: use .csv or .parquet")
    return out
