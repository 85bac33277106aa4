"""Request traces: a reader with stated limits and a registry of formats (one module each).

``read_trace(path)`` picks the format by suffix: ``.csv`` (``csv_format``) or ``.jsonl`` /
``.ndjson`` (``jsonl_format``). A new format registers itself with
``@register_format(name, suffixes, description)`` and is imported here. The published
traces (``azure``, ``mooncake``, ``burstgpt``) own no suffix: a cluster names them, and
``published.read_table`` reads any format, hashes and extra columns included, for it.
"""

from rdu_sim.serving.traces import csv_format, jsonl_format  # isort: skip (registered first)
from rdu_sim.serving.traces import azure, burstgpt, mooncake  # isort: skip
from rdu_sim.serving.traces.reader import MAX_TRACE_BYTES, MAX_TRACE_ROWS, Trace, read_trace
from rdu_sim.serving.traces.registry import (
    TraceFormat,
    format_for,
    formats,
    get_format,
    register_format,
)

__all__ = [
    "MAX_TRACE_BYTES",
    "MAX_TRACE_ROWS",
    "Trace",
    "TraceFormat",
    "azure",
    "burstgpt",
    "csv_format",
    "format_for",
    "formats",
    "get_format",
    "jsonl_format",
    "mooncake",
    "read_trace",
    "register_format",
]
