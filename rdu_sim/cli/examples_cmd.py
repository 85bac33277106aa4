"""`rdu-sim examples [copy DIR]`: every shipped file by kind and name (workloads, subfolders
such as workloads/speculative/ included, clusters, sweeps, plans, hardware files, traces,
config.json models, notebooks), and a copy of them to edit.

Every command that reads a config file also takes a shipped one by name (``rdu-sim run
deepseek-r1-128k-snapstream``), installed or in a checkout (``rdu_sim.config.shipped``).
A copy keeps the shipped layout, so the relative paths inside the files still hold.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from rdu_sim.config import shipped
from rdu_sim.config.errors import WriteError
from rdu_sim.report.files import make_folder


@click.group("examples", invoke_without_command=True)
@click.pass_context
def command(ctx: click.Context) -> None:
    """List the shipped example files by name (every command takes a name where it takes a
    file), or copy them out to edit: rdu-sim examples copy DIR."""
    if ctx.invoked_subcommand is not None:
        return
    click.echo(f"shipped with rdu-sim (in {shipped.root()}):")
    base = shipped.root()
    for kind in shipped.KINDS:
        by_folder: dict[str, list[str]] = {}
        for name, path in shipped.entries(kind).items():
            where = path.relative_to(base).parent
            holder = where.parent if kind == "model" else where
            by_folder.setdefault(holder.as_posix(), []).append(name)
        for holder_name, names in sorted(by_folder.items()):
            click.echo(f"  {shipped.label(kind)} ({holder_name}/): {', '.join(sorted(names))}")
    click.echo(
        "each by name wherever a command takes a file (rdu-sim run llama3.1-8b-1socket, "
        "--hardware sn40l-8, serving.trace=mooncake-300); rdu-sim examples copy DIR to edit"
    )


@command.command("copy")
@click.argument("target", type=click.Path(path_type=Path, file_okay=False))
@click.option("--force", is_flag=True, help="Overwrite files that already exist in DIR.")
def copy(target: Path, force: bool) -> None:
    """Copy every shipped file into DIR (workloads/, hw_configs/, tests/models/,
    notebooks/), keeping the layout the files' relative paths assume. Existing files are
    kept unless --force."""
    base = shipped.root()
    copied = kept = 0
    for relative in shipped.files():
        destination = target / relative
        if destination.exists() and not force:
            kept += 1
            continue
        make_folder(destination.parent, destination)
        try:
            shutil.copyfile(base / relative, destination)
        except OSError as exc:
            raise WriteError.from_os(destination, exc) from None
        copied += 1
    note = f"; kept {kept} existing file(s) (--force overwrites them)" if kept else ""
    click.echo(f"copied {copied} file(s) into {target}{note}")
    click.echo(f"e.g. rdu-sim run {target / 'workloads' / 'llama3.1-8b-1socket.yaml'}")
