"""Bits every command family shares: exit codes, the subparsers type, argument checks."""

from __future__ import annotations

import argparse
import math
import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from screener.errors import ConfigError, ScreenerError

EXIT_SLOW = 3  # a screen finished and at least one node is SLOW

if TYPE_CHECKING:  # argparse's class is generic only to the type checker
    Subparsers = argparse._SubParsersAction[Any]
else:
    Subparsers = argparse._SubParsersAction


MAX_LIMIT = 1_000_000  # rows a query may ask for; SQLite overflows beyond 2**63 anyway
MAX_DAYS = 36_500.0  # a 100-year window is already "everything"
MAX_ID = 2**63 - 1  # a stored row id (run) fits SQLite's and PostgreSQL's bigint
MAX_DEADLINE_S = 86_400.0  # a screen decides within a day at most

_DURATION = re.compile(r"([0-9]{1,15}(?:\.[0-9]{1,15})?)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def check_limit(value: int, option: str = "--limit") -> int:
    """A row limit within 1..MAX_LIMIT (ConfigError naming the option otherwise)."""
    if not 1 <= value <= MAX_LIMIT:
        raise ConfigError(f"{option} must be within 1..{MAX_LIMIT}, got {_num(value)}")
    return value


def check_count(value: int, option: str, minimum: int = 1) -> int:
    """A count option (e.g. --min-transitions) within minimum..MAX_LIMIT."""
    if not minimum <= value <= MAX_LIMIT:
        raise ConfigError(f"{option} must be within {minimum}..{MAX_LIMIT}, got {_num(value)}")
    return value


def parse_duration(text: str, option: str = "--since") -> timedelta:
    """'30d', '12h', '2w', '90m', '45s' -> a positive timedelta of at most MAX_DAYS: the one
    parser of every window option (nan, 0d, 1000000d and 99999999999h are refused)."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or float(m.group(1)) <= 0:
        raise ConfigError(
            f"invalid {option} {text[:40]!r}: {option} must be a positive duration like 30d, "
            "12h or 2w"
        )
    seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    if seconds > MAX_DAYS * 86400:  # 1e15d would overflow datetime arithmetic
        raise ConfigError(f"{option} must be at most {MAX_DAYS:g}d, not {text[:40]!r}")
    return timedelta(seconds=seconds)


def check_id(value: int, option: str) -> int:
    """A stored row id (e.g. a run) within 1..2^63-1: beyond it SQLite overflows."""
    if not 1 <= value <= MAX_ID:
        raise ConfigError(f"{option} must be within 1..{MAX_ID}, got {_num(value)}")
    return value


def job_id_arg(text: str, option: str = "job id") -> str:
    """A Slurm job id (1234, array task 1234_7, het component 1234+1), checked as the hooks
    and the store check it, so nothing accepted here is refused later; else ConfigError."""
    from screener.slurm.client import check_job_id  # the one rule (screener.slurm is heavy)

    try:
        return check_job_id(text)
    except ScreenerError:
        raise ConfigError(
            f"invalid {option} {text[:40]!r}: expected e.g. 1234, 1234_7 or 1234+1"
        ) from None


def check_deadline(value: float | None, option: str = "--deadline") -> float | None:
    """Seconds to decide within: finite, > 0 and at most a day (inf and nan are refused)."""
    if value is not None and not (math.isfinite(value) and 0 < value <= MAX_DEADLINE_S):
        raise ConfigError(f"{option} must be > 0 and <= {MAX_DEADLINE_S:g} seconds")
    return value


def _num(value: float) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 24 else text[:21] + "..."
