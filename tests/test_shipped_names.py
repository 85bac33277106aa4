"""One resolver for every file a command takes: a path that exists, else a shipped file by
name, else one project ``error:`` line (never click's "does not exist")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim import api
from rdu_sim.cli.main import cli
from rdu_sim.config import shipped
from rdu_sim.config.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def _invoke(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args)
    assert "Traceback" not in result.stderr
    return result.exit_code, result.stdout, result.stderr


def test_each_shipped_file_has_one_kind_and_resolves_by_its_name() -> None:
    for kind in shipped.KINDS:
        for name, path in shipped.entries(kind).items():
            assert shipped.locate(name, (kind,)) == path
    assert shipped.kind_of(Path("workloads/speculative/llama3.1-70b-16socket-specdec.yaml")) == (
        "workload"
    )
    assert shipped.kind_of(Path("workloads/sweeps/llama8b-batch.yaml")) == "sweep"
    assert shipped.kind_of(Path("tests/models/kimi-k2/config.json")) == "model"
    # a folder's name as a prefix of another's is not that folder; a README is no kind
    assert shipped.kind_of(Path("workloadsx/llama8b-batch.yaml")) is None
    assert shipped.kind_of(Path("workloads/traces/mooncake-300.jsonl")) == "trace"
    assert shipped.kind_of(Path("workloads/README.md")) is None
    assert shipped.locate("mooncake-300.jsonl", ("trace",)).name == "mooncake-300.jsonl"
    assert shipped.locate("qwen3-32b", ("model",)) == REPO / "tests/models/qwen3-32b/config.json"
    folder = REPO / "tests/models/qwen3-32b"
    assert shipped.locate(folder, ("model",)) == folder / "config.json"  # a folder: its file


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            "sn40l-9",
            "sn40l-9: file not found, and no shipped hardware file of that name (shipped "
            "hardware files: dgx-h100, dgx-h100-2nodes, dgx-h100-4nodes, dgx-h100-9nodes, "
            "dgx-h100-vllm, dgx-h200, "
            "hgx-h800, "
            "sn40l, sn40l-16, sn40l-4racks, sn40l-8); "
            "`rdu-sim examples` lists",
        ),
        (
            "hw/sn40l-9.yaml",
            "hw/sn40l-9.yaml: file not found (here or among the shipped files); `rdu-sim "
            "examples` lists them",
        ),
    ],
)
def test_neither_a_file_nor_a_name_is_one_error(given: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        shipped.locate(given, ("hardware",))
    assert str(caught.value).startswith(message)


def test_compare_takes_hardware_names_and_refuses_others_in_the_project_format() -> None:
    status, out, err = _invoke(["compare", "llama3.1-8b-1socket", "--hardware", "sn40l", "--json"])
    assert status == 0, err
    assert [c["hardware"] for c in json.loads(out)["columns"]] == ["sn40l"]
    status, out, err = _invoke(["compare", "llama3.1-8b-1socket", "--hardware", "nope.yaml"])
    assert status == 2 and out == ""
    assert err.startswith("error: nope.yaml: file not found, and no shipped hardware file of")
    assert "Invalid value" not in err and len(err.splitlines()) == 1


def test_plot_takes_a_workload_name_or_a_shipped_sweeps_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(shipped, "installed_root", lambda: REPO)  # outputs go to the cwd
    status, _, err = _invoke(["plot", "sweep", "llama8b-batch"])
    assert status == 2
    assert err.strip() == (
        f"error: llama8b-batch: the shipped sweep has no database yet "
        f"({tmp_path / 'llama8b-batch.sqlite'}); run `rdu-sim sweep llama8b-batch` first"
    )
    status, _, err = _invoke(["plot", "memory", "llama3.1-8b-1socket", "--contexts", "8k"])
    assert status == 0, err
    assert (tmp_path / "memory.png").read_bytes()[:4] == b"\x89PNG"


def test_inspect_model_takes_a_config_json_folder_or_shipped_name() -> None:
    for name in (str(REPO / "tests/models/mistral-7b"), "mistral-7b", "llama3.1-8b-1socket"):
        status, out, err = _invoke(["inspect", "model", name, "--json"])
        assert status == 0, err
        assert json.loads(out)["name"] in ("mistral-7b", "llama-3.1-8b")


def test_a_workload_names_its_config_json_by_folder_or_shipped_name(tmp_path: Path) -> None:
    workload = tmp_path / "w.yaml"
    base = "hardware: sn40l-8\nparallelism: {tp: 8}\nserving: {batch_slots: 4, requests: 4}\n"
    workload.write_text(base + "model: {config_json: qwen3-32b}\n")
    assert api.load(workload).model.name == "qwen3-32b"
    workload.write_text(base + f"model: {{config_json: {REPO / 'tests/models/mistral-7b'}}}\n")
    assert api.load(workload).model.name == "mistral-7b"


def test_a_broken_link_with_a_shipped_name_says_it_comes_first(tmp_path: Path) -> None:
    """`hardware: sn40l-8` or `stack: sambastack-2025` beside a link of that name that leads
    nowhere: the link is the file meant (not silently the shipped one), and the error says
    why the shipped file of that name was not used; a plain missing file says nothing of it."""
    base = "parallelism: {tp: 8}\nserving: {batch_slots: 4, requests: 4}\nmodel: llama3.1-8b\n"
    workload = tmp_path / "w.yaml"
    for field, name in (("hardware", "sn40l-8"), ("stack", "sambastack-2025")):
        other = "" if field == "hardware" else "hardware: sn40l-8\n"
        workload.write_text(f"{field}: {name}\n{other}{base}")
        link = tmp_path / name
        link.symlink_to("gone.yaml")
        with pytest.raises(ConfigError) as caught:
            api.load(workload)
        assert f"the link '{link}' comes before the shipped file of its name" in str(caught.value)
        link.unlink()
        assert api.load(workload)  # the shipped file, once the link is gone
    workload.write_text(f"hardware: missing-hw\n{base}")
    with pytest.raises(ConfigError) as caught:
        api.load(workload)
    assert "comes before" not in str(caught.value)


def test_a_trace_given_by_set_is_found_from_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.csv").write_text("prompt_tokens,output_tokens\n100,5\n200,6\n")
    near = Path(shipped.root()) / "workloads"
    assert shipped.trace_path(near, "mine.csv") == Path("mine.csv")
    assert shipped.trace_path(near, "traces/chat-400.csv") == near / "traces/chat-400.csv"
    assert shipped.trace_path(near, "chat-400") == near / "traces/chat-400.csv"
    assert shipped.trace_path(near, "gone.csv") == near / "gone.csv"  # the reader reports it
    (tmp_path / "moved.csv").symlink_to("away.csv")  # a broken link here is the one meant
    assert shipped.trace_path(near, "moved.csv") == Path("moved.csv")  # the reader names it


def _globbed(base: Path) -> list[Path]:
    """The listing rule ``shipped.files`` walks each folder once to follow: ``rglob`` of
    each pattern, files only, no notebook checkpoints."""
    return sorted(
        {
            path.relative_to(base)
            for name in shipped.FOLDERS
            for pattern in shipped.PATTERNS
            for path in (base / name).rglob(pattern)
            if path.is_file() and ".ipynb_checkpoints" not in path.parts
        }
    )


def test_the_shipped_listing_is_rglobs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert shipped.files() == _globbed(shipped.root())
    # hidden folders, a linked folder (not followed) and file, a folder named like a file,
    # checkpoints, other suffixes, upper case
    for relative in (
        "workloads/a.yaml",
        "workloads/.hidden/b.yaml",
        "workloads/deep/er/c.jsonl",
        "workloads/.ipynb_checkpoints/d.yaml",
        "workloads/e.YAML",
        "workloads/f.yml",
        "workloads/g.yaml.bak",
        "hw_configs/h.yaml",
        "notebooks/i.ipynb",
        "measurements/j.csv",
        "tests/models/k/config.json",
        "outside/l.yaml",
    ):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("x: 1\n")
    (tmp_path / "workloads" / "dir.yaml").mkdir()
    (tmp_path / "workloads" / "linked").symlink_to(tmp_path / "outside")
    (tmp_path / "workloads" / "m.yaml").symlink_to(tmp_path / "outside" / "l.yaml")
    monkeypatch.setattr(shipped, "root", lambda: tmp_path)
    listed = shipped.files()
    assert listed == _globbed(tmp_path)
    assert Path("workloads/.hidden/b.yaml") in listed
    assert Path("workloads/m.yaml") in listed
    assert not any("linked" in p.parts or "checkpoints" in str(p) for p in listed)


def test_the_kept_listing_follows_files_added_and_removed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The walk is kept between lookups while no folder changed: a file added deep down, a
    folder made later (a shipped folder that was missing), a file removed are all seen at
    the next lookup, by name too; each answer equals a fresh rglob."""
    monkeypatch.setattr(shipped, "root", lambda: tmp_path)
    (tmp_path / "workloads" / "deep").mkdir(parents=True)
    (tmp_path / "workloads" / "a.yaml").write_text("x: 1\n")
    assert shipped.files() == _globbed(tmp_path) == [Path("workloads/a.yaml")]
    assert shipped.files() == [Path("workloads/a.yaml")]  # kept: nothing changed
    for relative in ("workloads/deep/b.yaml", "hw_configs/c.yaml", "stacks/new/d.yaml"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("x: 1\n")
        assert shipped.files() == _globbed(tmp_path)
        assert Path(relative) in shipped.files()
    assert shipped.find("c", ("hardware",)) == tmp_path / "hw_configs" / "c.yaml"
    assert shipped.names("stack") == ["d"]
    (tmp_path / "hw_configs" / "c.yaml").unlink()
    assert shipped.find("c", ("hardware",)) is None
    (tmp_path / "workloads" / "deep" / "b.yaml").rename(tmp_path / "workloads" / "deep" / "e.yaml")
    assert shipped.names("workload") == ["a", "e"]
    assert shipped.files() == _globbed(tmp_path)


def test_outputs_of_runs_by_name_go_to_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One folder rule, whatever the install: a sweep or plan named after a shipped spec
    writes its database into the current folder (from a checkout too: an editable install
    wrote it into the checkout's workloads/sweeps/); a spec of one's own keeps it beside."""
    from rdu_sim.plan.search import default_plan_db
    from rdu_sim.sweep.run import default_db as default_sweep_db

    monkeypatch.chdir(tmp_path)
    sweep = shipped.locate("llama8b-batch", ("sweep",))
    plan = shipped.locate("llama3.1-8b-chat", ("plan",))
    assert sweep.is_relative_to(REPO)  # this test runs from the checkout
    assert default_sweep_db(sweep) == tmp_path / "llama8b-batch.sqlite"
    assert default_plan_db(plan) == tmp_path / "llama3.1-8b-chat.sqlite"
    own = tmp_path / "specs" / "mine.yaml"
    assert default_sweep_db(own) == tmp_path / "specs" / "mine.sqlite"
    # `plot sweep NAME` reads the database where `sweep NAME` wrote it
    code, _, err = _invoke(["plot", "sweep", "llama8b-batch", "-o", str(tmp_path / "x.png")])
    assert code == 2 and str(tmp_path / "llama8b-batch.sqlite") in err
