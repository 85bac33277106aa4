"""Executors: run tasks and yield their Outcomes as they complete, in whatever order.

Three of them, one contract (`Iterator[Outcome]`, one per task, the parent writes each as
it arrives):
- `run_serial`: in this process, one after another (`--workers 1`).
- `run_pool`: a local ProcessPoolExecutor in a 'forkserver' (or 'spawn') context: no fork of
  a parent holding a SQLite connection and threads.
- `run_dask`: a dask.distributed cluster (`tcp://host:port`, or 'local' for a LocalCluster
  on loopback); `check_cluster` refuses a missing Dask (naming the extra, `rdu_sim.extras`)
  or an address Dask cannot parse before anything runs.
All call the in-process API through `worker.run_task`; none shells out to the CLI. Pool and
Dask hand out sibling batches (`worker.sibling_batches`: points differing only in serving
knobs, and such groups differing only in fields the compiler never reads, evaluated in turn
by one worker so they share steps and compiled programs) and keep a bounded number in
flight (twice the workers), so a huge sweep does not pickle every point up front and a kill
loses only those in flight. Each executor is a
generator: closing it (the caller stopped) cancels what is queued and shuts down what it
started.

Interrupted (``rdu_sim.interrupts``: SIGINT, SIGTERM), raised in an executor while it waits
for its workers or thrown into it at a ``yield`` (the caller was writing a row), makes it
stop: nothing more starts, the workers are told to stop (a pool's by the signal, forwarded
to each; Dask's by ``worker.stop_batches``) and hand back the points they finished, which it
yields (for at most ``DRAIN_S``: then what has not come back is given up, its workers
killed), then it raises the Interrupted again. A worker stopped alone (a signal sent to it,
not to the sweep) hands back its batch unfinished: the rest are failed rows saying so.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, suppress
from typing import Any

from rdu_sim.config.errors import ConfigError
from rdu_sim.extras import require
from rdu_sim.input_errors import InputError
from rdu_sim.interrupts import (
    Interrupted,
    blocked,
    pool_owner,
    received,
    start_worker,
    stop_children,
    winding_down,
)
from rdu_sim.sweep.worker import (
    Outcome,
    Task,
    WorkerMismatch,
    identity,
    leave_signals_to_the_sweep,
    lost,
    mismatch,
    recorded_code,
    run_batch,
    run_task,
    sibling_batches,
    stop_batches,
)

IN_FLIGHT_PER_WORKER = 2

DRAIN_S = 5.0
"""How long a stopped executor waits for its workers to hand back what they finished."""


WORKERS_PER_CORE = 4
"""Local worker processes (a pool's, a LocalCluster's) a core at most: a point is CPU-bound,
so more add only memory (~60 MB a worker, more while it runs) and contention; --workers 4096
on a small machine would exhaust its memory."""


def default_workers() -> int:
    """The default pool size: the machine's core count."""
    return os.cpu_count() or 1


CONNECT_S = 30.0
"""How long a sweep tries to reach a Dask scheduler's address before it says it cannot."""


def local_workers(asked: int) -> int:
    """The worker processes started on this machine for ``asked``: at most
    ``WORKERS_PER_CORE`` a core."""
    return max(1, min(asked, default_workers() * WORKERS_PER_CORE))


def run_serial(tasks: Sequence[Task]) -> Iterator[Outcome]:
    """Evaluate each task here, in order."""
    for task in tasks:
        yield run_task(task)


def _context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def run_pool(tasks: Sequence[Task], workers: int) -> Iterator[Outcome]:
    """Evaluate tasks in a local process pool of `workers` processes, in sibling batches
    (`worker.sibling_batches`: points that share steps or compiled programs on one worker).

    If a worker process dies (killed, out of memory, a crash in native code), the tasks in
    flight are recorded as failed (rerun them with --retry-failed) and a fresh pool takes
    the rest.
    """
    workers = local_workers(workers)
    window = workers * IN_FLIGHT_PER_WORKER
    pending = list(reversed(sibling_batches(tasks, window)))
    while pending:
        pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=_context(),
            initializer=start_worker,
            initargs=(pool_owner(),),
        )
        in_flight: dict[Future[list[Outcome]], tuple[Task, ...]] = {}
        ready: deque[Outcome] = deque()  # received, not yet handed to the caller
        broken = False
        try:
            while pending or in_flight:
                while pending and len(in_flight) < window and not broken:
                    batch = pending.pop()
                    try:
                        with blocked():  # what it starts starts with them blocked
                            in_flight[pool.submit(run_batch, batch)] = batch
                    except BrokenProcessPool:
                        pending.append(batch)
                        broken = True
                if not in_flight:
                    break
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in done:
                    outcomes, died = _batch_outcomes(future, in_flight.pop(future))
                    ready.extend(outcomes)
                    broken = broken or died
                while ready:
                    yield ready.popleft()
        except Interrupted:
            with winding_down():
                yield from ready
                yield from _drain_pool(in_flight)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _batch_outcomes(
    future: Future[list[Outcome]], batch: tuple[Task, ...]
) -> tuple[list[Outcome], bool]:
    """A finished batch's outcomes (a task it did not finish: failed, saying why), and
    whether its worker died."""
    try:
        outcomes = future.result()
    except BrokenProcessPool as exc:
        return [lost(task, f"worker process died: {exc}") for task in batch], True
    except Exception as exc:  # e.g. the task could not be pickled
        return [lost(task, f"{type(exc).__name__}: {exc}") for task in batch], False
    return completed(outcomes, batch), False


