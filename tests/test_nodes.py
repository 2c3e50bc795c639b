"""Node-name validation and Slurm-style node-set expansion/folding."""

from __future__ import annotations

import pytest

from screener.errors import ConfigError
from screener.hostlist import expand_nodeset, fold_nodes, validate_node


@pytest.mark.parametrize("name", ["node01", "n", "gpu-a100_3", "c1.cluster.example", "a" * 63])
def test_valid_names_pass_through(name: str) -> None:
    assert validate_node(name) == name


@pytest.mark.parametrize(
    "name", ["", "-oProxyCommand=x", "a" * 64, "node 1", "node;id", "$(id)", "nöde", "a/b"]
)
def test_invalid_names_are_one_line_config_errors(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_node(name)
    assert "\n" not in str(info.value) and "invalid node name" in str(info.value)


def test_expand_ranges_commas_and_padding() -> None:
    assert expand_nodeset("node[01-03,07],gpu[1-2]") == [
        "gpu1",
        "gpu2",
        "node01",
        "node02",
        "node03",
        "node07",
    ]
    assert expand_nodeset(" node05 ") == ["node05"]
    assert expand_nodeset("node[1-2],node1") == ["node1", "node2"]


@pytest.mark.parametrize(
    ("pattern", "fragment"),
    [
        ("", "empty node list"),
        ("node[01-", "missing bracket"),
        ("node[5-1]", "bad range"),
        ("a,,b", "invalid node list"),
        ("@compute", "unexpected '@'"),
        ("node1!node2", "unexpected '!'"),
        ("node1;reboot", "unexpected ';'"),
        ("node[1-100000]", "max 65536"),
        ("-x[1-2]", "invalid node name"),
    ],
)
def test_bad_patterns_are_one_line_config_errors(pattern: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        expand_nodeset(pattern)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_fold_round_trips() -> None:
    names = ["node03", "node01", "node02", "gpu1", "node10"]
    folded = fold_nodes(names)
    assert folded == "gpu1,node[01-03,10]"
    assert expand_nodeset(folded) == sorted(names)


def test_fold_rejects_bad_names() -> None:
    with pytest.raises(ConfigError):
        fold_nodes(["node01", "bad name"])
