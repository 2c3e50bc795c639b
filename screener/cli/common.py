"""Bits every command family shares: exit codes and the subparsers type."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

EXIT_SLOW = 3  # a screen finished and at least one node is SLOW

if TYPE_CHECKING:  # argparse's class is generic only to the type checker
    Subparsers = argparse._SubParsersAction[Any]
else:
    Subparsers = argparse._SubParsersAction
