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
_GROUP_RE = re.compile(r"\[([^\[\]]*)\]")
_RANGE_RE = re.compile(r"([0-9]{1,18})(?:-([0-9]{1,18}))?")
_SHOWN = 80  # characters of a bad name or pattern echoed in an error line


def _shown(text: str) -> str:
    """``text`` for an error line: repr, cut to a readable length (a 5,000-char name is noise)."""
    return repr(text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "...")


def validate_node(name: str) -> str:
    """Return ``name`` if it is a valid node name, else raise a one-line ConfigError."""
    if not isinstance(name, str) or not _NODE_RE.fullmatch(name):
        raise ConfigError(
            f"invalid node name {_shown(str(name))}: use 1-63 letters, digits, '-', '_' or '.', "
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
        raise ConfigError(f"invalid node list {_shown(pattern)}: unexpected {''.join(bad)!r}")
    count = count_nodes(text)  # before expanding: node[1-10000000] would take 1.7 GB first
    if count > MAX_NODES:
        raise ConfigError(f"node list {_shown(pattern)} expands to {count} nodes (max {MAX_NODES})")
    try:
        names = list(NodeSet(text, resolver=RESOLVER_NOGROUP))
    except (NodeSetException, AssertionError, ValueError) as exc:  # ClusterShell asserts too
        raise ConfigError(f"invalid node list {_shown(pattern)}: {exc or 'malformed'}") from None
    if not names:
        raise ConfigError(f"node list {_shown(pattern)} names no nodes")
    return [validate_node(name) for name in names]


def count_nodes(text: str) -> int:
    """How many names a Slurm hostlist denotes (an upper bound: duplicates counted), computed
    from its ranges without expanding them. ConfigError for unbalanced brackets or a
    reversed range (``node[5-1]``)."""
    total = 0
    for item in _split_top(text):
        n = 1
        for group in _GROUP_RE.findall(item):
            size = 0
            for part in group.split(","):
                m = _RANGE_RE.fullmatch(part)
                if m is None:
                    raise ConfigError(f"bad range {_shown(part)} in node list {_shown(text)}")
                lo, hi = int(m[1]), int(m[2] or m[1])
                if hi < lo:
                    raise ConfigError(f"bad range {part!r} (reversed) in node list {_shown(text)}")
                size += hi - lo + 1
            n *= size
        if "[" in _GROUP_RE.sub("", item) or "]" in _GROUP_RE.sub("", item):
            raise ConfigError(f"missing bracket in node list {_shown(text)}")
        total += n
    return total


def _split_top(text: str) -> list[str]:
    """Split a hostlist at the commas outside brackets."""
    items: list[str] = []
    cur: list[str] = []
    depth = 0
    for c in text:
        depth += (c == "[") - (c == "]")
        if c == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    items.append("".join(cur))
    return items


def fold_nodes(names: Iterable[str]) -> str:
    """Fold node names back into Slurm's compact form (``node[01-03],gpu1``)."""
    valid = [validate_node(name) for name in names]
    return str(NodeSet.fromlist(valid, resolver=RESOLVER_NOGROUP))
