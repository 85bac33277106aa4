"""Numbers README.md and docs/ quote from rdu-sim's output, checked against a rerun.

``docs/quotes.yaml`` lists every quote: the command that prints it (run once, in this
process, through the CLI), where its value is in the command's JSON, how the doc rounds it
(a format of ``rdu_sim.human``, the rounding the commands print with), and the words around
it in the doc, or a whole fenced block of a command's printed output (the block follows a
``<!-- quote: NAME -->`` line). A quote whose words are gone from its doc, or whose number
moved beyond its rounding, fails the check.

    python tests/docs_quotes.py            # check (exit 1 naming each stale quote)
    python tests/docs_quotes.py --refresh  # write what the commands print now into the docs
    python tests/docs_quotes.py --fast     # leave out the commands marked slow

tests/test_docs_quotes.py runs the check in the suite. After a change that moves numbers,
``--refresh`` rewrites every quoted number at once; read the diff (the prose around a number
may need new words too).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "docs" / "quotes.yaml"

NUMBER = r"[-+]?[0-9][0-9,]*(?:\.[0-9]+)?"
UNITS = r"(?:ps|ns|us|ms|s|min|h|days)"


def _human() -> Any:
    from rdu_sim import human

    return human


FORMATS: dict[str, tuple[Callable[[float], str], str]] = {
    "number": (lambda v: _human().number(v), NUMBER),
    "number2": (lambda v: _human().number(v, 2), NUMBER),
    "number4": (lambda v: _human().number(v, 4), NUMBER),
    "int": (lambda v: f"{round(v):,}", NUMBER),
    "duration": (lambda v: _human().duration(v), rf"{NUMBER} {UNITS}"),
    "percent": (lambda v: _human().percent(v), rf"{NUMBER}%"),
    "percent0": (lambda v: _human().percent(v, 0), rf"{NUMBER}%"),
    "percent2": (lambda v: _human().percent(v, 2), rf"{NUMBER}%"),
    "signed_percent": (lambda v: _human().percent(v, signed=True), rf"{NUMBER}%"),
    "fixed1": (lambda v: f"{v:.1f}", NUMBER),
    "fixed2": (lambda v: f"{v:.2f}", NUMBER),
    "fixed3": (lambda v: f"{v:.3f}", NUMBER),
    "verdict": (lambda v: "pass" if v else "**FAIL**", r"pass|\*\*FAIL\*\*"),
}
"""A quote's rounding -> (how the value is written, what the doc's text there may be)."""

AGGREGATES: dict[str, Callable[[Sequence[float]], float]] = {
    "median_abs": lambda xs: statistics.median(abs(x) for x in xs),
    "max_abs": lambda xs: max(abs(x) for x in xs),
    "count": lambda xs: float(len(xs)),
    "sum": lambda xs: float(sum(xs)),
}


class QuoteError(ValueError):
    """The registry or a doc is not as the check needs it (a path, a missing text)."""


@dataclass(frozen=True)
class Value:
    """One number of a quote: from which command, where in its JSON, rounded how."""

    command: str
    path: str
    format: str = "number"
    aggregate: str | None = None
    divide_by: str | None = None  # another path (``NAME:path``: another command's): a ratio
    scale: float = 1.0
    add: float = 0.0
    one_minus: bool = False


@dataclass(frozen=True)
class Quote:
    """Words of a doc with numbers in them (``text``), or a fenced block (``block``)."""

    file: str
    text: str | None = None
    values: dict[str, Value] = field(default_factory=dict)
    block: str | None = None  # the block's command
    drop: str | None = None  # output lines of the block's command the doc leaves out (regex)


@dataclass(frozen=True)
class Command:
    """A command whose output the docs quote (``exits``: the statuses that still print it:
    ``validate`` exits 1 while a figure fails)."""

    name: str
    args: tuple[str, ...]
    slow: bool = False
    exits: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class Registry:
    commands: dict[str, Command]
    quotes: list[Quote]


def load_registry(path: Path = REGISTRY) -> Registry:
    """The registry, validated: every quote names a command it lists and a known format."""
    data = yaml.safe_load(path.read_text())
    commands = {
        name: Command(
            name,
            tuple(str(a) for a in spec["args"]),
            bool(spec.get("slow", False)),
            tuple(spec.get("exits", (0,))),
        )
        for name, spec in data["commands"].items()
    }
    quotes = []
    for item in data["quotes"]:
        values = {key: Value(**spec) for key, spec in (item.get("values") or {}).items()}
        quote = Quote(
            file=item["file"],
            text=item.get("text"),
            values=values,
            block=item.get("block"),
            drop=item.get("drop"),
        )
        for name in _names(quote):
            if name not in commands:
                raise QuoteError(f"{path}: a quote in {quote.file} names no command {name!r}")
        for value in values.values():
            if value.format not in FORMATS:
                raise QuoteError(f"{path}: unknown format {value.format!r}; {sorted(FORMATS)}")
        if quote.text is not None:
            missing = set(re.findall(r"\{(\w+)\}", quote.text)) ^ set(values)
            if missing:
                raise QuoteError(f"{path}: {quote.text!r}: placeholders and values differ")
        quotes.append(quote)
    return Registry(commands, quotes)


def run_command(args: Sequence[str], exits: Sequence[int] = (0,)) -> str:
    """A command's standard output, run in this process (its exit status one of
    ``exits``); ``{tmp}`` in an argument is a fresh temporary folder (a plan's database)."""
    import tempfile

    from click.testing import CliRunner

    from rdu_sim.cli.main import cli

    with tempfile.TemporaryDirectory(prefix="rdu-sim-quotes-") as tmp:
        resolved = [a.replace("{tmp}", tmp) for a in args]
        result = CliRunner().invoke(cli, resolved, env={"COLUMNS": "200"})
    if result.exit_code not in exits:
        shown = " ".join(args)
        raised = ""
        if result.exc_info is not None and not isinstance(result.exception, SystemExit):
            import traceback

            raised = "".join(traceback.format_exception(*result.exc_info))[-2000:]
        raise QuoteError(
            f"rdu-sim {shown} exited {result.exit_code}: {result.output[-2000:]}{raised}"
        )
    return result.stdout


def _select(node: Any, part: str) -> Any:
    """One step of a path: a key, a list index, or ``name[key=value,...]`` (the items of a
    list whose keys have those values)."""
    match = re.fullmatch(r"([^\[]*)(?:\[(.*)\])?", part)
    assert match is not None
    key, condition = match.groups()
    if key:
        if isinstance(node, list):
            node = node[int(key)]
        elif isinstance(node, Mapping) and key in node:
            node = node[key]
        else:
            raise QuoteError(f"no {key!r} here")
    if condition:
        pairs = [c.split("=", 1) for c in condition.split(",")]
        node = [i for i in node if all(str(i.get(k)) == v for k, v in pairs)]
        if not node:
            raise QuoteError(f"no item with {condition}")
    return node


def lookup(data: Any, path: str) -> Any:
    """The value at a dotted path (``columns.0.step_s``, ``systems[group=sn40l-8].points``);
    a filter leaving one item stands for the item, several for the list of the next key's
    values."""
    node = data
    for part in re.findall(r"(?:[^.\[]|\[[^\]]*\])+", path):
        over_items = not part.isdigit() and not part.startswith("[")
        if isinstance(node, list) and node and isinstance(node[0], Mapping) and over_items:
            picked = [_select(item, part) for item in node]
            node = picked[0] if len(picked) == 1 else picked
        else:
            node = _select(node, part)
    if isinstance(node, list) and len(node) == 1:
        return node[0]
    return node


def value_of(value: Value, outputs: Mapping[str, str]) -> float:
    """A value as the command gives it now: looked up, aggregated, divided, scaled."""
    try:
        raw = lookup(json.loads(outputs[value.command]), value.path)
        if value.aggregate is not None:
            items = raw if isinstance(raw, list) else [raw]
            raw = AGGREGATES[value.aggregate]([float(x) for x in items])
        number = float(raw)
        if value.divide_by is not None:
            command, _, path = value.divide_by.rpartition(":")
            number /= float(lookup(json.loads(outputs[command or value.command]), path))
    except (QuoteError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise QuoteError(f"{value.command}: {value.path}: {exc}") from None
    if not math.isfinite(number):
        raise QuoteError(f"{value.command}: {value.path} is {number}")
    number = number * value.scale + value.add
    return 1.0 - number if value.one_minus else number


def written(value: Value, outputs: Mapping[str, str]) -> str:
    """The value as the doc writes it (its format's rounding)."""
    return FORMATS[value.format][0](value_of(value, outputs))


def pattern_of(quote: Quote) -> re.Pattern[str]:
    """The quote's words as a pattern: each run of whitespace any whitespace (a doc's lines
    wrap), each placeholder a group of its format's text."""
    assert quote.text is not None
    regex = ""
    for part in re.split(r"(\{\w+\})", quote.text):
        if re.fullmatch(r"\{\w+\}", part):
            name = part[1:-1]
            regex += f"(?P<{name}>{FORMATS[quote.values[name].format][1]})"
        elif part:
            words = r"\s+".join(re.escape(word) for word in part.split())
            lead = r"\s+" if part[0].isspace() else ""
            trail = r"\s+" if part[-1].isspace() and words else ""
            regex += lead + words + trail
    return re.compile(regex)


@dataclass
class Finding:
    """A stale quote: where, what the doc says, what the command prints."""

    file: str
    line: int
    doc: str
    now: str
    source: str

    def __str__(self) -> str:
        return (
            f"{self.file}:{self.line}: the doc says {self.doc!r}; {self.source} prints {self.now!r}"
        )


def _line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _block_span(text: str, name: str, file: str) -> tuple[int, int]:
    """The span of the fenced block's content after the line ``<!-- quote: NAME ... -->``."""
    markers = list(re.finditer(rf"^<!-- quote: {re.escape(name)}\b[^\n]*-->$", text, re.M))
    if len(markers) != 1:
        raise QuoteError(f"{file}: needs one line <!-- quote: {name} --> before its block")
    opening = re.compile(r"^```[^\n]*\n", re.M).search(text, markers[0].end())
    if opening is None:
        raise QuoteError(f"{file}: no fenced block after <!-- quote: {name} -->")
    closing = text.find("```", opening.end())
    if closing < 0 or (closing > 0 and text[closing - 1] != "\n" and closing != opening.end()):
        raise QuoteError(f"{file}: the block after <!-- quote: {name} --> is not closed")
    return opening.end(), closing


def block_text(output: str, drop: str | None) -> str:
    """A command's printed output as a doc's block shows it (``drop``: lines left out)."""
    lines = [line.rstrip() for line in output.splitlines()]
    kept = [line for line in lines if not (drop and re.search(drop, line))]
    while kept and not kept[-1]:
        kept.pop()
    return "\n".join(kept) + "\n"


def check_file(
    text: str,
    file: str,
    quotes: Iterable[Quote],
    outputs: Mapping[str, str],
    commands: Mapping[str, Command],
) -> tuple[list[Finding], str]:
    """Every stale quote of one doc, and the doc with each brought up to date."""
    findings: list[Finding] = []
    edits: list[tuple[int, int, str]] = []
    for quote in quotes:
        if quote.block is not None:
            start, end = _block_span(text, quote.block, file)
            now = block_text(outputs[quote.block], quote.drop)
            if text[start:end] != now:
                source = f"rdu-sim {' '.join(commands[quote.block].args)}"
                old_lines, new_lines = text[start:end].splitlines(), now.splitlines()
                pairs = zip(old_lines, new_lines, strict=False)  # the shorter ends the walk
                at = next(
                    (i for i, (a, b) in enumerate(pairs) if a != b),
                    min(len(old_lines), len(new_lines)),
                )
                doc = old_lines[at] if at < len(old_lines) else "(no line)"
                printed_line = new_lines[at] if at < len(new_lines) else "(no line)"
                line = _line_at(text, start) + at
                findings.append(Finding(file, line, doc, printed_line, source))
                edits.append((start, end, now))
            continue
        pattern = pattern_of(quote)
        matches = list(pattern.finditer(text))
        if len(matches) != 1:
            where = "not found" if not matches else f"found {len(matches)} times"
            raise QuoteError(f"{file}: the quoted words {quote.text!r} are {where}")
        (match,) = matches
        for name, value in quote.values.items():
            now = written(value, outputs)
            if match.group(name) != now:
                source = f"{value.command} ({value.path})"
                findings.append(
                    Finding(file, _line_at(text, match.start(name)), match.group(name), now, source)
                )
                edits.append((match.start(name), match.end(name), now))
    updated = text
    for start, end, now in sorted(edits, reverse=True):
        updated = updated[:start] + now + updated[end:]
    return findings, updated


def run(
    *,
    refresh: bool = False,
    lane: str = "all",
    root: Path = ROOT,
    registry: Registry | None = None,
    outputs: dict[str, str] | None = None,
) -> list[Finding]:
    """Check (or with ``refresh`` rewrite) the quotes of the registry's docs under ``root``:
    ``lane`` ``fast`` leaves out the quotes of slow commands, ``slow`` keeps only those.
    ``outputs`` (command name -> printed output) holds what commands printed already; the
    commands run here are added to it."""
    registry = registry or load_registry()
    wanted = [
        q
        for q in registry.quotes
        if lane == "all" or any(registry.commands[n].slow for n in _names(q)) == (lane == "slow")
    ]
    names = sorted({n for q in wanted for n in _names(q)})
    printed = outputs if outputs is not None else {}
    for name in names:
        if name not in printed:
            command = registry.commands[name]
            printed[name] = run_command(command.args, command.exits)
    findings: list[Finding] = []
    by_file: dict[str, list[Quote]] = {}
    for quote in wanted:
        by_file.setdefault(quote.file, []).append(quote)
    for file, quotes in by_file.items():
        path = root / file
        text = path.read_text()
        found, updated = check_file(text, file, quotes, printed, registry.commands)
        findings += found
        if refresh and updated != text:
            path.write_text(updated)
    return findings


def _names(quote: Quote) -> list[str]:
    """The commands a quote reads."""
    names = [v.command for v in quote.values.values()]
    names += [v.divide_by.rpartition(":")[0] for v in quote.values.values() if v.divide_by]
    return [n for n in names if n] + ([quote.block] if quote.block else [])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refresh", action="store_true", help="write the new values")
    parser.add_argument("--fast", action="store_true", help="leave out slow commands")
    options = parser.parse_args(argv)
    try:
        findings = run(refresh=options.refresh, lane="fast" if options.fast else "all")
    except QuoteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for finding in findings:
        print(("refreshed " if options.refresh else "stale: ") + str(finding))
    if findings and not options.refresh:
        print(f"{len(findings)} stale quote(s): `python tests/docs_quotes.py --refresh` rewrites")
        return 1
    print(f"{len(findings)} quote(s) refreshed" if options.refresh else "every quote holds")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
