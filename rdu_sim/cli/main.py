"""The `rdu-sim` command: a group of subcommands, each in its own module.

Each subcommand lives in `rdu_sim/cli/<name>_cmd.py` as a click command named `command`.
Modules are imported only when their command runs, so `rdu-sim check` stays fast even when
`plot` pulls in matplotlib or `run` the simulator, and `rdu-sim --help` imports none of
them: it lists each command with its summary from `SUMMARIES` (the first paragraph of the
command's help, which a test keeps equal to the module's). Input errors are reported by
`RduGroup` (rdu_sim/cli/errors.py): `error: ...`, exit 2.
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import click

from rdu_sim import __version__, interrupts, native
from rdu_sim.cli import whole_output
from rdu_sim.cli.errors import RduGroup, print_interrupted

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
    "calibrate": "rdu_sim.cli.calibrate_cmd",
    "compare": "rdu_sim.cli.compare_cmd",
    "kv-demo": "rdu_sim.cli.kvdemo_cmd",
    "examples": "rdu_sim.cli.examples_cmd",
}

NOT_STARTED = "the command had not started: nothing was written"
"""What a command interrupted while its module is imported kept."""

# command name -> what a stop anywhere in it keeps when the command itself says nothing
# more precise (a run once its report is printed, a sweep's stored points, check's files,
# calibrate's cache: each says its own): the README's one line saying what was kept, for
# every command (tests/test_interrupts.py keeps one per command).
STOPS: dict[str, str] = {
    "run": "the run had not finished: nothing was printed or written",
    "step": "the step had not finished: nothing was printed or written",
    "check": "no file had been checked",
    "schema": "the schema had not been printed: nothing was written",
    "inspect": "the inspection had not finished: nothing was printed or written",
    "sweep": "the sweep had not started: nothing was written",
    "plan": "the plan had not started: nothing was written",
    "plot": "the plot had not been drawn: nothing was written",
    "validate": "the suite had not finished: nothing was printed",
    "calibrate": "the fit had not started: nothing was written",
    "compare": "the comparison had not finished: nothing was printed or written",
    "kv-demo": "the demo had not finished: nothing was printed",
    "examples": "nothing was copied",
}

RECORD_COMMIT = frozenset({"run", "step"})
"""Commands whose output records the simulator's commit: in a checkout its git lookup
(``rdu_sim.checkout``) starts before their modules are imported, and runs beside them."""

# command name -> the first paragraph of its help, what `rdu-sim --help` lists without
# importing the command (tests/test_cli_commands.py keeps it equal to the command's own).
SUMMARIES: dict[str, str] = {
    "run": "Simulate serving WORKLOAD (or a cluster file) and report throughput, latency and "
    "memory (for a cluster: goodput under its SLO, per class and per replica).",
    "step": "Time one decode or prefill step of WORKLOAD on the hardware model.",
    "check": "Validate hardware files, workloads, sweep specs, request traces and measurement "
    "files (all of them, then exit 2 if any failed). Example: rdu-sim check hw_configs/*.yaml "
    "workloads/*.yaml",
    "schema": "Print the JSON Schema of a workload, hardware, cluster, plan or sweep file.",
    "inspect": "Look at a model's derived figures or a workload's compiled graph.",
    "sweep": "Expand the sweep SPEC into points, simulate those not yet done, store one row each.",
    "plan": "Find the cheapest configuration (fewest devices) meeting the SLO of SPEC's traffic.",
    "plot": "Draw a KIND plot of INPUT (a run JSON, a sweep database or a workload YAML).",
    "validate": "Run the calibration suite and compare with SambaNova's published SN40L figures.",
    "calibrate": "Fit hardware and serving-stack parameters to measurements and published "
    "figures (a calibration spec, or MEASUREMENTS with --fit); write the calibrated overlays.",
    "compare": "Run WORKLOAD on each --hardware and each value of each --vary and show step "
    "time, tokens/s, share of peak, what binds each and why one wins.",
    "kv-demo": "Attention-output error and needle recall of each KV policy as the budget shrinks.",
    "examples": "List the shipped example files by name (every command takes a name where it "
    "takes a file), or copy them out to edit: rdu-sim examples copy DIR.",
}


def _import_frozen(module_name: str, freeze: bool = True) -> ModuleType:
    """Import a command's module with Python's cyclic garbage collector paused, then (with
    ``freeze``) freeze what the imports made (``gc.freeze``: kept out of later passes until
    ``LazyGroup.invoke`` ends). The imports make ~100,000 long-lived objects (classes,
    functions, pydantic's models) and free almost none, so every pass over them, during the
    imports and after, finds nothing: ~10 ms of a step's ~0.3 s."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return importlib.import_module(module_name)
    finally:
        if freeze:
            gc.freeze()
        if was_enabled:
            gc.enable()


_NAME = "rdu_sim.command"  # the subcommand's name in the context's meta


class LazyGroup(RduGroup):
    """Imports a subcommand's module the first time the command is needed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx)})

    _invoking = 0  # invocations running: a command's import freezes only inside one

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; then what its import froze is collectable again (a process that
        calls the CLI more than once, as the tests do, keeps no garbage for good)."""
        frozen_before = gc.get_freeze_count()
        self._invoking += 1
        try:
            return super().invoke(ctx)
        finally:
            self._invoking -= 1
            if not frozen_before:
                gc.unfreeze()

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """The subcommand the arguments name, noted for what its stop says (``STOPS``)."""
        name, command, rest = super().resolve_command(ctx, args)
        ctx.meta[_NAME] = name
        return name, command, rest

    def kept_at_stop(self, ctx: click.Context) -> str:
        return STOPS.get(ctx.meta.get(_NAME) or "", "")

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = COMMANDS.get(cmd_name)
        if module_name is None:
            return super().get_command(ctx, cmd_name)
        if cmd_name in RECORD_COMMIT:
            from rdu_sim import checkout

            checkout.start()
        with interrupts.kept_on_stop(NOT_STARTED):
            command = _import_frozen(module_name, freeze=self._invoking > 0).command
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name}.command is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of `--help`, from `SUMMARIES` (no command module is imported)."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            summary = SUMMARIES.get(name)
            if summary is None:  # a command added to the group directly
                command = self.get_command(ctx, name)
                if command is None or command.hidden:
                    continue
                rows.append((name, command.get_short_help_str(limit)))
            else:
                rows.append((name, click.Command(name, help=summary).get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__,
    "--version",
    "-V",
    prog_name="rdu-sim",
    # pip hides the build's output: say here whether the engine was compiled (rdu_sim.native)
    message=f"%(prog)s, version %(version)s ({'compiled' if native.compiled() else 'pure Python'})",
)
def cli() -> None:
    """Simulate SambaNova SN40L sockets serving large language models.

    Start with `rdu-sim check` on a workload, then `rdu-sim run` it.
    Bad input exits with status 2 and a message naming the file, field and line.
    """


def main(held: Sequence[int] = ()) -> None:
    """Run the `rdu-sim` command line (called by the console script, ``cli.entry``):
    SIGINT and SIGTERM stop it cleanly (``rdu_sim.interrupts``: one line, status 128 + the
    signal, never an abort inside the compiled core); ``held``, the signals the entry point
    held while this module loaded, stop it before it starts. The process ends when it
    returns (or raises), so everything left is frozen first, and the interpreter's
    collections at exit pass over none of it (~10 ms of a step: they walked every object
    the imports made)."""
    interrupts.install()  # from here a signal is the handler's, no longer ``held``'s
    whole_output.install()  # a short write to a full disk is an error, not lost bytes
    try:
        if held:
            stop = interrupts.Interrupted(held[0], NOT_STARTED)
            print_interrupted(stop)
            raise SystemExit(stop.status)
        cli(prog_name="rdu-sim")
    finally:
        interrupts.ignore_further()  # the command has ended: a signal now changes nothing
        gc.freeze()


if __name__ == "__main__":
    main()
