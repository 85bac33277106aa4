"""Held-out groups: the targets a fit never sees, chosen by what they share, never one by one.

A selector is ``KEY=VALUE[,KEY=VALUE...]`` (``--holdout model=llama-3.1-70b``; in a spec file
a mapping): a target is held out when it matches every pair of one selector, each KEY one of
``rdu_sim.validate.targets.GROUP_KEYS`` (a measurement set, machine, hardware file, serving
stack, model, tp, metric, method or figure). There is no selector for a row or a batch: a point held
out between trained neighbours of the same shape tests interpolation, not the model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rdu_sim.config.errors import ConfigError
from rdu_sim.config.loader import close_name
from rdu_sim.validate.given import Given
from rdu_sim.validate.targets import GROUP_KEYS, Target

MAX_SELECTORS = 100
_VALUE = re.compile(r"[^\s,=]{1,200}")


@dataclass(frozen=True)
class Selector:
    """A held-out group: every (key, value) pair must match."""

    pairs: tuple[tuple[str, str], ...]
    given: Given = field(default=Given("--holdout", ""), compare=False)  # where, for errors

    def matches(self, target: Target) -> bool:
        """Whether ``target`` is in the group."""
        return all(target.answers(key, value) for key, value in self.pairs)

    def __str__(self) -> str:
        return ",".join(f"{key}={value}" for key, value in self.pairs)


def _pairs(items: Sequence[tuple[str, Any]], given: Given) -> Selector:
    pairs = []
    for key, value in items:
        if key not in GROUP_KEYS:
            raise given.error_at(str(key)[:40], _unknown_key(str(key)))
        text = (
            str(value).strip()
            if isinstance(value, str | int) and not isinstance(value, bool)
            else ""
        )
        if not _VALUE.fullmatch(text):
            raise given.error_at(key, f"expected a name or number, got {value!r:.60}")
        pairs.append((key, text))
    if not pairs or len({k for k, _ in pairs}) != len(pairs):
        raise given.error("a group names each key once, and at least one")
    return Selector(tuple(pairs), given)


def _unknown_key(key: str) -> str:
    """What a key that chooses no group is told: the valid keys, the one it is close to
    (a misspelling), else why a row or a batch cannot be one."""
    keys = ", ".join(GROUP_KEYS)
    close = close_name(key, GROUP_KEYS)
    if close is not None:
        return (
            f"unknown key {key[:40]!r}; did you mean {close!r}? Held-out groups are chosen "
            f"by one of {keys}"
        )
    return (
        f"unknown key {key[:40]!r}: held-out groups are chosen by one of {keys} (never by "
        "row or batch: one held out between trained neighbours of its shape tests "
        "interpolation, not the model)"
    )


def parse_selector(text: str, source: str = "--holdout") -> Selector:
    """``KEY=VALUE[,KEY=VALUE...]`` as a Selector (a ConfigError naming ``source``)."""
    given = Given.option(source, text)
    items = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise given.error(
                "expected KEY=VALUE[,KEY=VALUE] (e.g. model=llama-3.1-70b): held-out rows are "
                "chosen by group, not by a share or a row"
            )
        items.append((key.strip(), value.strip()))
    return _pairs(items, given)


def selector_from(data: Any, given: Given) -> Selector:
    """A spec file's held-out entry (a mapping of key to value) as a Selector."""
    if not isinstance(data, Mapping):
        raise given.error(f"expected a mapping such as {{model: llama-3.1-70b}}, got {data!r:.60}")
    return _pairs(list(data.items()), given)


def split(
    targets: Sequence[Target], selectors: Sequence[Selector], source: str = "--holdout"
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(trained, held-out) target indices; a ConfigError naming the selector (where it was
    given) that matches no target, with the values each of its keys has among the targets,
    or naming ``source`` when nothing is left to fit."""
    if len(selectors) > MAX_SELECTORS:
        raise ConfigError.single(source, "", f"more than {MAX_SELECTORS} held-out groups")
    held: set[int] = set()
    for selector in selectors:
        found = {i for i, target in enumerate(targets) if selector.matches(target)}
        if not found:
            known = "; ".join(
                f"{key}: {', '.join(sorted({v for t in targets for v in t.names(key)}))}"
                for key, _ in selector.pairs
            )
            raise selector.given.error(
                f"no measured row or figure is in this group (the targets' {known})",
                str(selector),
            )
        held |= found
    train = tuple(i for i in range(len(targets)) if i not in held)
    if not train:
        raise ConfigError.single(source, "", "every target is held out: nothing is left to fit")
    return train, tuple(sorted(held))
