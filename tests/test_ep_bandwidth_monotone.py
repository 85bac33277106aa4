"""A faster network never makes an expert-parallel prefill step slower (beyond 0.5%): the
two-hop all-to-all's later hops are served oldest piece first on the ports they share
(``hw.port_queue``), so a sooner arrival cannot queue the combine's network leg, which the
next layer waits for, behind younger forwarding. Before that, the four-rack step at 512
tokens took 243 ms at 10.5 GB/s between racks and 272 ms at 11 GB/s. And ``auto`` chooses
the all-to-alls' forms by the load on the ports they share, not each alone on idle links."""

from __future__ import annotations

import itertools

from rdu_sim import api

TOLERANCE = 0.005  # a faster link may cost at most this share of the step


def _sweep(workload: str, overrides: list[str], key: str, bandwidths: list[float]) -> list[float]:
    return [
        api.step(workload, [*overrides, f"{key}={b} GB/s"], phase="prefill", tokens=512).step_s
        for b in bandwidths
    ]


def _assert_monotone(bandwidths: list[float], steps: list[float]) -> None:
    points = list(zip(bandwidths, steps, strict=True))
    for (b0, t0), (b1, t1) in itertools.pairwise(points):
        assert t1 <= t0 * (1 + TOLERANCE), f"{b0} -> {b1} GB/s: {t0 * 1e3:.1f} -> {t1 * 1e3:.1f} ms"


def test_four_racks_ep64_prefill_is_monotone_in_the_rack_network() -> None:
    bandwidths = [9.0, 10.0, 10.5, 11.0, 11.5, 12.0, 13.0]
    steps = _sweep(
        "deepseek-r1-sn40l-4racks-ep64", [], "hw.system.inter_rack_link.bandwidth", bandwidths
    )
    _assert_monotone(bandwidths, steps)


def test_two_node_ep32_prefill_is_monotone_in_the_node_network() -> None:
    """``auto`` weighs the port a layer's dispatch and combine share
    (``collective_port.plan_all_to_alls``): when each call's idle-link estimate decided alone,
    the combine took its direct form from 17.5 GB/s on (1.751 ms against 1.764 ms alone at
    20 GB/s), which puts 8% more bytes on the in-node port the network traffic crosses, the
    one that binds the step: 191.2 ms at 15 GB/s, 199.1 ms at 17.5 and 20 GB/s."""
    bandwidths = [15.0, 17.5, 20.0, 22.5, 25.0]
    overrides = [
        "hardware=sn40l-16",
        "hw.system.sockets=32",
        "parallelism={tp: 1, dp_attention: 32, ep: 32}",
    ]
    steps = _sweep(
        "deepseek-r1-sn40l-4racks-ep64",
        overrides,
        "hw.system.inter_node_link.bandwidth",
        bandwidths,
    )
    _assert_monotone(bandwidths, steps)
