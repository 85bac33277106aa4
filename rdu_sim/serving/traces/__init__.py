"""Request traces: a reader with stated limits and a registry of formats (one module each).

``read_trace(path)`` picks the format by suffix: ``.csv`` (``csv_format``) or ``.jsonl`` /
``.ndjson`` (``jsonl_format``). A new format registers itself with
``@register_format(name, suffixes, description)`` and is imported here.

Published traces (Azure, Mooncake, BurstGPT) for clusters: ``published.read_table`` and
``published.WRITERS`` (one module per format).
"""

from rdu_sim.serving.traces import csv_format, jsonl_format
from rdu_sim.serving.traces.reader import MAX_TRACE_BYTES, MAX_TRACE_ROWS, Trace, read_trace
from rdu_sim.serving.traces.registry import TraceFormat, format_for, formats, register_format

from rdu_sim.serving.traces.published import READERS, WRITERS, detect, read_table  # isort: skip
from rdu_sim.serving.traces.table import TraceTable  # isort: skip

__all__ = [
    "MAX_TRACE_BYTES",
    "MAX_TRACE_ROWS",
    "READERS",
    "WRITERS",
    "Trace",
    "TraceFormat",
    "TraceTable",
    "csv_format",
    "detect",
    "format_for",
    "formats",
    "jsonl_format",
    "read_table",
    "read_trace",
    "register_format",
]
