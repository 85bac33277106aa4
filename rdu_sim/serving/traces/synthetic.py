"""Synthetic traces in the published schemas, for tests, benchmarks and the shipped samples.

Nothing is downloaded: files of the Azure, Mooncake, BurstGPT and project formats are written
from a seeded draw that has the features the simulator uses: Poisson arrivals, lognormal
prompt and output lengths, and Mooncake-style block hashes with shared prefixes (requests
of one "conversation" share its first blocks, as multi-turn chats and common system prompts
do; each new block gets the next unused integer, as in the published trace).

    python -m rdu_sim.serving.traces.synthetic mooncake workloads/traces/x.jsonl --requests 200

It is a generator of plausible files, not a model of any published trace's statistics.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from rdu_sim.serving.traces.published import WRITERS
from rdu_sim.serving.traces.table import TraceTable


@dataclass(frozen=True)
class SyntheticTrace:
    """Parameters of a synthetic trace (lengths are lognormal, clipped to [low, high])."""

    requests: int = 200
    rate: float = 2.0  # Poisson arrivals per second
    prompt_median: float = 2048.0
    prompt_sigma: float = 0.8
    prompt_low: int = 16
    prompt_high: int = 16384
    output_median: float = 256.0
    output_sigma: float = 0.8
    output_low: int = 1
    output_high: int = 2048
    conversations: int = 20  # prefix groups; requests pick one with Zipf(1.2)-like odds
    shared_fraction: float = 0.5  # share of a prompt's blocks that are its group's prefix
    block_tokens: int = 512
    models: tuple[str, ...] = ("ChatGPT", "GPT-4")  # BurstGPT Model column values
    seed: int = 0


def _lengths(
    rng: np.random.Generator, n: int, median: float, sigma: float, low: int, high: int
) -> NDArray[np.int64]:
    draws = median * np.exp(sigma * rng.standard_normal(n))
    return np.clip(np.rint(draws), low, high).astype(np.int64)


def synthetic_table(spec: SyntheticTrace) -> TraceTable:
    """A trace table drawn from ``numpy.random.default_rng(spec.seed)`` (fixed draw order)."""
    rng = np.random.default_rng(spec.seed)
    n = spec.requests
    arrival = np.cumsum(rng.exponential(1.0 / spec.rate, size=n))
    arrival -= arrival[0]
    prompt = _lengths(
        rng, n, spec.prompt_median, spec.prompt_sigma, spec.prompt_low, spec.prompt_high
    )
    output = _lengths(
        rng, n, spec.output_median, spec.output_sigma, spec.output_low, spec.output_high
    )
    weights = 1.0 / np.arange(1, spec.conversations + 1) ** 1.2
    group = rng.choice(spec.conversations, size=n, p=weights / weights.sum())
    model = rng.choice(len(spec.models), size=n)
    prefixes: dict[int, list[int]] = {}
    next_hash = 0
    offsets = [0]
    values: list[int] = []
    for i in range(n):
        blocks = -(-int(prompt[i]) // spec.block_tokens)
        shared = int(blocks * spec.shared_fraction)
        prefix = prefixes.setdefault(int(group[i]), [])
        while len(prefix) < shared:
            prefix.append(next_hash)
            next_hash += 1
        own = list(range(next_hash, next_hash + blocks - shared))
        next_hash += blocks - shared
        values.extend(prefix[:shared] + own)
        offsets.append(len(values))
    return TraceTable(
        format="synthetic",
        arrival_s=arrival,
        prompt_tokens=prompt,
        output_tokens=output,
        hash_offsets=np.asarray(offsets, dtype=np.int64),
        hash_values=np.asarray(values, dtype=np.int64),
        columns={
            "Model": np.asarray(spec.models, dtype=np.object_)[model],
            "Log Type": np.full(n, "Conversation log", dtype=np.object_),
        },
    )


def write_synthetic(path: Path, format: str, spec: SyntheticTrace) -> TraceTable:
    """Draw a synthetic trace and write it in ``format``; return what was drawn."""
    table = synthetic_table(spec)
    WRITERS[format](path, table)
    return table


def main(argv: list[str] | None = None) -> None:
    """Command line: write one synthetic trace file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("format", choices=sorted(WRITERS))
    parser.add_argument("path", type=Path)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--prompt-median", type=float, default=2048.0)
    parser.add_argument("--output-median", type=float, default=256.0)
    parser.add_argument("--prompt-high", type=int, default=16384)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    spec = SyntheticTrace(
        requests=args.requests,
        rate=args.rate,
        prompt_median=args.prompt_median,
        output_median=args.output_median,
        prompt_high=args.prompt_high,
        seed=args.seed,
    )
    write_synthetic(args.path, args.format, spec)


if __name__ == "__main__":
    main()
