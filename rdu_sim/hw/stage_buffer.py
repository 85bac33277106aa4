"""A PMU-backed buffer that decouples a producer stage from a consumer stage.

The buffer holds at most ``capacity`` tiles (1 = single, 2 = double
buffering). A tile owns its slot from the moment the producer reserves it
until the consumer has finished reading it, so a slow consumer stalls the
producer: real back-pressure, not a rate formula.

Timing of one tile:

1. ``put``: the producer waits for a free slot (blocks when full), then its
   bytes stream into SRAM through the PMU write port at ``sram_bandwidth``
   (FIFO across tiles). ``put`` returns as soon as the slot is reserved: the
   producer's next compute overlaps the write, as in a streaming dataflow
   pipeline; the tile becomes visible when its write ends.
2. ``get``: the consumer waits for a tile (blocks when empty) and reads it
   through the read port (FIFO, separate from the write port, starting no
   earlier than the tile's write end).
3. The slot is freed by ``release()`` once the consumer is done with the tile
   (``get(hold=True)``, the default: a streaming consumer computes on operands
   that stay in the PMU, so capacity 2 is classic double buffering), or right
   after the read with ``get(hold=False)`` (copy-out consumers).

``put``/``get`` are generator functions: call them with ``yield from`` inside a
stage process, or wrap them in ``env.process(...)``. A loop that takes a tile every
turn calls their parts itself (``offer``/``wait_to_put``; ``take``, ``read``,
``read_done``) and pays no generator frame for them (the engine's stage runners).

Cost: slots and tiles are plain counters and FIFO queues (this is exactly a
``simpy.Container`` of slots and a ``simpy.Store`` of tiles with FIFO grant
order), so a ``put`` into a free slot and a ``get`` of a waiting tile schedule
no event; only a blocked producer or consumer waits on one, and the read port
costs one timeout per tile. A pipeline edge then costs about two events per
tile instead of five.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from typing import Any

from rdu_sim.des.environment import CountingEnvironment, Event
from rdu_sim.hw.stats import ByteCounter

Tile = tuple[float, float, Any]
"""A tile in the buffer: when its write ends, its bytes, and its payload."""


class StageBuffer:
    """Bounded FIFO of tiles in PMU SRAM with separate write and read ports.

    Args:
        env: the SimPy environment.
        capacity: slots, in tiles (>= 1).
        sram_bandwidth: bytes/s of each port (the PMUs backing this buffer).
        name: label for reports.
    """

    def __init__(
        self,
        env: CountingEnvironment,
        capacity: int,
        sram_bandwidth: float,
        name: str = "buffer",
    ) -> None:
        if capacity < 1:
            raise ValueError(f"{name}.capacity must be >= 1 tile, got {capacity}")
        if sram_bandwidth <= 0:
            raise ValueError(f"{name}.sram_bandwidth must be > 0, got {sram_bandwidth}")
        self.env = env
        self.name = name
        self.capacity = capacity
        self.sram_bandwidth = float(sram_bandwidth)
        # bytes and tiles written and read so far: plain sums (a tile adds to them at every
        # put and get), seen as ByteCounters through bytes_written and bytes_read
        self._written, self._writes, self._read, self._reads = 0.0, 0, 0.0, 0
        self.bytes_in_flight = 0.0
        self.peak_bytes_in_flight = 0.0
        self.producer_stall_time = 0.0
        self._free = capacity  # slots nobody holds
        self._slot_waiters: deque[Event] = deque()  # producers waiting for a slot
        # tiles written, not yet taken: (write end, bytes, payload)
        self._tiles: deque[Tile] = deque()
        self._tile_waiters: deque[Event] = deque()  # consumers waiting for a tile
        self._write_free_at = float(env.now)
        self._read_free_at = float(env.now)
        self._held: deque[float] = deque()

    def occupancy(self) -> tuple[int, int, int, int, int]:
        """Free slots, tiles waiting, tiles held, producers and consumers waiting."""
        return (
            self._free,
            len(self._tiles),
            len(self._held),
            len(self._slot_waiters),
            len(self._tile_waiters),
        )

    def ports_free_at(self) -> tuple[float, float]:
        """When the write and the read port have finished what they were given."""
        return self._write_free_at, self._read_free_at

    def bytes_moved(self) -> float:
        """Bytes written into the buffer plus bytes read out of it so far (what its ports have
        carried: the engine reads it at every fast-forward mark, so no counter is built)."""
        return self._written + self._read

    @property
    def bytes_written(self) -> ByteCounter:
        """Bytes written into the buffer so far, and by how many tiles (a snapshot)."""
        return ByteCounter(self._written, self._writes)

    @property
    def bytes_read(self) -> ByteCounter:
        """Bytes read out of the buffer so far (reads that have ended), and by how many tiles
        (a snapshot)."""
        return ByteCounter(self._read, self._reads)

    @property
    def tiles_held(self) -> int:
        """Slots currently reserved (being written, waiting, being read, or held)."""
        return self.capacity - self._free

    def offer(self, nbytes: float, payload: Any = None) -> float | None:
        """:meth:`put` without waiting: if a slot is free now, take it and start writing
        (returns when the tile becomes visible); if not, do nothing and return None (then
        ``put`` waits). Not a generator: a producer that finds a slot pays no frame."""
        if nbytes < 0:
            raise ValueError(f"{self.name}: nbytes must be >= 0, got {nbytes}")
        if self._free > 0 and not self._slot_waiters:
            self._free -= 1
            return self._write(float(self.env._now), nbytes, payload)
        return None

    def put(self, nbytes: float, payload: Any = None) -> Generator[Event, Any, float]:
        """Reserve a slot (blocking while full) and start writing ``nbytes``.

        ``payload`` travels with the tile and is what :meth:`get` returns for it (default:
        ``nbytes``). Returns the time at which the tile becomes visible to the consumer.
        """
        end = self.offer(nbytes, payload)
        if end is not None:
            return end
        return (yield from self.wait_to_put(nbytes, payload))

    def wait_to_put(self, nbytes: float, payload: Any = None) -> Generator[Event, Any, float]:
        """The rest of :meth:`put` once :meth:`offer` found no free slot: wait until
        :meth:`release` hands one over, then write (a producer that offered first calls this,
        not ``put``, so the slot is not looked for twice)."""
        env = self.env
        asked = float(env._now)
        waiter = env.event()
        self._slot_waiters.append(waiter)
        yield waiter
        now = float(env._now)
        self.producer_stall_time += now - asked
        return self._write(now, nbytes, payload)

    def _write(self, now: float, nbytes: float, payload: Any) -> float:
        """Write a tile into the slot reserved at ``now``; hand it to a waiting consumer."""
        start = now if now > self._write_free_at else self._write_free_at
        end = start + nbytes / self.sram_bandwidth
        self._write_free_at = end
        self._written += nbytes
        self._writes += 1
        in_flight = self.bytes_in_flight = self.bytes_in_flight + nbytes
        if in_flight > self.peak_bytes_in_flight:
            self.peak_bytes_in_flight = in_flight
        tile = (end, nbytes, nbytes if payload is None else payload)
        if self._tile_waiters:
            self._tile_waiters.popleft().succeed(tile)
        else:
            self._tiles.append(tile)
        return end

    def get(self, hold: bool = True) -> Generator[Event, Any, Any]:
        """Take the oldest tile (blocking while empty) and read it.

        With ``hold`` the slot stays reserved until :meth:`release`; without,
        it is freed when the read ends. Returns the tile's payload (``put``'s; its size
        in bytes by default).
        """
        tile = self.take()
        if not isinstance(tile, tuple):  # wait until put() hands a tile over
            tile = yield tile
        yield self.env.timeout(self.read(tile))
        self.read_done(tile[1], hold)
        return tile[2]

    def take(self) -> Tile | Event:
        """:meth:`get`'s first part: the oldest tile ``(write end, bytes, payload)`` if one
        is waiting and no consumer is ahead, else the event :meth:`put` succeeds with the
        tile it hands over (a stage's tile loop calls this, :meth:`read` and
        :meth:`read_done` itself: no generator frame a tile)."""
        if self._tiles and not self._tile_waiters:
            return self._tiles.popleft()
        waiter = self.env.event()
        self._tile_waiters.append(waiter)
        return waiter

    def read(self, tile: Tile) -> float:
        """Book the read port for ``tile`` taken now: it starts no earlier than the tile's
        write end and the port's previous read (FIFO). Returns the seconds until it ends."""
        now = start = float(self.env._now)
        w_end = tile[0]
        if w_end > start:
            start = w_end
        if self._read_free_at > start:
            start = self._read_free_at
        end = start + tile[1] / self.sram_bandwidth
        self._read_free_at = end
        return end - now

    def read_done(self, nbytes: float, hold: bool = True) -> None:
        """A read of ``nbytes`` has ended: count it, hold its slot (or free it)."""
        # Counted when the read has ended: the PMU-port time read at a layer boundary
        # (``kernel_sim``) is of bytes moved by then.
        self._read += nbytes
        self._reads += 1
        self._held.append(nbytes)
        if not hold:
            self.release()

    def release(self) -> None:
        """Free the slot of the oldest tile taken with ``get(hold=True)``."""
        if not self._held:
            raise RuntimeError(f"{self.name}: release() without a held tile")
        self.bytes_in_flight -= self._held.popleft()
        if self._slot_waiters:  # the slot passes straight to the oldest waiting producer
            self._slot_waiters.popleft().succeed()
        else:
            self._free += 1
