"""Bits every command family shares: exit codes, the subparsers type, argument checks."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from screener.errors import ConfigError

EXIT_SLOW = 3  # a screen finished and at least one node is SLOW

if TYPE_CHECKING:  # argparse's class is generic only to the type checker
    Subparsers = argparse._SubParsersAction[Any]
else:
    Subparsers = argparse._SubParsersAction


MAX_LIMIT = 1_000_000  # rows a query may ask for; SQLite overflows beyond 2**63 anyway
MAX_DAYS = 36_500.0  # a 100-year window is already "everything"


def check_limit(value: int, option: str = "--limit") -> int:
    """A row limit within 1..MAX_LIMIT (ConfigError naming the option otherwise)."""
    if not 1 <= value <= MAX_LIMIT:
        raise ConfigError(f"{option} must be within 1..{MAX_LIMIT}, got {_num(value)}")
    return value


def check_days(value: float, option: str = "--days") -> float:
    """A window in days: finite, > 0 and at most MAX_DAYS (nan, inf and 1e10 are refused)."""
    if not (math.isfinite(value) and 0 < value <= MAX_DAYS):
        raise ConfigError(f"{option} must be > 0 and <= {MAX_DAYS:g}, got {_num(value)}")
    return value


def check_count(value: int, option: str, minimum: int = 1) -> int:
    """A count option (e.g. --min-transitions) within minimum..MAX_LIMIT."""
    if not minimum <= value <= MAX_LIMIT:
        raise ConfigError(f"{option} must be within {minimum}..{MAX_LIMIT}, got {_num(value)}")
    return value


def _num(value: float) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 24 else text[:21] + "..."
