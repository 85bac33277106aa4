"""KV-cache policies (full attention, SnapStream, StreamingLLM, SnapKV) behind one interface.

`make_policy(kv, max_context)` builds the policy a workload names (once per Scenario:
`Scenario.kv_policy`); the compiler asks it for slot sizes and decode buckets, serving for
when prefill compresses and what each decode step attends to. The NumPy functional
reference (`rdu_sim.kv.reference`) and the quality proxy (`rdu_sim.kv.quality`) are not
imported here, so importing this package stays cheap.
"""

from rdu_sim.kv.policies import (
    DEFAULT_BUDGET,
    FullPolicy,
    PolicyBase,
    PolicyError,
    Selection,
    SnapKVPolicy,
    SnapStreamPolicy,
    StreamingLLMPolicy,
    context_buckets,
    make_policy,
    policy_names,
    register_policy,
)
from rdu_sim.kv.policy import KVPolicy

__all__ = [
    "DEFAULT_BUDGET",
    "FullPolicy",
    "KVPolicy",
    "PolicyBase",
    "PolicyError",
    "Selection",
    "SnapKVPolicy",
    "SnapStreamPolicy",
    "StreamingLLMPolicy",
    "context_buckets",
    "make_policy",
    "policy_names",
    "register_policy",
]
