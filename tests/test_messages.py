"""Messages a new user met (issue 46), each saying what is wrong in the user's own terms.

- a model too large for one socket names its weights' real size and that tp needs more
  sockets first (it said "64 GiB of the 64 GiB HBM" and "raise parallelism.tp" on a
  1-socket file);
- a rate written as a bare number names the field, how it reads and the unit to write (it
  ended in the serving clock's range error naming neither);
- a token count takes ``128k`` wherever ``plot --contexts`` does;
- a tab in YAML is called a tab, with its line and column;
- trace times carry no float noise (a 7 us launch is 7.0, not 6.999999999999999);
- one speculative user's rates say what each counts;
- the all-users rate says the span it divides by (first token to last, not the makespan).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rdu_sim import InputError, api, human
from rdu_sim.cli.main import cli
from rdu_sim.cli.plot_cmd import _tokens
from rdu_sim.config.units import UnitError, parse_bandwidth, parse_flops, parse_tokens
from rdu_sim.models import weight_bytes

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "workloads" / "llama3.1-8b-1socket.yaml"


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def error_line(result: Result) -> str:
    """The one `error:` line of a refused command (exit 2, no traceback; `check` adds its
    count of failed files)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    lines = [line for line in lines if not line.endswith("file(s) failed the check")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_model_too_large_for_its_socket_names_its_weights_and_more_sockets() -> None:
    line = error_line(invoke("run", LLAMA, "--set", "model=llama-3.1-405b"))
    scenario = api.load(LLAMA, {"model": "llama-3.1-405b"})
    total = human.size(weight_bytes(scenario.model, 2), 4)  # BF16, the whole model on tp=1
    assert total == "756 GiB"
    assert f"llama-3.1-405b weights need {total} per socket (tp=1, bf16)" in line
    # what the setting does: hbm keeps every weight in HBM (it said "puts 64 GiB of them
    # in HBM, the rest in DDR", which is hot_set's placement, not hbm's)
    assert "memory.weights hbm keeps all of them in HBM, 692 GiB more than it holds" in line
    assert "DDR," not in line and "the rest" not in line
    assert "64 GiB of the 64 GiB" not in line
    assert "raise parallelism.tp on more sockets (hw.system.sockets, now 1" in line
    assert "raise parallelism.tp (now 1)" not in line
    # on a node whose sockets tp does not use yet, raising tp is the way, up to them
    line = error_line(
        invoke(
            "run",
            ROOT / "workloads" / "llama3.1-70b-decode.yaml",
            "--set",
            "model=llama-3.1-405b",
            "--set",
            "parallelism.tp=4",
        )
    )
    assert "raise parallelism.tp (now 4, up to the 8 sockets)" in line


def test_a_bare_rate_names_the_field_and_the_unit(tmp_path: Path) -> None:
    hardware = (ROOT / "hw_configs" / "sn40l.yaml").read_text()
    written = "    bandwidth: 1.8 TB/s"
    assert written in hardware
    lines = hardware.splitlines()
    number = next(i for i, line in enumerate(lines, 1) if line.startswith(written))
    (tmp_path / "hw.yaml").write_text(hardware.replace(written, "    bandwidth: 2000", 1))
    line = error_line(invoke("check", tmp_path / "hw.yaml"))
    assert line == (
        f"error: {tmp_path / 'hw.yaml'}:{number}: socket.hbm.bandwidth: 2000 without a unit "
        "reads as 2 kB/s (a bare bandwidth is bytes per second; one below 1 GB/s is taken for "
        "a forgotten unit); write the unit, as in '2000 GB/s'"
    )
    # 8 TB/s written in MB/s: 8 MB/s, past the old floor of a million (a step of hours)
    (tmp_path / "hw.yaml").write_text(hardware.replace(written, "    bandwidth: 8000000", 1))
    line = error_line(invoke("check", tmp_path / "hw.yaml"))
    assert line == (
        f"error: {tmp_path / 'hw.yaml'}:{number}: socket.hbm.bandwidth: 8000000 without a unit "
        "reads as 8 MB/s (a bare bandwidth is bytes per second; one below 1 GB/s is taken for "
        "a forgotten unit); write the unit, as in '8000000 MB/s'"
    )
    result = invoke("run", LLAMA, "--set", "hw.socket.pcu.peak_flops=1000")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "socket.pcu.peak_flops: 1000 without a unit reads as 1 kFLOP/s (a bare compute " in (
        result.stderr
    )
    assert "as in '1000 TFLOP/s'" in result.stderr and "clock" not in result.stderr
    # a bare number in the internal unit still reads as one from the floor up; a unit is
    # always taken, however slow
    assert parse_bandwidth(2e12) == 2e12 and parse_bandwidth("2000 B/s") == 2000
    assert parse_bandwidth(1e9) == 1e9 and parse_bandwidth("100 MB/s") == 1e8
    assert parse_flops(6.38e14) == 6.38e14 and parse_flops(1e9) == 1e9
    for slow in (999_999, 999_999_999):
        with pytest.raises(UnitError, match="without a unit"):
            parse_bandwidth(slow)
        with pytest.raises(UnitError, match="without a unit"):
            parse_flops(slow)


def test_a_token_count_takes_k_as_plot_contexts_does() -> None:
    result = invoke(
        "run", LLAMA, "--set", "serving.max_context=16k", "--set", "serving.requests=2", "--json"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["max_context"] == 16384 == _tokens("16k")
    scenario = api.load(ROOT / "workloads" / "deepseek-r1-128k-snapstream.yaml")
    same = api.load(
        ROOT / "workloads" / "deepseek-r1-128k-snapstream.yaml",
        {"serving.max_context": "128k", "kv.budget": "32K"},
    )
    assert same.workload == scenario.workload
    assert [parse_tokens(t) for t in ("8192", "8k", " 1M ", 4096)] == [8192, 8192, 2**20, 4096]
    line = error_line(invoke("run", LLAMA, "--set", "serving.max_context=128q"))
    assert "serving.max_context: expected a token count such as 8192 or 128k, got '128q'" in line
    line = error_line(invoke("run", LLAMA, "--set", "serving.max_context=0k"))
    assert "serving.max_context: must be at least 1, got 0k" in line


def test_a_tab_in_yaml_is_called_a_tab(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(LLAMA.read_text().replace("  batch_slots: 16", "\tbatch_slots: 16"))
    line = error_line(invoke("check", path))
    number = 1 + path.read_text().splitlines().index("\tbatch_slots: 16")
    assert line == (
        f"error: {path}:{number}: not valid YAML: a tab at column 1, where YAML takes only "
        "spaces (it indents with spaces): replace the tab with spaces"
    )


def test_trace_times_carry_no_float_noise(tmp_path: Path) -> None:
    """The step's Perfetto trace: a 7 us launch (program load + argument load) is 7.0; every
    time is microseconds rounded to the picosecond, as the serving trace's are."""
    out = tmp_path / "step.json"
    assert invoke("step", LLAMA, "--trace", out).exit_code == 0
    events = json.loads(out.read_text())["traceEvents"]
    launches = {e["dur"] for e in events if e.get("name") == "launch"}
    assert launches == {7.0}
    for event in events:
        for key in ("ts", "dur"):
            if key in event:
                assert round(event[key], 6) == event[key], event


def test_one_speculative_users_rates_say_what_each_counts() -> None:
    """One user with a draft: the rate the user sees (1/TPOT) is above the all-users rate,
    whose label and note say the prefill stalls count in it (they sat side by side unsaid)."""
    workload = ROOT / "workloads" / "speculative" / "llama3.1-70b-16socket-specdec.yaml"
    args = ("run", workload, "--set", "serving.requests=3")
    data = json.loads(invoke(*args, "--json").stdout)
    user, everyone = data["user_tokens_per_s"]["p50"], data["decode_tokens_per_s"]
    assert user > everyone
    text = " ".join(invoke(*args).stdout.split())
    assert "output tokens/s, all users (prefill stalls included)" in text
    assert "tokens/s one user sees while streaming (p50 of 1/TPOT)" in text
    assert (
        f"One user sees {human.rate(user, 'tokens/s')} while its tokens stream (1/TPOT); the "
        f"all-users rate, {human.rate(everyone, 'tokens/s')}, divides every output token by "
        "the whole span of decoding, so the time each prefill holds the slots"
    ) in text


def test_the_all_users_rate_says_the_span_it_divides_by() -> None:
    """The all-users rate divides by the run's first token to its last (``decode_span_s``),
    not by the makespan printed above it (from the first arrival): the row says which span,
    and the JSON carries it (24,605 tokens / 51.6 s read as 476 tok/s against the 478 shown)."""
    result = api.run(LLAMA, {"serving.requests": 8, "serving.output_tokens": 64})
    data = result.to_dict()
    requests = result.requests()
    span = float(requests["finish_s"].max() - requests["first_token_s"].min())
    assert data["decode_span_s"] == pytest.approx(span, rel=1e-11)
    assert data["makespan_s"] > data["decode_span_s"]  # the first arrival waits for no token
    assert data["output_tokens"] / data["decode_span_s"] == pytest.approx(
        data["decode_tokens_per_s"], rel=1e-11
    )
    text = " ".join(
        invoke(
            "run", LLAMA, "--set", "serving.requests=8", "--set", "serving.output_tokens=64"
        ).stdout.split()
    )
    rate = human.rate(data["decode_tokens_per_s"], "tok/s")
    row = f"output tokens/s, all users (prefill stalls included) │ {rate} over "
    assert f"{row}{human.duration(data['decode_span_s'])} (first token to last) │" in text
    assert human.duration(data["decode_span_s"]) != human.duration(data["makespan_s"])


def test_a_gpu_whose_kv_cache_does_not_fit_says_per_gpu() -> None:
    """A capacity error on a GPU counts HBM per GPU (it said 'per socket')."""
    # static slots of max_context each (a paged pool holds requests, not slots)
    args = ("--set", "hardware=dgx-h100", "--set", "serving.batch_slots=200")
    args = (*args, "--set", "stack.kv_page_tokens=null")
    line = error_line(invoke("run", LLAMA, *args))
    assert "per GPU, more than its whole HBM (80 GiB)" in line and "per socket" not in line
    line = error_line(invoke("run", LLAMA, *args, "--set", "model=llama-3.1-405b"))
    assert "weights need 756 GiB per GPU (tp=1, bf16)" in line and "per socket" not in line


def test_a_data_parallel_layout_that_does_not_fit_names_levers_it_can_pull() -> None:
    """dp_attention 8 x ep 8 on 16 sockets: tp can grow only to 2 beside the 8 ranks (it
    said 'up to the 16 sockets'), and the experts can spread over more ranks."""
    ep = ROOT / "workloads" / "ep" / "deepseek-r1-sn40l-4racks-ep64.yaml"
    sets = ("hardware=sn40l-16", "parallelism.dp_attention=8", "parallelism.ep=8")
    line = error_line(invoke("step", ep, *(a for s in sets for a in ("--set", s))))
    assert "raise parallelism.tp (now 1, up to 2 with dp_attention 8 on the 16 sockets)" in line
    assert "raise parallelism.dp_attention with parallelism.ep (now 8 and 8" in line
    assert "up to the 16 sockets)" in line.split("raise parallelism.dp_attention")[1]


def test_an_expert_parallel_layout_filling_its_hardware_names_file_layout_and_ep_levers() -> None:
    """dp_attention 8 x ep 8 on an 8-GPU H800 node: DeepSeek's weights do not fit. The way
    out is more ranks with a larger ep (on more GPUs) or 4-bit experts, not 'raise
    parallelism.tp on more GPUs' (it said only that: the ep hint needed spare devices);
    the line names the workload file and the whole layout."""
    ep = ROOT / "workloads" / "ep" / "deepseek-v3-h100-ep72-decode.yaml"
    sets = ("hardware=hgx-h800", "parallelism.dp_attention=8", "parallelism.ep=8",
            "experts.redundant=0")  # fmt: skip
    args = [a for s in sets for a in ("--set", s)]
    line = error_line(invoke("step", ep, *args, "--batch", "16"))
    assert line.startswith(f"error: {ep}: parallelism.dp_attention: the weights alone do not fit")
    assert "weights need 92.09 GiB per GPU (tp=1, dp_attention=8, ep=8, fp8_block)" in line
    assert line.endswith(
        "store the routed experts in 4 bits (dtypes.experts mxfp4 or int4, now fp8_block), "
        "spread the experts over more ranks: raise parallelism.dp_attention with "
        "parallelism.ep (now 8 and 8; ep = tp x dp_attention, on more GPUs: "
        "hw.system.sockets, now 8, or a hardware file with more) or give each GPU more HBM "
        "(hw.gpu.hbm.capacity, now 80 GiB) (from --set parallelism.dp_attention, --set "
        "parallelism.ep)"
    )
    assert "raise parallelism.tp" not in line


def test_a_bad_hardware_file_given_by_set_is_one_line(tmp_path: Path) -> None:
    """`--set hardware=PATH` to a file with a bad field: one error line naming the file, its
    line, the field and the problem, ending with the workload and the override (it was two:
    'hardware file ... is not valid: (from --set hardware)', then the real one)."""
    hw = tmp_path / "mine.yaml"
    text = (ROOT / "hw_configs" / "sn40l.yaml").read_text()
    assert text.count("bandwidth: 1.8 TB/s") == 1
    hw.write_text(text.replace("bandwidth: 1.8 TB/s", "bandwidth: -1 TB/s"))
    line = next(n for n, row in enumerate(hw.read_text().splitlines(), 1) if "-1 TB/s" in row)
    said = error_line(invoke("run", LLAMA, "--set", f"hardware={hw}"))
    assert said == (
        f"error: {hw}:{line}: socket.hbm.bandwidth: must be at least 1 B/s, got -1 TB/s (the "
        f"hardware of {LLAMA}, from --set hardware)"
    )


def test_a_misspelt_stack_or_hardware_name_gets_a_did_you_mean() -> None:
    """An unknown shipped name is told at the field that named it, with the closest shipped
    name, as a misspelt field is (``loader.did_you_mean``), and every shipped name; one line.
    A name close to none gets no guess."""
    said = error_line(invoke("run", LLAMA, "--set", "stack=trtllm"))
    assert said.startswith(
        f"error: {LLAMA}: stack: unknown serving stack 'trtllm'; did you mean 'tensorrt-llm'? "
        "(a path is relative to the file naming it; a bare name is a shipped stack: "
        "sambastack-2025, "
    )
    assert said.endswith(", vllm-2024, or 'none') (from --set stack)")
    said = error_line(invoke("run", LLAMA, "--set", "hardware=dgx-h10"))
    assert "hardware: unknown hardware file 'dgx-h10'; did you mean 'dgx-h100'? (a path" in said
    assert said.endswith("(from --set hardware)")
    # a bare name is told as a name, not as the path it was tried at (the trial's
    # site-packages path, as if the name were a file there), with the shipped ones
    said = error_line(invoke("run", LLAMA, "--set", "hardware=sn40l-32"))
    assert "unknown hardware file 'sn40l-32'; did you mean 'sn40l'? (a path" in said
    assert "a bare name is a shipped hardware file: dgx-h100, " in said
    assert str(ROOT / "workloads" / "sn40l-32") not in said
    said = error_line(invoke("run", LLAMA, "--set", "hardware=mine/sn40l-32.yaml"))  # a path
    assert f"hardware file '{ROOT / 'workloads' / 'mine' / 'sn40l-32.yaml'}': file not" in said
    # a name differing in case only is meant; so is the longest shipped name it extends
    said = error_line(invoke("run", LLAMA, "--set", "hardware=SN40L-16"))
    assert "unknown hardware file 'SN40L-16'; did you mean 'sn40l-16'?" in said
    said = error_line(invoke("run", LLAMA, "--set", "hardware=sn40l-typo"))
    assert "unknown hardware file 'sn40l-typo'; did you mean 'sn40l'?" in said
    # but a name nearly a longer one is that one (not the stem it starts with)
    for typed, meant in (("sn40l-4rack", "sn40l-4racks"), ("dgx-h100-vlm", "dgx-h100-vllm")):
        said = error_line(invoke("run", LLAMA, "--set", f"hardware={typed}"))
        assert f"unknown hardware file '{typed}'; did you mean '{meant}'?" in said
    said = error_line(invoke("run", LLAMA, "--set", "stack=qqqq"))
    assert "stack: unknown serving stack 'qqqq' (a path is relative" in said
    assert "did you mean" not in said
    said = error_line(invoke("run", LLAMA, "--set", "stack=mine/qqqq.yaml"))  # a path
    assert f"stack: serving stack '{ROOT / 'workloads' / 'mine' / 'qqqq.yaml'}': file not " in said


def test_plot_errors_say_what_the_plot_kind_takes(tmp_path: Path) -> None:
    """The trial: `plot deployment missing.json` listed shipped workloads and `plot
    deployment mine.csv` asked for a run's JSON, a sweep database or a workload YAML (what
    other plots take); each now says what the deployment plot reads. A misspelt kind gets a
    did-you-mean."""
    mine = tmp_path / "mine.csv"
    mine.write_text("a,b\n1,2\n")
    out = str(tmp_path / "x.png")
    takes = (
        "the deployment plot reads the JSON `rdu-sim validate --suite deployment --json` "
        "prints, or a calibration's fit.json"
    )
    said = error_line(invoke("plot", "deployment", str(tmp_path / "missing.json"), "-o", out))
    assert said.endswith("missing.json: file not found; " + takes + " (`rdu-sim calibrate`)")
    assert "shipped workload" not in said
    said = error_line(invoke("plot", "deployment", str(mine), "-o", out))
    assert said.startswith(f"error: {mine}: not JSON (") and takes in said
    assert "workload YAML" not in said
    said = error_line(invoke("plot", "calibration", str(mine), "-o", out))
    assert said.endswith("the calibration plot reads the JSON `rdu-sim validate --json` prints")
    said = error_line(invoke("plot", "deplyment", str(mine), "-o", out))
    assert said.startswith("error: unknown plot kind 'deplyment'; did you mean 'deployment'? ")
    said = error_line(invoke("plot", "pie", str(mine), "-o", out))
    assert "did you mean" not in said and "valid kinds: memory, " in said


def test_check_calls_an_empty_csv_neither_kind_in_particular(tmp_path: Path) -> None:
    """An empty .csv may have been a measurement file as well as a trace: `rdu-sim check`
    said "a trace has a row per request"; it names both kinds a CSV it reads can be."""
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    said = error_line(invoke("check", str(empty)))
    assert said.startswith(f"error: {empty}: is empty: a CSV `rdu-sim check` reads is a request ")
    assert "or a measurement file (a header naming its columns: metric, measured" in said


def sets(*pairs: str) -> list[str]:
    return [a for pair in pairs for a in ("--set", pair)]


def test_a_product_of_several_overrides_names_every_one_that_enters_it() -> None:
    """tp x dp_attention x pp beyond the hardware's sockets is at ``parallelism``: its note
    named the first override under it, tp whichever was at fault; it now names each
    override that enters the product, in the order given, and none that does not."""
    gpt = ROOT / "workloads" / "gpt-oss-120b-8socket.yaml"
    tp_pp = error_line(invoke("step", gpt, *sets("parallelism.tp=8", "parallelism.pp=3")))
    assert "8 x 1 x 3 = 24 sockets, more than the 8" in tp_pp
    assert tp_pp.endswith("(from --set parallelism.tp, --set parallelism.pp)")
    pp_only = error_line(
        invoke("step", gpt, *sets("parallelism.mla_cache_layout=replicated", "parallelism.pp=3"))
    )
    assert pp_only.endswith("(from --set parallelism.pp)")


def test_weights_that_do_not_fit_name_each_layout_override_not_tp_alone() -> None:
    """DeepSeek-R1 over 8 H100s as dp_attention 8 x ep 8 (tp 1): the weights do not fit. It
    said "(from --set parallelism.tp)", tp=1 its smallest share; every layout override that
    sizes a GPU's share is named, and the hardware's HBM (the other side) is not."""
    h100 = ROOT / "workloads" / "ep" / "deepseek-r1-h100.yaml"
    layout = ("parallelism.tp=1", "parallelism.dp_attention=8", "parallelism.ep=8")
    line = error_line(invoke("step", h100, *sets("hardware=dgx-h100", *layout)))
    assert "the weights alone do not fit" in line
    assert line.endswith(
        "(from --set parallelism.tp, --set parallelism.dp_attention, --set parallelism.ep)"
    )


@pytest.mark.parametrize("given", [float("nan"), ".nan"])
def test_nan_for_a_bounded_number_says_it_is_no_finite_number_not_blames_the_bound(
    given: object,
) -> None:
    """NaN fails every comparison, so pydantic's bound check said ``must be at most
    1,000,000,000, got nan``: as if a smaller NaN would do. A float from Python and YAML's
    ``.nan`` from --set say what a quantity's field already says of it."""
    overrides = {"serving.arrival.rate": given} if isinstance(given, float) else None
    if overrides is None:
        result = CliRunner().invoke(
            cli, ["run", str(LLAMA), "--set", f"serving.arrival.rate={given}"]
        )
        assert result.exit_code == 2, result.output
        message = result.output
    else:
        with pytest.raises(InputError) as caught:
            api.load(LLAMA, overrides)
        message = str(caught.value)
    assert "serving.arrival.rate: must be a finite number, got nan" in message, message
    assert "at most" not in message
