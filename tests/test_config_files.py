"""Loading config files: shipped files validate; every kind of bad input is one clear error.

A clear error names the file, the dotted field path and (where there is one) the line, and
is a ConfigError, which the CLI prints without a traceback (exit 2; see test_cli_*.py).
"""

from __future__ import annotations

import pickle
import shutil
import time
from pathlib import Path

import pytest

from rdu_sim.config import ConfigError, HardwareConfig, LlamaArchitecture
from rdu_sim.config.errors import ConfigIssue, WriteError
from rdu_sim.config.hardware_file import read_hardware, validate_hardware
from rdu_sim.config.loader import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, read_yaml
from rdu_sim.config.yaml_io import load_yaml
from rdu_sim.models import get_model, kv_bytes_per_token, params_total, preset_names
from rdu_sim.scenario import build_scenario, load_scenario

REPO = Path(__file__).resolve().parents[1]
HW_FILES = sorted((REPO / "hw_configs").glob("sn40l*.yaml"))  # GPU files: test_gpu_config.py
WORKLOADS = sorted((REPO / "workloads").glob("*.yaml"))
LLAMA_1S = "llama3.1-8b-1socket.yaml"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of hw_configs/ and workloads/ side by side, to break at will."""
    shutil.copytree(REPO / "hw_configs", tmp_path / "hw_configs")
    shutil.copytree(REPO / "workloads", tmp_path / "workloads")
    return tmp_path


def _line_of(path: Path, fragment: str) -> int:
    """1-based line of the first line containing `fragment`."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if fragment in line:
            return number
    raise AssertionError(f"{fragment!r} not in {path}")


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _error(path: Path, overrides: list[str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_scenario(path, overrides)
    return info.value


def test_shipped_files_exist() -> None:
    names = {p.name for p in WORKLOADS}
    assert {
        "deepseek-r1-128k-full.yaml",
        "deepseek-r1-128k-snapstream.yaml",
        "llama3.1-8b-1socket.yaml",
        "llama3.1-8b-8socket.yaml",
    } <= names
    assert {"sn40l.yaml", "sn40l-8.yaml", "sn40l-16.yaml"} <= {p.name for p in HW_FILES}


def _hardware(path: Path) -> HardwareConfig:
    """A shipped SN40L file as a workload reads it (an overlay merged over its base)."""
    data, lines = read_hardware(path)
    hardware = validate_hardware(data, str(path), lines)
    assert isinstance(hardware, HardwareConfig)
    return hardware


@pytest.mark.parametrize("path", HW_FILES, ids=lambda p: p.name)
def test_shipped_hardware_validates(path: Path) -> None:
    hardware = _hardware(path)
    assert hardware.socket.hbm.capacity == 64 * 2**30
    assert hardware.socket.peak_flops == pytest.approx(638e12, rel=1e-6)
    assert hardware.socket.sram_bytes == 1040 * 512 * 1024


def test_shipped_hardware_sizes() -> None:
    sockets = {p.name: _hardware(p).system.sockets for p in HW_FILES}
    assert sockets["sn40l.yaml"] == 1
    assert sockets["sn40l-8.yaml"] == 8
    assert sockets["sn40l-16.yaml"] == 16
    assert sockets["sn40l-4racks.yaml"] == 64


@pytest.mark.parametrize("path", WORKLOADS, ids=lambda p: p.name)
def test_shipped_workloads_validate(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.tp <= scenario.hardware.system.sockets
    assert scenario.model.heads % scenario.tp == 0
    assert Path(scenario.hardware_file).exists()


def test_misspelled_hardware_key_names_key_and_line(tree: Path) -> None:
    hw = tree / "hw_configs" / "sn40l.yaml"
    _replace(hw, "    bandwidth: 1.8 TB/s", "    bandwith: 1.8 TB/s")
    line = _line_of(hw, "bandwith:")
    error = _error(tree / "workloads" / LLAMA_1S)
    issue = next(i for i in error.issues if i.field == "socket.hbm.bandwith")
    assert issue.line == line
    assert issue.file.endswith("sn40l.yaml")
    assert f"sn40l.yaml:{line}: socket.hbm.bandwith: unknown field 'bandwith'" in str(error)
    assert "did you mean 'bandwidth'" in str(error)
    # the renamed key leaves the real one missing: said too, at the parent's line
    assert {i.field for i in error.issues} == {"socket.hbm.bandwith", "socket.hbm.bandwidth"}
    # and each line ends saying which workload (at which line) led to the hardware file:
    # one whole line an issue (it was a line of its own first, 'hardware file ... is not
    # valid:', with nothing after the colon)
    workload = tree / "workloads" / LLAMA_1S
    named = f" (the hardware of {workload}:{_line_of(workload, 'hardware: ')})"
    assert all(i.file == str(hw) and i.message.endswith(named) for i in error.issues)
    assert "is not valid" not in str(error)


def test_misspelled_workload_key_names_key_and_line(tree: Path) -> None:
    workload = tree / "workloads" / LLAMA_1S
    _replace(workload, "batch_slots:", "batch_slot:")
    line = _line_of(workload, "batch_slot:")
    error = _error(workload)
    [issue] = error.issues
    assert (issue.field, issue.line) == ("serving.batch_slot", line)
    assert "did you mean 'batch_slots'" in issue.message
    assert str(workload) in str(error)


def test_several_errors_reported_together(tree: Path) -> None:
    workload = tree / "workloads" / LLAMA_1S
    _replace(workload, "batch_slots:", "batch_slot:")
    _replace(workload, "requests: 200", "requests: -3")
    fields = {issue.field for issue in _error(workload).issues}
    assert fields == {"serving.batch_slot", "serving.requests"}


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        (  # a tagged union given a tag none of its members has, at the tag's own line
            "  popularity: {dist: zipf, exponent: 1.0}",
            "  popularity:\n    dist: weights\n    exponent: 1.0",
            "coe.popularity.dist",
            "unknown distribution 'weights'; valid: zipf, trace",
        ),
        (
            "  popularity: {dist: zipf, exponent: 1.0}",
            "  popularity: {dist: null}",
            "coe.popularity.dist",
            "unknown distribution None; valid: zipf, trace",
        ),
    ],
)
def test_an_unknown_union_tag_names_its_field_and_the_valid_ones(
    tree: Path, old: str, new: str, field: str, message: str
) -> None:
    workload = tree / "workloads" / "samba-coe-150x8b-8socket.yaml"
    _replace(workload, old, new)
    [issue] = _error(workload).issues
    line = _line_of(workload, "dist: ")
    assert (issue.field, issue.line, issue.message) == (field, line, message)


def test_an_unknown_length_distribution_names_the_override(tree: Path) -> None:
    workload = tree / "workloads" / LLAMA_1S
    error = _error(workload, ["serving.prompt_tokens={dist: gauss, mean: 5}"])
    [issue] = error.issues
    assert issue.field == "serving.prompt_tokens.dist"
    assert issue.message == (
        "unknown distribution 'gauss'; valid: fixed, uniform, lognormal "
        "(from --set serving.prompt_tokens)"
    )


def test_config_error_survives_a_process_boundary() -> None:
    """The calibration suite's workers raise ConfigErrors into the parent: the message the
    user reads must be the issues' lines, not one character a line."""
    issues = [
        ConfigIssue("/a/w.yaml", "kv.budget", "too small", 3),
        ConfigIssue("/a/h.yaml", "", "x"),
    ]
    for error in (ConfigError(issues), WriteError(issues[:1])):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and back.issues == error.issues
        assert str(back) == str(error) == "\n".join(str(i) for i in error.issues)


def test_missing_file(tmp_path: Path) -> None:
    error = _error(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(error)
    assert "file not found" in str(error)


def test_directory_and_device_refused(tmp_path: Path) -> None:
    assert "directory" in str(_error(tmp_path))
    if Path("/dev/zero").exists():
        assert "not a regular file" in str(_error(Path("/dev/zero")))


def test_missing_hardware_file(tree: Path) -> None:
    workload = tree / "workloads" / LLAMA_1S
    _replace(workload, "../hw_configs/sn40l.yaml", "../hw_configs/nowhere.yaml")
    [issue] = _error(workload).issues
    assert issue.field == "hardware"
    assert issue.line == _line_of(workload, "nowhere.yaml")
    assert "nowhere.yaml" in issue.message and "not found" in issue.message
    assert "relative to the workload file" in issue.message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("hardware: [unclosed\n", "not valid YAML"),
        ("a: b: c\n", "not valid YAML"),
        ("key: 'open\n", "not valid YAML"),
        ("\tname: tab\n", "not valid YAML"),
        ("a: 1\na: 2\n", ""),  # duplicate keys: YAML allows it (last wins); must not crash
    ],
)
def test_bad_yaml(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    error = _error(path)
    assert fragment in str(error)
    assert str(path) in str(error)


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nhardware: a.yaml\nmodel: [llama\nserving: {}\n")
    [issue] = _error(path).issues
    assert issue.line is not None and issue.line >= 3


@pytest.mark.parametrize(
    "tag",
    [
        "!!python/object/apply:os.system ['echo pwned']",
        "!!python/object:collections.OrderedDict {}",
        "!!python/name:os.system",
        "!!python/module:os",
    ],
)
def test_object_tags_refused(tmp_path: Path, tag: str) -> None:
    path = tmp_path / "evil.yaml"
    path.write_text(f"hardware: ../hw.yaml\nmodel: {tag}\n")
    error = _error(path)
    assert "not valid YAML" in str(error)
    assert "python/" in str(error)


def test_binary_and_empty_files(tmp_path: Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(bytes(range(256)))
    assert "binary.yaml:2: not valid UTF-8 at byte 128 (0x80)" in str(_error(binary))
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert "empty" in str(_error(empty))
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    assert "expected a mapping" in str(_error(scalar))


def test_deep_nesting_refused_quickly(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    for text in ("[" * 10_000 + "]" * 10_000, "a: " + "{a: " * 10_000 + "1" + "}" * 10_000):
        deep.write_text(text)
        start = time.process_time()
        assert "nested too deeply" in str(_error(deep))
        # PyYAML's scanner is quadratic in open brackets: refused before it runs
        assert time.process_time() - start < 0.5
    moderate = tmp_path / "moderate.yaml"
    moderate.write_text("a: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5))
    assert f"more than {MAX_DEPTH} levels" in str(_error(moderate))


def test_alias_bomb_is_cheap(tmp_path: Path) -> None:
    """A 'billion laughs' document must fail fast, not expand 9^9 references."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append("hardware: ../hw.yaml\nmodel: *a9\n")
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines))
    start = time.process_time()
    with pytest.raises(ConfigError, match="values once its aliases are expanded") as info:
        read_yaml(path)  # refused from the node graph, before anything expands it
    assert time.process_time() - start < 0.5
    assert info.value.issues[0].line is not None
    small = tmp_path / "anchors.yaml"  # aliases used for sharing stay fine
    small.write_text("a: &x {k: 1, j: [1, 2]}\nb: *x\nc: *x\n")
    data, _ = read_yaml(small)
    assert data["b"] == data["c"] == {"k": 1, "j": [1, 2]}


def test_a_huge_flow_list_is_refused_before_its_nodes_are_built(tmp_path: Path) -> None:
    """Five million values, no alias: refused from the parser's events as too many values
    (not called an alias bomb), before a node graph of gigabytes is built (29 s before)."""
    path = tmp_path / "huge.yaml"
    path.write_text("model: [" + "1," * 5_200_000 + "1]\n")
    assert path.stat().st_size <= MAX_FILE_BYTES
    start = time.process_time()
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    assert time.process_time() - start < 5
    assert str(info.value) == (
        f"{path}:1: not valid YAML: the file holds more than {MAX_NODES} values (a config "
        "holds far fewer)"
    )
    # just under the limit, written out: read (150,003 values)
    under = tmp_path / "under.yaml"
    under.write_text("model: [" + "1," * 150_000 + "1]\n")
    data, _ = read_yaml(under)
    assert len(data["model"]) == 150_001


def test_recursive_alias_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("a: &x [1, *x]\n")
    with pytest.raises(ConfigError, match="refers to itself"):
        read_yaml(path)


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("a: 1\nb: 2\na: 3\n", (1, 3)),
        ("top:\n  x: 1\n  y: 2\n  x: 1\n", (2, 4)),
        ("{a: 1, b: 2, 'a': 3}\n", (1, 1)),
        ("l:\n  - k: 1\n    k: 2\n", (2, 3)),
    ],
)
def test_duplicate_keys_refused_with_both_lines(
    tmp_path: Path, text: str, lines: tuple[int, int]
) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    message = str(info.value)
    assert f"(lines {lines[0]} and {lines[1]})" in message
    assert "duplicate key" in message


def test_duplicate_key_in_a_shipped_hardware_file(tree: Path) -> None:
    hardware = tree / "hw_configs" / "sn40l.yaml"
    text = hardware.read_text()
    old = "  usable_fraction: 0.9\n"
    hardware.write_text(text.replace(old, old + "  usable_fraction: 0.8\n", 1))
    error = str(_error(tree / "workloads" / LLAMA_1S))
    line = _line_of(hardware, "usable_fraction: 0.9")
    assert f"duplicate key 'usable_fraction' (lines {line} and {line + 1})" in error


@pytest.mark.parametrize(
    "literal",
    ["9" * 5000, "+" + "9" * 5000, "1_" * 3000 + "1", "-" + "1" * 41],
)
def test_integers_no_config_needs_are_refused_before_conversion(
    tmp_path: Path, literal: str
) -> None:
    path = tmp_path / "int.yaml"
    path.write_text(f"socket:\n  clock: {literal}\n")
    start = time.process_time()
    with pytest.raises(ConfigError, match="config integers have at most 40") as info:
        read_yaml(path)
    assert time.process_time() - start < 0.5
    assert info.value.issues[0].line == 2
    assert len(str(info.value)) < 400


@pytest.mark.parametrize("literal", ["010", "0x10", "0b101", "1:30", "1:30.5", "-010"])
def test_yaml_1_1_number_forms_are_text_a_number_field_refuses(literal: str) -> None:
    """Numbers are ASCII decimal: YAML 1.1's octal (010 was 8), hex (16), binary (5) and
    base-60 (90) forms are text, refused by a number's field in a file and in --set alike,
    as 0o10 is; decimal forms read as before."""
    data, _ = load_yaml(f"v: {literal}\nw: [12, -3, +4, 1_000, 0, 0.5, .5, 1e3, 1.5e-3]\n")
    assert data == {"v": literal, "w": [12, -3, 4, 1000, 0, 0.5, 0.5, 1000.0, 0.0015]}
    workload = REPO / "workloads" / LLAMA_1S
    error = str(_error(workload, [f"serving.requests={literal}"]))
    assert f"serving.requests: Input should be a valid integer (got '{literal}')" in error


def test_overrides_are_parsed_within_the_same_limits() -> None:
    workload = REPO / "workloads" / LLAMA_1S
    for value, words in (
        ("[" * 1000 + "]" * 1000, "nested"),
        ("9" * 5000, "at most 40"),
        ("0x" + "f" * 5000, "should be a valid integer"),  # text, shown short
        ("[&a [1,1,1,1,1,1,1,1,1,1], " + ", ".join(["*a"] * 5) + "]", None),
        ("{a: 1, a: 2}", "duplicate key 'a'"),
    ):
        start = time.process_time()
        error = _error(workload, [f"serving.requests={value}"])
        assert time.process_time() - start < 0.5
        assert "serving.requests" in str(error)
        if words is not None:
            assert words in str(error)
    deep_path = ".".join(["a"] * 1000) + "=1"
    assert "at most 64 levels" in str(_error(workload, [deep_path]))


def test_huge_file_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("# " + "x" * (11 * 2**20) + "\n")
    assert "larger than" in str(_error(path))


def test_unknown_model_lists_valid_names(tree: Path) -> None:
    workload = tree / "workloads" / LLAMA_1S
    _replace(workload, "model: llama-3.1-8b", "model: llama-9000")
    [issue] = _error(workload).issues
    assert issue.field == "model"
    assert issue.line == _line_of(workload, "llama-9000")
    for name in preset_names():
        assert name in issue.message


def test_tp_must_divide_heads(tree: Path) -> None:
    workload = tree / "workloads" / "llama3.1-8b-8socket.yaml"
    [issue] = _error(workload, ["parallelism.tp=3"]).issues
    assert issue.field == "parallelism.tp"
    assert "does not divide" in issue.message and "32" in issue.message


def test_tp_must_fit_the_sockets(tree: Path) -> None:
    [issue] = _error(tree / "workloads" / LLAMA_1S, ["parallelism.tp=2"]).issues
    assert issue.field == "parallelism.tp"
    assert "exceeds the 1 socket of" in issue.message


def test_context_beyond_model(tree: Path) -> None:
    [issue] = _error(tree / "workloads" / LLAMA_1S, ["serving.max_context=200000"]).issues
    assert issue.field == "serving.max_context"


def test_overrides_apply() -> None:
    scenario = load_scenario(
        REPO / "workloads" / "llama3.1-8b-8socket.yaml",
        [
            "serving.batch_slots=32",
            "parallelism.tp=4",
            "kv.policy=snapkv",
            "kv.budget=4096",
            "hw.socket.hbm.bandwidth=2.4 TB/s",
            "hw.socket.hbm.capacity=96 GiB",
            "kernel_looping=false",
        ],
    )
    assert scenario.workload.serving.batch_slots == 32
    assert scenario.tp == 4
    assert scenario.workload.kv.policy == "snapkv"
    assert scenario.workload.kv.budget == 4096
    assert scenario.workload.kernel_looping is False
    assert scenario.hardware.socket.hbm.bandwidth == pytest.approx(2.4e12)
    assert scenario.hardware.socket.hbm.capacity == 96 * 2**30


def test_overrides_as_mapping_and_model_edit() -> None:
    scenario = load_scenario(
        REPO / "workloads" / LLAMA_1S, {"model.layers": 4, "serving.requests": 1}
    )
    assert scenario.model.layers == 4
    assert scenario.model.hidden_size == 4096  # the rest of the preset is kept
    assert scenario.workload.serving.requests == 1


def test_override_errors_name_the_override() -> None:
    """An override's error is one issue naming it, not the hardware or stack file as if the
    shipped file were broken (it was two: 'hardware file ... is not valid:' first)."""
    path = REPO / "workloads" / LLAMA_1S
    [issue] = _error(path, ["hw.socket.hbm.bandwith=2 TB/s"]).issues
    assert issue.field == "socket.hbm.bandwith" and issue.line is None
    assert issue.message.endswith("(from --set hw.socket.hbm.bandwith)")
    [issue] = _error(path, ["hw.socket.hbm.bandwidth=2 TB"]).issues
    assert issue.message.endswith("got '2 TB' (from --set hw.socket.hbm.bandwidth)")
    [issue] = _error(path, ["stack.bogus=1"]).issues
    assert issue.field == "bogus" and issue.message.endswith("(from --set stack.bogus)")
    [issue] = _error(path, ["hw.socket.hbm.bandwidth.x=1"]).issues
    assert issue.message == (
        "cannot set inside 'socket.hbm.bandwidth', which is str, not a mapping "
        "(from --set hw.socket.hbm.bandwidth.x)"
    )
    [issue] = _error(path, ["serving.requests=-1"]).issues
    assert issue.field == "serving.requests" and "--set serving.requests" in issue.message
    with pytest.raises(ConfigError, match=r"field\.path=value"):
        load_scenario(path, ["no-equals-sign"])
    with pytest.raises(ConfigError, match="empty field name"):
        load_scenario(path, ["serving..requests=1"])
    with pytest.raises(ConfigError, match=r"not a mapping \(from --set serving\.requests\.x\)"):
        load_scenario(path, ["serving.requests.x=1"])


def test_a_broken_hardware_file_is_named_even_with_overrides(tree: Path) -> None:
    """The file's own fault keeps naming where the workload names it, whether or not
    overrides were given (one that is fine, or one at fault too); a hardware file given by
    --set hardware names that override instead of the workload's line. Each issue is one
    line naming the hardware file, the field and the problem (it was two, the first
    'hardware file ... is not valid:')."""
    hw = tree / "hw_configs" / "sn40l.yaml"
    _replace(hw, "    bandwidth: 1.8 TB/s", "    bandwith: 1.8 TB/s")
    workload = tree / "workloads" / LLAMA_1S
    line = _line_of(workload, "hardware: ")
    for overrides in (["hw.socket.hbm.capacity=64 GiB"], ["hw.socket.pcu.count=0"]):
        issues = _error(workload, overrides).issues
        typo = next(i for i in issues if i.field == "socket.hbm.bandwith")
        assert typo.file == str(hw) and typo.line == _line_of(hw, "bandwith:")
        assert typo.message.endswith(f" (the hardware of {workload}:{line})")
        assert all(i.file == str(hw) for i in issues)
    issues = _error(workload, [f"hardware={hw}"]).issues
    typo = next(i for i in issues if i.field == "socket.hbm.bandwith")
    assert str(typo).startswith(
        f"{hw}:{_line_of(hw, 'bandwith:')}: socket.hbm.bandwith: unknown field 'bandwith'; "
        "did you mean 'bandwidth'?"
    )
    assert all(
        i.message.endswith(f" (the hardware of {workload}, from --set hardware)") for i in issues
    )


def test_override_does_not_change_the_file_data() -> None:
    path = REPO / "workloads" / LLAMA_1S
    data, lines = read_yaml(path)
    build_scenario(data, workload_file=str(path), lines=lines, overrides=["serving.seed=7"])
    assert data["serving"]["seed"] == 0


CUSTOM_8B = """\
name: custom-8b
hardware: ../hw_configs/sn40l.yaml
model:
  family: llama
  name: my-llama
  vocab_size: 128256
  hidden_size: 4096
  layers: 32
  heads: 32
  kv_heads: 8
  head_dim: 128
  ffn_intermediate: 14336
  max_context: 131072
serving: {batch_slots: 8, max_context: 8192}
"""


def test_custom_architecture_works_like_a_preset(tree: Path) -> None:
    path = tree / "workloads" / "custom.yaml"
    path.write_text(CUSTOM_8B)
    scenario = load_scenario(path)
    assert isinstance(scenario.model, LlamaArchitecture)
    preset = get_model("llama-3.1-8b")
    assert scenario.model.model_dump(exclude={"name"}) == preset.model_dump(exclude={"name"})
    assert params_total(scenario.model) == params_total(preset) == 8_030_261_248
    assert kv_bytes_per_token(scenario.model, 2) == 131_072


def test_custom_architecture_typo_names_the_nested_key(tree: Path) -> None:
    path = tree / "workloads" / "custom.yaml"
    path.write_text(CUSTOM_8B.replace("  hidden_size:", "  hiden_size:"))
    error = _error(path)
    fields = {issue.field for issue in error.issues}
    assert fields == {"model.hiden_size", "model.hidden_size"}
    typo = next(i for i in error.issues if i.field == "model.hiden_size")
    assert typo.line == _line_of(path, "hiden_size")
    assert "did you mean 'hidden_size'" in typo.message
    assert "tagged-union" not in str(error) and "should be a valid string" not in str(error)


def test_custom_architecture_rules(tree: Path) -> None:
    path = tree / "workloads" / "custom.yaml"
    path.write_text(CUSTOM_8B.replace("kv_heads: 8", "kv_heads: 5"))
    [issue] = _error(path).issues
    assert issue.field == "model" and "multiple of kv_heads" in issue.message
    path.write_text(CUSTOM_8B.replace("  family: llama\n", ""))
    [issue] = _error(path).issues
    assert issue.field == "model" and "'family' is missing" in issue.message
    path.write_text(CUSTOM_8B.replace("family: llama", "family: gpt"))
    [issue] = _error(path).issues
    assert (issue.field, issue.line) == ("model.family", _line_of(path, "family: gpt"))
    assert issue.message == "unknown family 'gpt'; valid: llama, gqa_moe, deepseek"


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("model=42", "model"),
        ("serving.batch_slots=0", "serving.batch_slots"),
        ("serving.batch_slots=many", "serving.batch_slots"),
        ("serving.requests=true", "serving.requests"),
        ("serving.prompt_tokens={dist: uniform, low: 10, high: 5}", "serving.prompt_tokens"),
        ("serving.arrival.process=poisson", "serving.arrival.rate"),
        ("kv.policy=magic", "kv.policy"),
        ("kv.kernel_size=6", "kv.kernel_size"),
        ("dtypes.kv=fp7", "dtypes.kv"),
        ("hw.socket.pcu.count=0", "socket.pcu.count"),
        ("hw.system.sockets=12", "system"),
        ("hw.socket.hbm.latency=true", "socket.hbm.latency"),
        ("parallelism.tp=1.5", "parallelism.tp"),
        ("serving.seed='7'", "serving.seed"),
    ],
)
def test_rules_name_their_field(override: str, field: str) -> None:
    overrides = [override]
    if override.startswith("serving.arrival"):
        overrides.append("serving.arrival.rate=null")
    error = _error(REPO / "workloads" / LLAMA_1S, overrides)
    assert field in {issue.field for issue in error.issues}, str(error)


def test_snapstream_budget_rule() -> None:
    path = REPO / "workloads" / "deepseek-r1-128k-snapstream.yaml"
    [issue] = _error(path, ["kv.budget=1000"]).issues
    assert issue.field == "kv.budget" and "recent" in issue.message


def test_streamingllm_ring_mismatch_names_kv_recent() -> None:
    path = REPO / "workloads" / "deepseek-r1-128k-snapstream.yaml"
    [issue] = _error(path, ["kv.policy=streamingllm", "kv.recent=1000"]).issues
    assert issue.field == "kv.recent" and "!= kv.budget 32768" in issue.message


def test_the_scenario_carries_the_policy_built_once() -> None:
    """Every room asks the Scenario's policy: the compiler's slot and a run's policy are it."""
    from rdu_sim.compiler.placement import slot_tokens

    scenario = load_scenario(REPO / "workloads" / "deepseek-r1-128k-snapstream.yaml")
    policy = scenario.kv_policy
    assert policy.name == "snapstream" and policy.max_context == 131072
    assert slot_tokens(scenario) == policy.slot_tokens() == 32768


def test_the_registry_is_the_only_list_of_policy_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A policy registered in rdu_sim.kv is valid in a workload (the config model keeps no
    list of its own) and `rdu-sim schema workload` lists it."""
    from rdu_sim.cli.schema_cmd import json_schema
    from rdu_sim.kv import policies

    class RingOnly(policies.StreamingLLMPolicy):
        name = "ring_only_test"

    monkeypatch.setitem(policies._REGISTRY, "ring_only_test", RingOnly)
    scenario = load_scenario(REPO / "workloads" / LLAMA_1S, ["kv.policy=ring_only_test"])
    assert isinstance(scenario.kv_policy, RingOnly)
    enum = json_schema("workload")["$defs"]["KVConfig"]["properties"]["policy"]["enum"]
    assert enum == policies.policy_names() and "ring_only_test" in enum
    [issue] = _error(REPO / "workloads" / LLAMA_1S, ["kv.policy=ring-only"]).issues
    assert issue.field == "kv.policy" and "valid policies: full, ring_only_test" in issue.message
    # a plan's searched policies are checked against the same registry
    from rdu_sim.plan.spec import load_plan

    plan = tmp_path / "plan.yaml"
    text = (REPO / "workloads" / "plans" / "llama3.1-8b-chat.yaml").read_text()
    text = text.replace("../clusters/", f"{REPO / 'workloads' / 'clusters'}/")
    plan.write_text(text.replace("  tp: [1, 2]\n", "  tp: [1, 2]\n  kv_policy: [full, lru]\n"))
    with pytest.raises(ConfigError) as info:
        load_plan(plan)
    [issue] = info.value.issues
    assert issue.field == "search.kv_policy" and issue.line == 11
    assert "unknown kv.policy 'lru'; valid policies: full, ring_only_test" in issue.message
    plan.write_text(text.replace("  tp: [1, 2]\n", "  tp: [1]\n  kv_policy: [ring_only_test]\n"))
    assert load_plan(plan).spec.search.kv_policy == ["ring_only_test"]


def test_kv_rules_are_the_policys_own() -> None:
    """The load-time check is the policy's: SnapKV has no sinks, so a budget just above the
    observation window is valid (an earlier duplicate rule refused it)."""
    path = REPO / "workloads" / "deepseek-r1-128k-snapstream.yaml"
    scenario = load_scenario(path, ["kv.policy=snapkv", "kv.budget=34"])
    assert scenario.workload.kv.budget == 34
    [issue] = _error(path, ["kv.policy=snapkv", "kv.budget=32"]).issues
    assert issue.field == "kv.budget" and "observation_window" in issue.message


@pytest.mark.parametrize(
    "override",
    [
        "serving.requests=true",
        "kernel_looping=1",
        "parallelism.tp=yes",
        "serving.arrival.rate=true",
    ],
)
def test_no_silent_type_coercion(override: str) -> None:
    """Strict types: `requests: yes` is not 1 request, `kernel_looping: 1` is not true."""
    [issue] = _error(REPO / "workloads" / LLAMA_1S, [override]).issues
    assert issue.field == override.split("=")[0]


def test_bool_is_not_a_size(tree: Path) -> None:
    hw = tree / "hw_configs" / "sn40l.yaml"
    _replace(hw, "capacity: 64 GiB", "capacity: yes")
    [issue] = _error(tree / "workloads" / LLAMA_1S).issues
    assert issue.field == "socket.hbm.capacity"
    assert "True" in issue.message


def test_forced_collective_algorithms_need_a_wiring_that_runs_them() -> None:
    path = REPO / "workloads" / "llama3.1-8b-8socket.yaml"
    assert load_scenario(path).hardware.system.collective_algorithm == "auto"
    # the shipped switched fabric has no tree (two-shot beats it through one port)
    error = _error(path, ["hw.system.collective_algorithm=tree"])
    assert "fully_connected" in str(error) and "parallelism.tp" in str(error)
    assert "allows ring, bidirectional_ring, one_shot, two_shot" in str(error)
    # a ring of neighbour links runs rings only
    for algorithm in ("one_shot", "two_shot", "tree"):
        error = _error(
            path, ["hw.system.topology=ring", f"hw.system.collective_algorithm={algorithm}"]
        )
        assert f"collective_algorithm: {algorithm}" in str(error)
    # a pair of sockets is one link: any algorithm runs on it
    pair = load_scenario(path, ["hw.system.collective_algorithm=tree", "parallelism.tp=2"])
    assert pair.tp == 2
    scenario = load_scenario(
        path, ["hw.system.collective_algorithm=tree", "hw.system.topology=fully_connected"]
    )
    assert scenario.hardware.system.collective_algorithm == "tree"
    for old in ("ring", "bidirectional_ring"):  # the former values keep working everywhere
        for topology in ("ring", "switched", "fully_connected"):
            ok = load_scenario(
                path,
                [f"hw.system.collective_algorithm={old}", f"hw.system.topology={topology}"],
            )
            assert ok.hardware.system.collective_algorithm == old


@pytest.mark.parametrize(
    "override, field",
    [
        ("moe_expert_loading=dynamic", "moe_expert_loading"),
        ("hw.system.collective_algorithm=butterfly", "collective_algorithm"),
        ("engine.operand_buffer_fraction=-0.1", "engine.operand_buffer_fraction"),
    ],
)
def test_new_fields_refuse_bad_values_by_name(override: str, field: str) -> None:
    error = _error(REPO / "workloads" / "deepseek-r1-128k-snapstream.yaml", [override])
    assert field in str(error)


def test_kv_errors_blame_the_field_at_fault() -> None:
    """Each kv error is one issue at the field to fix: the ratio beside a budget (not the
    first --set under kv), a budget max_context / kv.compression_ratio made (the ratio's, and
    it says so), a misspelt or miscased policy (with the name meant), a bucket word."""
    path = REPO / "workloads" / LLAMA_1S
    both = ["kv.policy=snapstream", "kv.compression_ratio=4", "kv.budget=1000"]
    [issue] = _error(path, both).issues
    assert issue.field == "kv.compression_ratio"
    assert "not both" in issue.message and "(from --set kv.compression_ratio)" in issue.message
    [issue] = _error(path, ["kv.policy=snapstream", "kv.compression_ratio=4"]).issues
    assert issue.field == "kv.compression_ratio"
    assert "serving.max_context 8192 / kv.compression_ratio 4" in issue.message
    [issue] = _error(path, ["kv.policy=snapstreem"]).issues
    assert "unknown kv.policy 'snapstreem' (did you mean 'snapstream'?)" in issue.message
    [issue] = _error(path, ["kv.policy=SnapStream"]).issues
    assert "(did you mean 'snapstream'? names are lower case)" in issue.message
    [issue] = _error(path, ["kv.context_buckets=linear"]).issues
    assert issue.field == "kv.context_buckets"
    assert "must be 'pow2' or a list of lengths, got 'linear'" in issue.message


def test_every_fitted_gpu_field_says_so_where_a_new_gpu_is_copied_from() -> None:
    """A user copying dgx-h100.yaml for another GPU learns which values were fitted on H100
    measurements (the joint calibration's dgx-h100 fits): the comment above each says
    FITTED, and docs/gpu.md's section on a new GPU names it."""
    import yaml

    repo = Path(__file__).resolve().parents[1]
    fits = yaml.safe_load((repo / "calibrations" / "joint.yaml").read_text())["fit"]
    fitted = [f.split("=")[0].removeprefix("dgx-h100:hw.") for f in fits if "dgx-h100:" in f]
    assert len(fitted) >= 3, fitted
    lines = (repo / "hw_configs" / "dgx-h100.yaml").read_text().splitlines()
    docs = (repo / "docs" / "gpu.md").read_text()
    section = docs[docs.index("## A new GPU from its datasheet") :]
    section = section[: section.index("\n## ")]
    for path in fitted:
        name = path.split(".")[-1]
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{name}:"))
        start = at
        while start > 0 and lines[start - 1].strip().startswith("#"):
            start -= 1
        assert "FITTED" in "\n".join(lines[start:at]), path
        assert f"`{path.removeprefix('gpu.')}`" in section, path


def test_a_snapstream_rule_binds_only_when_a_prompt_can_be_compressed() -> None:
    """The window-inside-the-ring rule is checked after the budget is clipped: a default
    budget of 4,096 above a 1,024-token context compresses nothing, so a 16-token ring is
    no error; below the context it is, blamed on the field the --set gave, with both values
    and why the rule binds."""
    path = REPO / "workloads" / LLAMA_1S
    clipped = ["kv.policy=snapstream", "serving.max_context=1024", "kv.recent=16"]
    policy = load_scenario(path, clipped).kv_policy
    assert policy.slot_tokens() == 1024 and not policy.compresses(1023)
    assert policy.layout() == (
        "snapstream: budget 4,096 clipped to the 1,024-token context: nothing is compressed, "
        "1,024 tokens a slot"
    )
    [issue] = _error(path, [*clipped, "kv.budget=512"]).issues
    assert issue.field == "kv.recent" and issue.line is None
    assert issue.message == (
        "kv.observation_window (32) must be <= kv.recent (16): the window sits inside the "
        "ring buffer, and the budget 512 < serving.max_context 1024 compresses long prompts "
        "(from --set kv.recent)"
    )
    window = ["kv.policy=snapstream", "serving.max_context=1024", "kv.budget=512"]
    [issue] = _error(path, [*window, "kv.observation_window=4000"]).issues
    assert issue.field == "kv.observation_window"
    assert issue.message.endswith("(from --set kv.observation_window)")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (  # a length takes a number too: not "expected a mapping of fields" (trial Q)
            "serving.output_tokens=1.5",
            "serving.output_tokens: expected a whole number or a distribution's mapping "
            "({dist: fixed, uniform or lognormal, ...}), got 1.5",
        ),
        (
            "serving.prompt_tokens=true",
            "serving.prompt_tokens: expected a whole number or a distribution's mapping "
            "({dist: fixed, uniform or lognormal, ...}), got True",
        ),
        ("serving.arrival=5", "serving.arrival: expected a mapping of fields, got 5"),
        (  # a choice in the house words, not pydantic's "Input should be 'fp32', ..."
            "dtypes.kv=fp4",
            "dtypes.kv: must be fp32, bf16, fp16, fp8, int8 or int4, got 'fp4'",
        ),
        (
            "serving.arrival.process=poison",
            "serving.arrival.process: must be poisson, closed_loop or all_at_once, got 'poison'",
        ),
    ],
)
def test_a_wrong_kind_of_value_is_told_what_its_field_accepts(override: str, message: str) -> None:
    field = override.split("=")[0]
    error = str(_error(REPO / "workloads" / LLAMA_1S, [override]))
    assert error.endswith(f": {message} (from --set {field})"), error
