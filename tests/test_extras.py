"""Optional dependencies and Dask addresses: one `error:` line naming the fix, exit 2.

Dask is installed in the test environment; its absence is simulated by blocking the import
(``sys.modules["distributed"] = None`` makes ``import distributed`` raise ImportError).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdu_sim import extras
from rdu_sim.cli.main import cli
from rdu_sim.config.errors import ConfigError
from rdu_sim.sweep.load import check_export


def _error_line(args: list[str]) -> str:
    """The one line a failing command prints (exit 2, nothing on stdout, no traceback)."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "args", [["sweep", "llama8b-batch"], ["plan", "llama3.1-8b-chat"]], ids=["sweep", "plan"]
)
def test_cluster_without_dask_names_the_extra(
    args: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)
    monkeypatch.chdir(tmp_path)
    line = _error_line([*args, "--cluster", "local", "--db", str(tmp_path / "x.sqlite")])
    assert line == (
        "error: --cluster local needs dask.distributed, which is not installed: "
        'pip install "rdu-sim[dask]"'
    )
    assert list(tmp_path.iterdir()) == []  # refused before any database is made


@pytest.mark.parametrize("command", ["sweep", "plan"])
@pytest.mark.parametrize("address", ["bogus", "tcp://", "tcp://host:port"])
def test_a_bad_dask_address_is_one_error_line(
    command: str, address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("distributed")
    monkeypatch.chdir(tmp_path)
    spec = "llama8b-batch" if command == "sweep" else "llama3.1-8b-chat"
    line = _error_line([command, spec, "--cluster", address, "--db", "x.sqlite"])
    assert line.startswith(f"error: --cluster: {address!r} is not a Dask scheduler address (")
    assert line.endswith("give tcp://HOST:PORT, or local for a cluster on this machine")
    assert list(tmp_path.iterdir()) == []


def test_require_names_the_extra_and_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nbclient", None)
    with pytest.raises(extras.MissingDependencyError) as caught:
        extras.require("nbclient", "running the notebooks")
    assert str(caught.value) == (
        "running the notebooks needs nbclient, which is not installed: "
        'pip install "rdu-sim[notebooks]"'
    )
    assert not extras.available("nbclient")
    assert extras.require("json", "x") is sys.modules["json"]


def test_parquet_export_without_pyarrow_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ConfigError) as caught:
        check_export(tmp_path / "rows.parquet")
    assert str(caught.value) == (
        f"{tmp_path / 'rows.parquet'}: Parquet export needs pyarrow, which is not installed: "
        'pip install "rdu-sim[parquet]"; or export to .csv'
    )


def test_every_extra_named_exists_in_pyproject() -> None:
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    for extra, _ in extras.EXTRAS.values():
        assert f"\n{extra} = [" in text