def completed(outcomes: list[Outcome], batch: Sequence[Task]) -> list[Outcome]:
    """A batch's outcomes, with a failed row for each task its worker did not hand back (a
    worker stopped alone: a signal sent to it, not to the sweep), pool and Dask alike; when
    the sweep itself stops, those are left unstored instead (a rerun runs them)."""
    finished = {outcome.key for outcome in outcomes}
    if len(finished) == len(batch) or received() is not None:
        return outcomes
    stopped = "the worker was stopped before this point finished (not by this sweep)"
    return outcomes + [lost(t, stopped) for t in batch if t.point.key not in finished]


def _drain_pool(in_flight: dict[Future[list[Outcome]], tuple[Task, ...]]) -> Iterator[Outcome]:
    """The points the pool's workers finished of the batches in flight: what is queued is
    cancelled, each worker is sent SIGINT (it stops the point it runs and hands back its
    batch), and what comes back within ``DRAIN_S`` is yielded; a second interrupt, or the
    time running out, gives up the rest and kills their workers."""
    running = [future for future in in_flight if not future.cancel()]
    stop_children()
    deadline = time.monotonic() + DRAIN_S
    try:
        while running:
            left = deadline - time.monotonic()
            done, _ = wait(running, timeout=max(0.0, left), return_when=FIRST_COMPLETED)
            if not done:
                break
            for future in done:
                running.remove(future)
                try:
                    yield from future.result()
                except Exception:  # pragma: no cover - a worker that died stopping
                    continue
    except Interrupted:
        pass
    if running:  # what did not come back in time is given up: its workers must not linger
        for child in multiprocessing.active_children():
            child.kill()


def check_cluster(cluster: str) -> Any:
    """dask.distributed, once ``cluster`` is known to be ``local`` or an address Dask can
    parse (its own rule: ``tcp://HOST:PORT``, ``HOST:PORT``, ``tls://...``); a missing Dask
    or a bad address is an error naming ``--cluster``, before anything runs."""
    distributed: Any = require("distributed", f"--cluster {cluster}")
    if cluster == "local":
        return distributed
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(cluster)
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(location)
    except (ValueError, TypeError) as exc:
        raise ConfigError.single(
            "--cluster",
            "",
            f"{cluster!r} is not a Dask scheduler address ({exc}); give tcp://HOST:PORT, "
            "or local for a cluster on this machine",
        ) from None
    return distributed


def _dask_client(cluster: str, workers: int) -> tuple[Any, Any]:
    """A distributed.Client for `cluster` ('local' starts a LocalCluster), and that cluster."""
    distributed = check_cluster(cluster)
    if cluster == "local":
        local = distributed.LocalCluster(
            n_workers=local_workers(workers),
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            # Dask's warnings (a task the closing client cancels) are not the user's news:
            # the sweep reports every point it lost or kept; its errors still show
            silence_logs=logging.ERROR,
        )
        client = distributed.Client(local)
        client.run(leave_signals_to_the_sweep)
        return client, local
    try:
        return distributed.Client(cluster, timeout=CONNECT_S), None
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError.single(
            "--cluster", "", f"cannot reach the Dask scheduler at {cluster!r}: {exc}"
        ) from None


class Cluster:
    """A sweep's Dask cluster (``connected``): ``client`` connects at its first use (a
    LocalCluster for 'local' is started then: a sweep with nothing to run starts none)."""

    def __init__(self, address: str, workers: int) -> None:
        self.address = address
        self.workers = workers
        self._client: Any = None
        self._local: Any = None

    @property
    def client(self) -> Any:
        """The distributed.Client, connected (and its LocalCluster started) when first asked."""
        if self._client is None:
            self._client, self._local = _dask_client(self.address, self.workers)
        return self._client

    def close(self) -> None:
        """Close the client and stop the LocalCluster it started, if any."""
        if self._client is not None:
            self._client.close()
        if self._local is not None:
            self._local.close()


