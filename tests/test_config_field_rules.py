"""A rule across a model's fields that finds one field wrong names that field, not its
section: the error's field column is the field's full path, its line the field's line, and
its message does not say the field again (``config.errors.FieldProblem``). A search axis's
own rule (a field validator) is at its field already and does not repeat it either."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rdu_sim.cluster import load_cluster
from rdu_sim.config.errors import ConfigError
from rdu_sim.plan.spec import load_plan
from rdu_sim.scenario import load_scenario

MARK = "# <- the field"

WORKLOAD = """\
name: rules
hardware: sn40l
model: llama-3.1-8b
{section}
"""

CLUSTER = """\
name: rules
pools:
  serve: {{workload: llama3.1-8b-1socket, replicas: 1}}
slo: {{ttft: 2 s, tpot: 100 ms}}
{section}
"""

SYNTHETIC = "traffic: {rate: 4, requests: 8, prompt_tokens: 128, output_tokens: 16}"

PLAN = """\
cluster: cluster.yaml
{section}
"""

Loader = Callable[[Path], Any]

CASES: list[tuple[str, Loader, str, str]] = [
    (
        WORKLOAD,
        load_scenario,
        "serving:\n  requests: 4\n  batch_slots: -1  " + MARK,
        "serving.batch_slots",
    ),
    (
        WORKLOAD,
        load_scenario,
        "serving:\n  requests: 4\n  trace_format: csv  " + MARK,
        "serving.trace_format",
    ),
    (
        WORKLOAD,
        load_scenario,
        "serving:\n  arrival:\n    process: poisson\n    rate: null  " + MARK,
        "serving.arrival.rate",
    ),
    (WORKLOAD, load_scenario, "kv:\n  policy: snapkv\n  kernel_size: 8  " + MARK, "kv.kernel_size"),
    (
        WORKLOAD,
        load_scenario,
        "experts:\n  load:\n    dist: counts\n    counts: [1, -1]  " + MARK,
        "experts.load.counts",
    ),
    (
        WORKLOAD,
        load_scenario,
        "experts:\n  load:\n    dist: counts\n    counts: [0, 0]  " + MARK,
        "experts.load.counts",
    ),
    (WORKLOAD, load_scenario, "experts:\n  redundant: 2  " + MARK, "experts.redundant"),
    (
        CLUSTER,
        load_cluster,
        "traffic:\n  trace: t.csv\n  start: 10 s\n  end: 5 s  " + MARK,
        "traffic.end",
    ),
    (CLUSTER, load_cluster, f"{SYNTHETIC}\nclasses:\n  by: column  {MARK}", "classes.by"),
    (
        CLUSTER,
        load_cluster,
        f"{SYNTHETIC}\nclasses:\n  by: column\n  column: Model\n  edges: [10]  {MARK}",
        "classes.edges",
    ),
    (
        CLUSTER,
        load_cluster,
        f"{SYNTHETIC}\nclasses:\n  edges: [10]\n  column: Model  {MARK}",
        "classes.column",
    ),
    (CLUSTER, load_cluster, f"{SYNTHETIC}\nclasses:\n  by: output_tokens  {MARK}", "classes.by"),
    (CLUSTER, load_cluster, f"{SYNTHETIC}\nclasses:\n  edges: [20, 10]  {MARK}", "classes.edges"),
    (PLAN, load_plan, f"search:\n  tp: [1, 1]  {MARK}", "search.tp"),
    (PLAN, load_plan, f"search:\n  tp: [0]  {MARK}", "search.tp"),
    (PLAN, load_plan, f"search:\n  batch_slots: []  {MARK}", "search.batch_slots"),
    (PLAN, load_plan, f"search:\n  batch_slots: [0]  {MARK}", "search.batch_slots"),
    (PLAN, load_plan, f"search:\n  kv_policy: [full, full]  {MARK}", "search.kv_policy"),
]


@pytest.mark.parametrize(
    ("template", "load", "section", "field"),
    CASES,
    ids=[f"{field}-{i}" for i, (_, _, _, field) in enumerate(CASES)],
)
def test_a_rule_names_the_field_and_its_line(
    tmp_path: Path, template: str, load: Loader, section: str, field: str
) -> None:
    text = template.format(section=section)
    path = tmp_path / "input.yaml"
    path.write_text(text)
    line = next(n for n, row in enumerate(text.splitlines(), start=1) if MARK in row)
    with pytest.raises(ConfigError) as caught:
        load(path)
    (issue,) = caught.value.issues
    assert (issue.file, issue.field, issue.line) == (str(path), field, line), issue
    last = field.rsplit(".", 1)[-1]
    assert last not in issue.message.split()[0], issue.message  # said once, in its column
