"""Writing a new machine's hardware file from a datasheet (docs/hardware.md, "A new RDU from
its datasheet"): a socket's figure written in a per-unit field is refused naming what it
makes the socket while any plausible chip passes; out-of-range counts and a misspelt default
stack are told in the house's words at their line; ``check`` says what a file takes without
stating it (an inherited stack and fitted values, the schema's defaults). The trial that
found these wrote an SN50-like socket of 2,080 PCUs from the SN40L's file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.config import ConfigError, shipped
from rdu_sim.config.field_docs import field_doc
from rdu_sim.config.hardware_file import kind_of
from rdu_sim.config.limits import (
    MAX_SOCKET_FLOPS,
    MAX_SOCKET_SRAM,
    MAX_SOCKET_SRAM_BANDWIDTH,
    MAX_TIER_BYTES,
)

REPO = Path(__file__).resolve().parents[1]
LLAMA = REPO / "workloads" / "llama3.1-8b-1socket.yaml"
SN50 = {  # twice the SN40L's PCUs and PMUs, HBM4, a faster link (a hypothetical socket)
    "hw.socket.pcu.count": 2080,
    "hw.socket.pmu.count": 2080,
    "hw.socket.pmu.sram": "384 KiB",
    "hw.socket.hbm.capacity": "256 GiB",
    "hw.socket.hbm.bandwidth": "8 TB/s",
}


def _sn50_file(tmp_path: Path, **changes: str) -> tuple[Path, dict[str, int]]:
    """The SN50-like socket as a whole file written from sn40l.yaml's (no extends), with
    ``changes`` (``"pcu.peak_flops"``: its text); the file and each changed field's line."""
    data = yaml.safe_load((REPO / "hw_configs" / "sn40l.yaml").read_text())
    data["name"] = "sn50"
    for path, value in SN50.items():
        *parents, last = path.removeprefix("hw.").split(".")
        node = data
        for part in parents:
            node = node[part]
        node[last] = value
    marks = {}
    for path, value in changes.items():
        section, field = path.split(".")
        data["socket"][section][field] = f"@{path}@"
        marks[path] = value
    text = yaml.safe_dump(data, sort_keys=False)
    lines = {}
    for path, value in marks.items():
        lines[path] = next(n for n, row in enumerate(text.splitlines(), 1) if f"@{path}@" in row)
        text = text.replace(f"@{path}@", value)
    out = tmp_path / "sn50.yaml"
    out.write_text(text)
    return out, lines


def _error(**changes: str) -> str:
    with pytest.raises(ConfigError) as info:
        api.load(LLAMA, {**SN50, **changes})
    (issue,) = info.value.issues
    (changed,) = changes
    return f"{issue.field}: {issue.message.removesuffix(f' (from overrides: {changed})')}"