@contextmanager
def connected(cluster: str | None, workers: int) -> Iterator[Cluster | None]:
    """The Dask cluster ``cluster`` names (None: none asked), a scheduler's address
    connected before the sweep plans, writes or draws anything, so an unreachable one is its
    first and only line; closed (a LocalCluster stopped) however the sweep ends."""
    if cluster is None:
        yield None
        return
    dask = Cluster(cluster, workers)
    try:
        if cluster != "local":
            dask.client  # noqa: B018 - reached now
        yield dask
    finally:
        if received() is not None:  # stopping: Dask's own farewells are not the user's news
            logging.getLogger("distributed").setLevel(logging.CRITICAL)
        dask.close()


def run_dask(tasks: Sequence[Task], cluster: Cluster, workers: int) -> Iterator[Outcome]:
    """Evaluate tasks on a dask.distributed cluster (``connected``); the parent still writes
    every row. Its workers must be this simulator (``check_workers``)."""
    client = cluster.client
    distributed: Any = sys.modules["distributed"]
    futures: dict[Any, tuple[Task, ...]] = {}
    sweep = uuid.uuid4().hex  # what stop_batches stops: this sweep's batches, no later one's
    try:
        check_workers(client, tasks)
        threads = sum(client.nthreads().values()) or max(1, workers)
        window = threads * IN_FLIGHT_PER_WORKER
        pending = list(reversed(sibling_batches(tasks, window)))
        queue = distributed.as_completed()

        def submit() -> None:
            while pending and len(futures) < window:
                batch = pending.pop()
                future = client.submit(run_batch, batch, sweep, pure=False)
                futures[future] = batch
                queue.add(future)

        submit()
        for future in queue:
            batch = futures.pop(future)
            try:
                outcomes = completed(future.result(), batch)
            except Exception as exc:  # KilledWorker, a lost connection, a pickling error
                if _scheduler_lost(client, exc):  # not the point's failure: it is not run
                    raise SchedulerLost(
                        f"--cluster: lost the Dask scheduler at {client.scheduler.address} "
                        f"({type(exc).__name__}: {' '.join(str(exc).split())}); the points not "
                        "run are not stored"
                    ) from None
                outcomes = [lost(task, f"{type(exc).__name__}: {exc}") for task in batch]
            yield from outcomes
            submit()
    except Interrupted:
        with winding_down():
            yield from _drain_dask(client, futures, sweep)
        raise
    finally:  # what is queued or running of batches that ended unread is not left to run
        if futures and client.status == "running":
            with suppress(Exception):  # (the cluster going away meanwhile)
                client.cancel(list(futures))


class SchedulerLost(InputError):
    """The connection to a Dask sweep's scheduler was lost: the cluster's failure, not a
    point's, so the points it had not run are left unstored (the same command resumes)."""


def _scheduler_lost(client: Any, exc: BaseException) -> bool:
    """Whether a batch's error is the scheduler gone (its futures cancelled, its connection
    closed) rather than the batch's own (a worker killed, a task that cannot be pickled)."""
    from distributed.comm.core import CommClosedError

    if isinstance(exc, CommClosedError | OSError | TimeoutError):
        return True
    from concurrent.futures import CancelledError

    return isinstance(exc, CancelledError) or client.status != "running"


def check_workers(client: Any, tasks: Sequence[Task]) -> None:
    """Refuse, before anything is submitted, a cluster whose workers are not this simulator
    (``worker.mismatch``: another rdu-sim version, a plugin the points use with another
    source, or none): their rows would be stored under keys that do not describe them. One
    WorkerMismatch naming each such worker; a worker joining later is refused at its first
    point (``worker.run_task``)."""
    if not tasks:
        return
    recorded: dict[str, tuple[str, str | None]] = {}
    for task in tasks:
        recorded.update(recorded_code(task.point.config))
    found = client.run(identity, sorted(recorded))
    bad = [
        f"{address}: {problem}"
        for address, here in sorted(found.items())
        if (problem := mismatch(here, tasks[0].version, recorded)) is not None
    ]
    if bad:
        raise WorkerMismatch(
            f"{len(bad)} of {len(found)} Dask workers are not the simulator this sweep keys "
            f"its rows by, so nothing was run: {'; '.join(bad)}"
        )


def _drain_dask(client: Any, futures: dict[Any, tuple[Task, ...]], sweep: str) -> Iterator[Outcome]:
    """The points Dask's workers finished of the batches in flight: each worker is told to
    stop after the point it runs (``worker.stop_batches``), and what comes back within
    ``DRAIN_S`` is yielded; a second interrupt, or the time running out, gives up the rest."""
    distributed: Any = sys.modules["distributed"]
    try:
        client.run(stop_batches, sweep)
        distributed.wait(list(futures), timeout=DRAIN_S)
    except (Interrupted, TimeoutError):
        pass
    except Exception:  # pragma: no cover - the cluster went away while stopping
        pass
    for future in futures:
        if future.status == "finished":
            try:
                yield from future.result()
            except Exception:  # pragma: no cover - the cluster went away while stopping
                continue
