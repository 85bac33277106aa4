"""`rdu-sim kv-demo`: SnapStream's selection and ring buffer on a small example (stub)."""

from __future__ import annotations

import click

from rdu_sim.cli.errors import not_available


@click.command("kv-demo")
@click.option("--policy", type=click.Choice(["full", "snapstream", "streamingllm", "snapkv"]),
              default="snapstream", show_default=True)
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True)
def command(policy: str, seed: int) -> None:
    """Show which tokens a KV policy keeps, with the NumPy reference in rdu_sim.kv."""
    not_available("kv-demo", "the demo over rdu_sim.kv.reference has not been written.")
