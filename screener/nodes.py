"""Node names: validation (they end up in argv and ssh host names) and Slurm-style node sets."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

from screener.errors import ConfigError

# Slurm-style host name: letters, digits, '-', '_', '.'; 1..63 chars; no leading '-'
# (a leading '-' would read as an option to ssh, scontrol, ...).
_NODE_RE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]{0,62}")
# What a Slurm hostlist may contain: names, brackets, ranges and commas. No '@group',
# no ClusterShell set operators ('!', '&', '^'), so a pattern means the same everywhere.
_PATTERN_RE = re.compile(r"[A-Za-z0-9_.,\[\]-]+")
# A node set larger than this is a typo (node[1-1000000]), not a cluster.
MAX_NODES = 65536


def validate_node(name: str) -> str:
    """Return ``name`` if it is a valid node name, else raise a one-line ConfigError."""
    if not isinstance(name, str) or not _NODE_RE.fullmatch(name):
        raise ConfigError(
            f"invalid node name {name!r}: use 1-63 letters, digits, '-', '_' or '.', "
            "not starting with '-'"
        )
    return name


def expand_nodeset(pattern: str) -> list[str]:
    """Expand a Slurm-style node list (``node[01-08],gpu1``) into sorted, unique, valid names."""
    text = pattern.strip()
    if not text:
        raise ConfigError("empty node list")
    if not _PATTERN_RE.fullmatch(text):
        bad = sorted({c for c in text if not _PATTERN_RE.fullmatch(c)})
        raise ConfigError(f"invalid node list {pattern!r}: unexpected {''.join(bad)!r}")
    try:
        nodeset = NodeSet(text, resolver=RESOLVER_NOGROUP)
        count = len(nodeset)
        if count > MAX_NODES:
            raise ConfigError(f"node list {pattern!r} expands to {count} nodes (max {MAX_NODES})")
        names = list(nodeset)
    except NodeSetException as exc:
        raise ConfigError(f"invalid node list {pattern!r}: {exc}") from None
    if not names:
        raise ConfigError(f"node list {pattern!r} names no nodes")
    return [validate_node(name) for name in names]


def fold_nodes(names: Iterable[str]) -> str:
    """Fold node names back into Slurm's compact form (``node[01-03],gpu1``)."""
    valid = [validate_node(name) for name in names]
    return str(NodeSet.fromlist(valid, resolver=RESOLVER_NOGROUP))
