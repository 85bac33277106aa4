"""CapacityError: a model, cache or batch that does not fit the sockets' memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rdu_sim.input_errors import InputError

if TYPE_CHECKING:
    from rdu_sim.scenario import Scenario


class CapacityError(InputError):
    """What does not fit, where, by how much, and how to shrink it (one user-facing message).

    Raised by tier placement and batch-capacity planning; the CLI prints it without a
    traceback (it is bad input, not a bug).
    """


class WeightsCapacityError(CapacityError):
    """The weights alone outgrow HBM under ``memory.weights: hbm``, which keeps every weight
    there: no batch runs, ``auto`` or explicit (slots that leave weights that fit no room
    are a `SlotsCapacityError` of the memory plan); DDR holds weights only when
    ``memory.weights`` says so (``hot_set``, ``streamed``)."""


FEWER_SLOTS = "lower serving.batch_slots"
"""The remedy of fewer slots as a plan of the workload's slots words it (`SlotsCapacityError`
names a command's option in its place)."""


def join_remedies(remedies: list[str]) -> str:
    """``a, b or c``: a capacity error's ways out, in one clause."""
    if len(remedies) > 1:
        return ", ".join(remedies[:-1]) + f" or {remedies[-1]}"
    return remedies[0]


class SlotsCapacityError(CapacityError):
    """The KV cache and activations of the batch slots alone exceed HBM: the slot count is
    at fault, so a plan of the slots the workload sets names that field (:func:`at_slots`).
    ``field``: the field it names, once located (None before: a step's ``--batch``, say).
    ``problem``, ``remedies`` and ``slot_tokens`` (the tokens a slot is sized for) let a
    command that gave the slots itself say so (:meth:`given_by`). ``sizes``: the fields
    whose values size the plan (the slots, HBM, a slot's tokens, dtypes, layout), so an
    override of any of them is named as a cause (:func:`at_slots`)."""

    field: str | None = None
    problem: str = ""
    remedies: tuple[str, ...] = ()
    slot_tokens: int = 0
    sizes: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, problem: str, remedies: list[str], slot_tokens: int, sizes: tuple[str, ...] = ()
    ) -> SlotsCapacityError:
        """The error ``problem; remedies`` (at least one remedy), its parts kept."""
        exc = cls(f"{problem}; {join_remedies(remedies)}")
        exc.problem, exc.remedies, exc.slot_tokens = problem, tuple(remedies), slot_tokens
        exc.sizes = sizes
        return exc

    def given_by(self, option: str, context: int | None = None) -> str:
        """The message for slots a command's ``option`` gave (a step's ``--batch``), not
        ``serving.batch_slots``: the remedy of fewer slots names the option, and a step
        ``context`` (its ``--context``) shorter than a slot is said not to shrink it: the
        plan sizes every slot for ``slot_tokens`` (``serving.max_context``, or a KV policy's
        budget), whatever the step's context. The plain message when it has no parts."""
        if not self.remedies:
            return str(self)
        remedies = [
            f"lower {option}{r.removeprefix(FEWER_SLOTS)}" if r.startswith(FEWER_SLOTS) else r
            for r in self.remedies
        ]
        note = ""
        if context is not None and context < self.slot_tokens:
            note = (
                f"; --context {context} does not shrink a slot: the memory plan sizes each for "
                f"{self.slot_tokens} tokens, whatever a step's context"
            )
        return f"{self.problem}{note}; {join_remedies(remedies)}"


def at_slots(scenario: Scenario, slots: int, exc: SlotsCapacityError) -> SlotsCapacityError:
    """``exc`` located where its slots came from, the one rule of every command that plans
    memory (run, check, step, inspect graph: all plan through ``Compiler.placement``): a plan
    of the workload's own ``serving.batch_slots`` names that field (``Scenario.at_field``:
    file, line or the --set that gave it), and every override among the fields that size
    the plan (``exc.sizes``: a sweep's HBM capacity, not the base file's line). ``exc`` as
    it is for other slots (a step's larger ``--batch``; ``auto`` picks slots that fit) and
    when its message already names the workload's file (located once, never twice)."""
    message, field = str(exc), "serving.batch_slots"
    named = exc.field is not None or message.startswith(f"{scenario.workload_file}:")
    if named or slots != scenario.workload.serving.batch_slots:
        return exc
    located = SlotsCapacityError(scenario.at_field(field, message, (field, *exc.sizes)))
    located.field, located.sizes = field, exc.sizes
    return located


class HardwareCapacityError(CapacityError):
    """A kernel the hardware's socket cannot hold (more stages than its PCUs or PMUs, buffers
    more than its PMUs' SRAM): ``fields`` the settings at fault, as a workload's ``--set``
    names them (``hw.socket.pcu.count``, ``engine.buffer_tiles``), most direct first, for
    :func:`at_hardware` to locate it."""

    fields: tuple[str, ...] = ()

    @classmethod
    def of(cls, message: str, fields: tuple[str, ...]) -> HardwareCapacityError:
        """The error ``message`` at one of ``fields``."""
        exc = cls(message)
        exc.fields = fields
        return exc


def at_hardware(scenario: Scenario, exc: HardwareCapacityError) -> CapacityError:
    """``exc`` located as the loader locates a field's problem: when overrides set any of its
    fields, at the first of those (``Scenario.at_field``: the workload's file and the field)
    naming every override that set one of its fields (``--set hw.socket.pcu.count=4 --set
    hw.socket.usable_fraction=0.001`` names both, the second the cause); else at the first
    ``hw.*`` one the hardware file itself sets (its file, line and field: the lines read at
    load, ``Scenario.hardware_lines``), else at the hardware file and its first ``hw.*``
    field (one the file it extends set). The one rule of every command that compiles (run,
    step, check)."""
    from rdu_sim.config.errors import ConfigIssue
    from rdu_sim.config.overrides import override_for

    message = str(exc)
    overridden = [f for f in exc.fields if override_for(f, scenario.overrides) is not None]
    if overridden:
        return CapacityError(scenario.at_field(overridden[0], message, exc.fields))
    own = [tuple(f.removeprefix("hw.").split(".")) for f in exc.fields if f.startswith("hw.")]
    if not own:
        return exc
    lines = scenario.hardware_lines
    path = next((p for p in own if p in lines), own[0])
    issue = ConfigIssue(scenario.hardware_file, ".".join(path), message, lines.get(path))
    return CapacityError(str(issue))
