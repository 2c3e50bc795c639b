"""The prolog's pure rule of its own: which nodes passed recently enough to skip probing
(the fast path)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from datetime import datetime, timedelta


def fast_path(
    nodes: Sequence[str],
    last_pass: Mapping[str, datetime],
    flaky: Set[str],
    now: datetime,
    fresh_s: float,
) -> tuple[list[str], list[str]]:
    """(skip, probe): nodes that passed within ``fresh_s`` and are not flaky skip probing."""
    skip: list[str] = []
    probe: list[str] = []
    for n in nodes:
        passed = last_pass.get(n)
        fresh = passed is not None and now - passed <= timedelta(seconds=fresh_s)
        (skip if fresh and n not in flaky else probe).append(n)
    return skip, probe