def test_a_socket_figure_written_per_pcu_is_refused_naming_the_socket_total(
    tmp_path: Path,
) -> None:
    """``peak_flops: 1276 TFLOP/s`` (the socket's) was read as one PCU's: a 2.65 EFLOP/s
    socket. ``check`` names the field, its line, the total and the per-PCU figure meant."""
    path, lines = _sn50_file(tmp_path, **{"pcu.peak_flops": "1276 TFLOP/s"})
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        f"error: {path}:{lines['pcu.peak_flops']}: socket.pcu.peak_flops: 1.28 PFLOP/s per "
        "PCU makes 2,654 PFLOP/s a socket over 2,080 PCUs, past the most a socket is taken "
        "to have (100 PFLOP/s: rdu_sim/config/limits.py); peak_flops is one PCU's: a "
        "socket's 1.28 PFLOP/s over 2,080 PCUs is 613 GFLOP/s each"
    )


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        (  # the SN40L's own socket figure, per PCU
            {"hw.socket.pcu.vector_flops": "106.5 TFLOP/s"},
            "socket.pcu.vector_flops: 106 TFLOP/s per PCU makes 222 PFLOP/s a socket over "
            "2,080 PCUs, past the most a socket is taken to have (100 PFLOP/s: "
            "rdu_sim/config/limits.py); vector_flops is one PCU's: a socket's 106 TFLOP/s over "
            "2,080 PCUs is 51.2 GFLOP/s each",
        ),
        (  # 1.5 x the SN40L's 520 MiB: the memory table showed 1.55 TiB of SRAM
            {"hw.socket.pmu.sram": "780 MiB"},
            "socket.pmu.sram: 780 MiB per PMU makes 1.55 TiB a socket over 2,080 PMUs, past "
            "the most a socket is taken to have (128 GiB: rdu_sim/config/limits.py); sram is "
            "one PMU's: a socket's 780 MiB over 2,080 PMUs is 384 KiB each",
        ),
        (
            {"hw.socket.pmu.sram": "1 TiB"},
            "socket.pmu.sram: 1 TiB per PMU makes 2,080 TiB a socket over 2,080 PMUs, past "
            "the most a socket is taken to have (128 GiB: rdu_sim/config/limits.py); sram is "
            "one PMU's: a socket's 1 TiB over 2,080 PMUs is 504 MiB each",
        ),
        (  # "hundreds of TB/s" aggregate, per PMU
            {"hw.socket.pmu.bandwidth": "213 TB/s"},
            "socket.pmu.bandwidth: 213 TB/s per PMU makes 443 PB/s a socket over 2,080 PMUs, "
            "past the most a socket is taken to have (100 PB/s: rdu_sim/config/limits.py); "
            "bandwidth is one PMU's: a socket's 213 TB/s over 2,080 PMUs is 102 GB/s each",
        ),
        (
            {"hw.socket.hbm.capacity": "256 PiB"},
            "socket.hbm.capacity: must be at most 64 TiB, got 256 PiB",
        ),
        (
            {"hw.socket.ddr.capacity": "1.5 PiB"},
            "socket.ddr.capacity: must be at most 64 TiB, got 1.5 PiB",
        ),
    ],
)
def test_per_unit_and_per_tier_figures_past_any_socket_are_refused(
    changes: dict[str, str], said: str
) -> None:
    assert _error(**changes) == said


def test_the_bounds_leave_room_for_any_plausible_chip() -> None:
    """Several times the largest built passes: a whole wafer (Cerebras WSE-3: ~900,000
    cores, 44 GB of SRAM at 21 PB/s, 125 PFLOP/s with sparsity, half dense) as one socket,
    a package of 16 HBM4E stacks (1 TiB), and 12 TiB of DDR behind a socket."""
    cores = 900_000
    wafer = api.load(
        LLAMA,
        {
            "hw.socket.pcu.count": cores,
            "hw.socket.pmu.count": cores,
            "hw.socket.pcu.peak_flops": f"{62.5e15 / cores:.6g} FLOP/s",
            "hw.socket.pcu.vector_flops": f"{62.5e15 / cores:.6g} FLOP/s",
            "hw.socket.pmu.sram": f"{44e9 / cores:.0f} B",
            "hw.socket.pmu.bandwidth": f"{21e15 / cores:.6g} B/s",
            "hw.socket.hbm.capacity": "1 TiB",
            "hw.socket.ddr.capacity": "12 TiB",
        },
    ).hardware
    assert wafer.socket.peak_flops == pytest.approx(62.5e15)
    assert wafer.socket.peak_flops * 1.5 < MAX_SOCKET_FLOPS
    assert wafer.socket.sram_bytes * 2.5 < MAX_SOCKET_SRAM
    socket_sram_rate = wafer.socket.pmu.count * wafer.socket.pmu.bandwidth
    assert socket_sram_rate * 4 < MAX_SOCKET_SRAM_BANDWIDTH
    assert (
        wafer.socket.ddr.capacity == 12 * 2**40 and wafer.socket.ddr.capacity * 5 < MAX_TIER_BYTES
    )
    # and the SN50-like socket written right
    sn50 = api.load(LLAMA, SN50).hardware
    assert sn50.socket.sram_bytes == 2080 * 384 * 1024


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("hw.socket.pcu.count=-2080", "socket.pcu.count: must be at least 1, got -2,080"),
        ("hw.socket.usable_fraction=0", "socket.usable_fraction: must be more than 0, got 0"),
        ("hw.socket.hbm.efficiency=95", "socket.hbm.efficiency: must be at most 1, got 95"),
        ("hw.system.sockets_per_node=0", "system.sockets_per_node: must be at least 1, got 0"),
        ("hw.socket.pcu.systolic_rows=5000",
         "socket.pcu.systolic_rows: must be at most 4,096, got 5,000"),
    ],
)  # fmt: skip
def test_a_count_or_fraction_out_of_range_is_told_in_the_house_words(
    override: str, said: str
) -> None:
    """Range errors of unitless fields go through the loader's translation as quantities
    do (they read ``Input should be greater than or equal to 1 (got -2080)``)."""
    with pytest.raises(ConfigError) as info:
        api.load(LLAMA, [override])
    (issue,) = info.value.issues
    assert f"{issue.field}: {issue.message}" == f"{said} (from overrides: {override.split('=')[0]})"
    assert "Input should" not in str(info.value)


