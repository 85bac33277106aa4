"""Published request traces (for clusters): one reader and writer module per format.

    table = read_table(Path("mooncake_trace.jsonl"), "auto")

Formats: ``rdu`` (the project's CSV/JSONL, ``rdu_sim.serving.traces.reader``), ``azure`` (Azure LLM
inference CSV), ``mooncake`` (JSONL with block ``hash_ids``), ``burstgpt`` (CSV). ``auto``
tells them apart by the file's first line. Writers produce small files in the same schemas
for tests, benchmarks and the shipped samples (nothing is downloaded). A cluster filters,
windows and scales the table (``rdu_sim.cluster.traffic``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rdu_sim.config.errors import ConfigError
from rdu_sim.serving.traces import azure, burstgpt, mooncake, rdu
from rdu_sim.serving.traces.table import TraceTable, first_line

Reader = Callable[[Path, str], TraceTable]
Writer = Callable[[Path, TraceTable], None]

READERS: dict[str, Reader] = {
    rdu.NAME: rdu.read,
    azure.NAME: azure.read,
    mooncake.NAME: mooncake.read,
    burstgpt.NAME: burstgpt.read,
}
WRITERS: dict[str, Writer] = {
    rdu.NAME: rdu.write,
    azure.NAME: azure.write,
    mooncake.NAME: mooncake.write,
    burstgpt.NAME: burstgpt.write,
}


def detect(path: Path, file: str) -> str:
    """The format of a trace file, from its first line (ConfigError when none fits)."""
    line = first_line(path, file)
    if line.startswith("{"):
        return mooncake.NAME if '"input_length"' in line else rdu.NAME
    header = {h.strip() for h in line.split(",")}
    if "ContextTokens" in header:
        return azure.NAME
    if "Request tokens" in header:
        return burstgpt.NAME
    if "prompt_tokens" in header:
        return rdu.NAME
    raise ConfigError.single(
        file,
        "",
        f"cannot tell the trace format from its first line {line[:80]!r}; set traffic.format "
        f"to one of {', '.join(sorted(READERS))}",
        1,
    )


def read_table(path: Path, format: str, file: str | None = None) -> TraceTable:
    """Read a trace of ``format`` (or ``auto``); errors name ``file`` (default: the path)."""
    name = file or str(path)
    if not path.is_file():
        raise ConfigError.single(name, "", "trace file not found")
    chosen = detect(path, name) if format == "auto" else format
    return READERS[chosen](path, name)


__all__ = ["READERS", "WRITERS", "TraceTable", "detect", "read_table"]
