"""CapacityError: a model, cache or batch that does not fit the sockets' memory."""

from __future__ import annotations

from rdu_sim.input_errors import InputError


class CapacityError(InputError):
    """What does not fit, where, by how much, and how to shrink it (one user-facing message).

    Raised by tier placement and batch-capacity planning; the CLI prints it without a
    traceback (it is bad input, not a bug).
    """


class SlotsCapacityError(CapacityError):
    """The KV cache and activations of the batch slots alone exceed HBM: the slot count is
    at fault, so a run whose workload sets ``serving.batch_slots`` names that field
    (``serving.run.plan_run``)."""
