"""What a cluster run emits, per request, beside the serving records its replicas write.

The replicas' servers share one ``ServingRecords`` (arrival, admission, first token, finish,
slot, completions per request id: each field is written by the replica that does that part
of the work). This adds the cluster's own columns: which replica took the request (and
which decoded it, when serving is disaggregated), whether it was rejected or truncated for
its length, the prompt tokens its prefix cache spared, and its KV transfer.

Per-request columns are behind this one class (and ``ServingRecords``), preallocated int64
arrays: about 150 bytes per request with the serving records, so a million requests cost
~150 MB. A later bounded-memory store can replace them behind the same attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

UNSET = -1
PENDING, SERVED, REJECTED = 0, 1, 2


def _unset(n: int) -> NDArray[np.int64]:
    return np.full(n, UNSET, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class ClusterRecords:
    """Per-request cluster columns (request id = index, in arrival order): every array made
    with the records and none replaced after (frozen; the runs write their items)."""

    size: int
    status: NDArray[np.int8] = field(init=False)  # PENDING, SERVED or REJECTED
    truncated: NDArray[np.bool_] = field(init=False)  # lengths cut to the context limit
    routed: NDArray[np.int64] = field(init=False)  # times the router dispatched it (0 or 1)
    replica: NDArray[np.int64] = field(init=False)  # replica that took it (prefill side)
    decode_replica: NDArray[np.int64] = field(init=False)  # disaggregated: replica decoding it
    cached_tokens: NDArray[np.int64] = field(init=False)  # prompt tokens the prefix cache spared
    kv_bytes: NDArray[np.int64] = field(init=False)  # disaggregated: bytes of its KV transfer
    kv_start_ps: NDArray[np.int64] = field(init=False)  # the decode slot is reserved
    kv_end_ps: NDArray[np.int64] = field(init=False)  # the KV cache has arrived

    def __post_init__(self) -> None:
        n = self.size
        columns = {
            "status": np.zeros(n, dtype=np.int8),
            "truncated": np.zeros(n, dtype=np.bool_),
            "routed": np.zeros(n, dtype=np.int64),
            "replica": _unset(n),
            "decode_replica": _unset(n),
            "cached_tokens": np.zeros(n, dtype=np.int64),
            "kv_bytes": np.zeros(n, dtype=np.int64),
            "kv_start_ps": _unset(n),
            "kv_end_ps": _unset(n),
        }
        for name, column in columns.items():
            object.__setattr__(self, name, column)

    def __len__(self) -> int:
        return self.size
