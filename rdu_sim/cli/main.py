"""The `rdu-sim` command: a group of subcommands, each in its own module.

Each subcommand lives in `rdu_sim/cli/<name>_cmd.py` as a click command named `command`.
Modules are imported only when their command runs (or `--help` lists them), so
`rdu-sim check` stays fast even when `plot` pulls in matplotlib or `run` the simulator.
Input errors are reported by `RduGroup` (rdu_sim/cli/errors.py): `error: ...`, exit 2.
"""

from __future__ import annotations

import importlib

import click

from rdu_sim import __version__
from rdu_sim.cli.errors import RduGroup

# command name -> module holding `command`; the one registry of subcommands.
COMMANDS: dict[str, str] = {
    "run": "rdu_sim.cli.run_cmd",
    "step": "rdu_sim.cli.step_cmd",
    "check": "rdu_sim.cli.check_cmd",
    "schema": "rdu_sim.cli.schema_cmd",
    "inspect": "rdu_sim.cli.inspect_cmd",
    "sweep": "rdu_sim.cli.sweep_cmd",
    "plan": "rdu_sim.cli.plan_cmd",
    "plot": "rdu_sim.cli.plot_cmd",
    "validate": "rdu_sim.cli.validate_cmd",
    "compare": "rdu_sim.cli.compare_cmd",
    "kv-demo": "rdu_sim.cli.kvdemo_cmd",
}


class LazyGroup(RduGroup):
    """Imports a subcommand's module the first time the command is needed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = COMMANDS.get(cmd_name)
        if module_name is None:
            return super().get_command(ctx, cmd_name)
        command = importlib.import_module(module_name).command
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name}.command is not a click command")
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="rdu-sim")
def cli() -> None:
    """Simulate SambaNova SN40L sockets serving large language models.

    Start with `rdu-sim check` on a workload, then `rdu-sim run` it.
    Bad input exits with status 2 and a message naming the file, field and line.
    """


def main() -> None:
    """Console-script entry point (`rdu-sim`)."""
    cli(prog_name="rdu-sim")


if __name__ == "__main__":
    main()