def test_a_misspelt_default_stack_is_told_at_its_line_by_check_and_by_a_run(
    tmp_path: Path,
) -> None:
    """It read ``error: bad/sambastack: file not found; ... (the default_stack of
    bad.yaml:52)`` under check (the file named, a path never written), and without a line
    under a run."""
    text = (REPO / "hw_configs" / "sn40l.yaml").read_text()
    assert text.count("default_stack: sambastack-2025") == 1
    path = tmp_path / "typo.yaml"
    path.write_text(text.replace("default_stack: sambastack-2025", "default_stack: sambastack"))
    line = next(n for n, row in enumerate(path.read_text().splitlines(), 1) if "sambastack" in row)
    said = (
        f"error: {path}:{line}: default_stack: unknown serving stack 'sambastack'; did you mean "
        "'sambastack-2025'? (a path is relative to the file naming it; a bare name is a shipped "
        "stack: sambastack-2025, sambastudio-2024, sglang, tensorrt-llm, tensorrt-llm-2024, "
        "vllm-2024, or 'none')"
    )
    checked = CliRunner().invoke(cli, ["check", str(path)])
    assert checked.exit_code == 2 and checked.stderr.splitlines()[0] == said
    ran = CliRunner().invoke(cli, ["step", str(LLAMA), "--set", f"hardware={path}"])
    assert ran.exit_code == 2 and ran.stderr.splitlines()[0] == said


def _check_lines(path: Path) -> list[str]:
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def _shipped_text(relative: str, *keys: str) -> str:
    """A value as a shipped file writes it (``33.53 GB/s``): what check quotes."""
    node = yaml.safe_load((REPO / relative).read_text())
    for key in keys:
        node = node[key]
    return str(node)


def test_check_says_what_an_overlay_of_a_shipped_machine_inherits(tmp_path: Path) -> None:
    """Written over ``sn40l-8``, a new chip runs SambaStack (a host time fitted to SambaNova's
    figures) and the fitted SN40L link: check says where each came from."""
    path = tmp_path / "sn50x-8.yaml"
    path.write_text(
        "extends: sn40l-8\nname: sn50x-8\nsocket:\n  hbm:\n    bandwidth: 8 TB/s\n"
        "    capacity: 256 GiB\n"
    )
    link = _shipped_text("hw_configs/sn40l.yaml", "system", "intra_node_link", "bandwidth")
    host = _shipped_text("stacks/sambastack-2025.yaml", "host", "serial_per_step")
    assert _check_lines(path) == [
        f"OK  {path}: hardware 'sn50x-8': 8 sockets, default stack 'sambastack-2025' (from "
        "extends: sn40l-8, set in sn40l.yaml)",
        # a new socket beside a link fitted on SN40L's: predicted, as run and compare say
        "    predicted, not measured: its socket section differs from sn40l.yaml's, whose "
        f"fitted hw.system.intra_node_link.bandwidth it keeps (rdu-sim check {path} lists "
        "them)",
        f"    hw.system.intra_node_link.bandwidth {link}: fitted by calibrate joint "
        "(calibrations/joint.yaml), inherited from sn40l.yaml",
        f"    stack.host.serial_per_step {host}: fitted by calibrate joint "
        "(calibrations/joint.yaml), with the default stack 'sambastack-2025' inherited from "
        "sn40l.yaml",
    ]
    # restating the link and naming the stack: nothing is inherited unsaid
    path.write_text(
        path.read_text()
        + "system:\n  intra_node_link:\n    bandwidth: 100 GB/s\ndefault_stack: sambastack-2025\n"
    )
    assert _check_lines(path) == [
        f"OK  {path}: hardware 'sn50x-8': 8 sockets, default stack 'sambastack-2025'"
    ]


