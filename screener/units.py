"""Units of the figures admins read, declared where a row field is defined (issue 26): every
human table takes a column's unit and header from here; nothing guesses a unit from a
field's name ("*_s" read as seconds once showed read_mb_s as minutes). CSV and JSON carry
the raw number in the declared unit."""

from __future__ import annotations

import dataclasses
from typing import Any

# MB/s and bytes/s are bandwidths, s a duration or age, ms a latency, ratio a plain factor.
UNITS = ("MB/s", "bytes/s", "s", "ms", "IOPS", "ratio", "count", "bytes")


def unit(kind: str, header: str | None = None) -> dict[str, str | None]:
    """Field metadata: numbers in ``kind``, titled ``header`` in tables. Used as
    ``read_mb_s: float = field(metadata=unit("MB/s", "read"))``."""
    if kind not in UNITS:
        raise ValueError(f"unknown unit {kind!r}; one of {', '.join(UNITS)}")
    return {"unit": kind, "header": header}


def unit_of(f: dataclasses.Field[Any]) -> tuple[str | None, str]:
    """(unit or None, table header) of a row field."""
    kind = f.metadata.get("unit")
    return kind, f.metadata.get("header") or f.name


def label(header: str, wrap: bool = False, day: bool = False) -> dict[str, str | bool | None]:
    """Field metadata for a column with no unit but a shorter title than its name; ``wrap``:
    words that may fold in a narrow table (a reason), unlike figures and names; ``day``: a
    time a table shows to the day (a forecast), not the minute."""
    return {"unit": None, "header": header, "wrap": wrap, "day": day}
