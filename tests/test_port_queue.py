"""Age-based arbitration of a port (``hw.port_queue``, ``Topology.send_by_age``): the oldest
piece's send waiting goes first, whatever the order the sends were issued in; with equal ages
it is the FIFO's order and times."""

from __future__ import annotations

from rdu_sim.des.environment import CountingEnvironment, Event
from rdu_sim.hw import Topology

GB = 1e9


def _topology() -> Topology:
    # one switched node of three sockets: socket 0's port sends 1 GB in 1 s
    return Topology(CountingEnvironment(), 3, 3, 1 * GB, 0.0, switched=True)


def _arrivals(by_age: bool, sends: list[tuple[float, int, float]]) -> list[float]:
    """Arrival times of socket 0's 1 GB sends, each (issued at, to, piece age)."""
    topo = _topology()
    env = topo.env
    out: list[float] = [0.0] * len(sends)

    def issue(i: int, dst: int, age: float) -> None:
        done: Event = topo.send_by_age(0, dst, 1 * GB, age) if by_age else topo.send(0, dst, 1 * GB)
        done.add_callback(lambda _e: out.__setitem__(i, float(env.now)))

    for i, (at, dst, age) in enumerate(sends):
        env.timeout(at).add_callback(lambda _e, i=i, d=dst, a=age: issue(i, d, a))
    env.run()
    return out


def test_an_older_pieces_later_hop_overtakes_a_younger_send_waiting() -> None:
    # A (age 0) holds the port for [0, 1]; B (age 0.1) waits; then C, the second hop of a
    # piece of age 0 issued at 0.2, is older than B and takes the port first when it frees
    sends = [(0.0, 1, 0.0), (0.1, 2, 0.1), (0.2, 1, 0.0)]
    assert _arrivals(True, sends) == [1.0, 3.0, 2.0]
    assert _arrivals(False, sends) == [1.0, 2.0, 3.0]  # the bare FIFO: in issue order


def test_a_send_under_way_is_not_preempted() -> None:
    sends = [(0.0, 1, 5.0), (0.5, 2, 0.0)]  # the younger one started while the port was idle
    assert _arrivals(True, sends) == [1.0, 2.0]


def test_equal_ages_keep_the_fifos_order_and_times() -> None:
    sends = [(0.0, 1, 0.0), (0.1, 2, 0.0), (0.2, 1, 0.0), (2.5, 2, 0.0), (4.5, 1, 0.0)]
    assert _arrivals(True, sends) == _arrivals(False, sends) == [1.0, 2.0, 3.0, 4.0, 5.5]
