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


class SlotsCapacityError(CapacityError):
    """The KV cache and activations of the batch slots alone exceed HBM: the slot count is
    at fault, so a plan of the slots the workload sets names that field (:func:`at_slots`).
    ``field``: the field it names, once located (None before: a step's ``--batch``, say)."""

    field: str | None = None


def at_slots(scenario: Scenario, slots: int, exc: SlotsCapacityError) -> SlotsCapacityError:
    """``exc`` located where its slots came from, the one rule of every command that plans
    memory (run, check, step, inspect graph: all plan through ``Compiler.placement``): a plan
    of the workload's own ``serving.batch_slots`` names that field (``Scenario.at_field``:
    file, line or the --set that gave it). ``exc`` as it is for other slots (a step's larger
    ``--batch``; ``auto`` picks slots that fit) and when its message already names the
    workload's file (located once, never twice)."""
    message, field = str(exc), "serving.batch_slots"
    named = exc.field is not None or message.startswith(f"{scenario.workload_file}:")
    if named or slots != scenario.workload.serving.batch_slots:
        return exc
    located = SlotsCapacityError(scenario.at_field(field, message))
    located.field = field
    return located
