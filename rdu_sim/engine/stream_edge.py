"""A pipeline edge that streams tiles cut-through: a ``StageBuffer`` plus completion events.

On the chip a consumer stage starts on a tile as soon as its first elements arrive, not when
the producer has finished the whole tile (the engine's tiles are a bookkeeping granularity,
far coarser than the flits a PMU streams). So a producer hands a tile to its consumers when
it *starts* the tile: ``put`` reserves the consumer's buffer slot (blocking while the buffer
is full: back-pressure) together with the event that fires when the producer has finished
the tile; ``get`` returns that event, and the consumer's tile cannot end before it. A chain
of stages then runs at the pace of its slowest member with no per-stage fill of a whole
tile, so the step time does not depend on how finely the engine tiles.

The slot is held from the producer's start of the tile until the consumer releases it after
its own tile (``release``), so a 2-slot edge is double buffering of streamed tiles.

The completion event travels with its tile as the buffer's payload, and a stage calls the
buffer's own methods: an edge adds no frame to a stage's tile loop, and taking a tile
(``take``, ``read``, ``read_done``) needs no generator.
"""

from __future__ import annotations

from rdu_sim.hw.stage_buffer import StageBuffer


class StreamEdge:
    """The edge ``producer -> consumer``: its PMU buffer and the producer's tile completions."""

    def __init__(self, buffer: StageBuffer, whole_rows: bool = False) -> None:
        self.buffer = buffer
        # The producer finishes a row only at its end (``StageProgram.whole_row_outputs``, with
        # fewer rows than tiles): the event handed with each tile is the row's end, and the
        # consumer cannot start on the tile before it (nothing of the row exists earlier).
        self.whole_rows = whole_rows