def test_check_lists_the_structural_fields_a_file_leaves_to_the_schema(tmp_path: Path) -> None:
    """Written from scratch without topology, network_via_intra_node_port, the collectives
    and layer_loop, an 8-socket chip took ring wiring and a free loop (its 70B prefill ran
    in half the time of the same chip written with the shipped files' values): check lists
    each default taken beside what the shipped files say."""
    data = yaml.safe_load((REPO / "hw_configs" / "sn40l.yaml").read_text())
    for section, field in (
        ("system", "topology"),
        ("system", "network_via_intra_node_port"),
        ("system", "collective_algorithm"),
        ("system", "collective_chunks"),
    ):
        del data[section][field]
    del data["socket"]["kernel"]["layer_loop"]
    del data["default_stack"]
    data["name"] = "sn50"
    path = tmp_path / "sn50.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert _check_lines(path) == [
        f"OK  {path}: hardware 'sn50': 1 socket, default stack 'none' (not set: the default, "
        "the device alone: no host time)",
        "    left at its default: hw.system.network_via_intra_node_port false (every shipped "
        "rdu file: true)",
        "    left at its default: hw.system.topology ring (every shipped rdu file: switched)",
        "    left at its default: hw.system.collective_algorithm auto (as every shipped rdu file)",
        "    left at its default: hw.system.collective_chunks 4 (as every shipped rdu file)",
        "    left at its default: hw.socket.kernel.layer_loop 0 s (every shipped rdu file: 500 ns)",
    ]


def test_check_of_the_shipped_machines_names_no_default_taken() -> None:
    """Every shipped file states its structural fields; the base files state their stack and
    their fitted values, so check adds nothing to their line."""
    files = sorted((REPO / "hw_configs").glob("*.yaml"))
    result = CliRunner().invoke(cli, ["check", *map(str, files)])
    assert result.exit_code == 0, result.output
    assert "left at its default" not in result.stdout
    for base, machine in (("sn40l", "1 socket"), ("dgx-h100", "8 GPUs")):
        path = REPO / "hw_configs" / f"{base}.yaml"
        stack = "sambastack-2025" if base == "sn40l" else "tensorrt-llm"
        assert _check_lines(path) == [
            f"OK  {path}: hardware {base!r}: {machine}, default stack {stack!r}"
        ]


@pytest.mark.parametrize(
    ("path", "rdu", "gpu", "words"),
    [
        ("hw.system.topology", "switched", "switched", "Every shipped file (SN40L and GPU) says "
         "'switched': the default 'ring' is no shipped machine's"),
        ("hw.system.network_via_intra_node_port", True, False, "The shipped SN40L files say "
         "true, the GPU files false (the default)"),
        ("hw.system.collective_algorithm", "auto", "auto", "Every shipped file says 'auto' (the "
         "default)"),
        ("hw.system.collective_chunks", 4, 4, "(every shipped file: 4, the default)"),
        ("hw.socket.kernel.layer_loop", 0.5e-6, None, "the shipped SN40L files say 0.5 us, the "
         "default 0 makes a loop iteration free"),
    ],
)  # fmt: skip
def test_a_structural_default_says_what_the_shipped_files_use(
    path: str, rdu: object, gpu: object, words: str
) -> None:
    """The schema's description of each field whose default no shipped machine relies on
    says what they use, and that is what they use."""
    doc = field_doc(path)
    assert doc is not None and words in doc.description
    parts = path.removeprefix("hw.").split(".")
    for kind, used in (("rdu", rdu), ("gpu", gpu)):
        if used is None:
            continue
        values = set()
        for name in shipped.names("hardware"):
            hardware = api.load(LLAMA, [f"hardware={name}"]).hardware
            if kind_of(hardware) == kind:
                value: object = hardware
                for part in parts:
                    value = getattr(value, part)
                values.add(value)
        assert values == {used}, (kind, values)
