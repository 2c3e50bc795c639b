"""Slurm JSON parsing (captured 22.05 outputs, documented newer shapes) and the argv the
command-line backend builds; when and by whom a node's reason was set, as the CLI and pyslurm
backends read it (captured 22.05, 24.11 and 26.05 outputs), and the drains Slurm shows as
screener's within a window (hooks.drain_rules.tagged_drains)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from screener.errors import ConfigError, SlurmError
from screener.hooks.drain_rules import tagged_drains
from screener.slurm.cli_backend import drain_argv, release_argv, resume_argv
from screener.slurm.client import SlurmNode, check_reason
from screener.slurm.parse import epoch_time, parse_sinfo, parse_squeue_keyed
from screener.slurm.pyslurm_backend import PyslurmClient
from tests.slurm_contract_driver import show_node_reasons

DATA = Path(__file__).parent / "data" / "slurm"


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_sinfo_22_05_drained_node_has_flag_and_exact_reason() -> None:
    nodes = {n.name: n for n in parse_sinfo(_read("sinfo_22.05_drained.json"))}
    assert sorted(nodes) == ["node01", "node02", "node03", "node04"]
    n2 = nodes["node02"]
    assert n2.states == {"IDLE", "DRAIN"} and n2.drained and n2.idle_drained
    assert n2.reason == "screener: rd 0.05x peers r42" and n2.partitions == ("debug",)
    assert not nodes["node01"].drained and nodes["node01"].reason == ""


def test_sinfo_22_05_allocated_nodes_are_busy() -> None:
    nodes = {n.name: n for n in parse_sinfo(_read("sinfo_22.05_allocated.json"))}
    assert nodes["node03"].busy and nodes["node04"].busy
    assert not nodes["node01"].busy


def test_newer_node_shape_state_list_and_reason_object() -> None:
    nodes = {n.name: n for n in parse_sinfo(_read("nodes_23.11_shape.json"))}
    assert nodes["cn002"].states == {"IDLE", "DRAIN"} and nodes["cn002"].idle_drained
    assert nodes["cn003"].reason == "RMA 42"
    assert nodes["cn003"].drained and nodes["cn003"].busy  # MIXED+DRAIN = draining
    assert not nodes["cn003"].idle_drained
    assert not nodes["cn004"].idle_drained  # down


def test_sinfo_24_11_grouped_shape() -> None:
    nodes = {n.name: n for n in parse_sinfo(_read("sinfo_24.11_shape.json"))}
    assert sorted(nodes) == ["cn001", "cn002", "cn005", "cn006"]
    assert nodes["cn002"].reason == "screener: rd 0.05x peers r42" and nodes["cn002"].drained
    assert nodes["cn006"].busy and nodes["cn006"].partitions == ("debug",)


def test_squeue_22_05_running_job_fields() -> None:
    jobs = {j.job_id: j for _, j in parse_squeue_keyed(_read("squeue_22.05_running.json"))}
    j = jobs["2"]
    assert (j.state, j.name, j.comment, j.partition) == ("RUNNING", "ior", "screener=on", "debug")
    assert j.nodes == ("node03", "node04") and j.restarts == 0


def test_squeue_24_11_shape_lists_and_objects() -> None:
    jobs = {j.job_id: j for _, j in parse_squeue_keyed(_read("squeue_24.11_shape.json"))}
    assert jobs["525"].state == "PENDING" and jobs["525"].reason == "BeginTime"
    assert jobs["525"].restarts == 1 and jobs["525"].nodes == ()
    assert jobs["526"].comment == "x screener=on"
    assert jobs["526"].nodes == ("cn001", "cn002", "cn005")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "did not print JSON"),
        (
            '{"errors": [{"error": "Unable to contact slurm controller"}], "nodes": []}',
            "Unable to contact slurm controller",
        ),
        ('{"meta": {}}', "neither 'nodes' nor 'sinfo'"),
        ('{"nodes": [{"name": "-rf", "state": "idle"}]}', "invalid node name"),
    ],
)
def test_bad_sinfo_output_is_one_clear_error(text: str, message: str) -> None:
    with pytest.raises((SlurmError, ConfigError), match=message):
        parse_sinfo(text)


def test_drain_argv_one_call_one_reason_word() -> None:
    argv = drain_argv(["node03", "node01", "node02"], "screener: rd 0.05x peers r42")
    assert argv == [
        "scontrol",
        "update",
        "nodename=node[01-03]",
        "state=drain",
        "reason=screener: rd 0.05x peers r42",
    ]
    assert resume_argv(["node02"]) == ["scontrol", "update", "nodename=node02", "state=resume"]
    assert release_argv("42") == ["scontrol", "update", "jobid=42", "starttime=now"]


@pytest.mark.parametrize(
    "reason", ["", "x" * 65, "a\nb", "reason=evil", "it's", 'say "hi"', "$(reboot)"]
)
def test_unsafe_reasons_are_refused(reason: str) -> None:
    with pytest.raises(SlurmError):
        check_reason(reason)


@pytest.mark.parametrize("job_id", ["", "1;reboot", "-1", "12 3", "abc"])
def test_bad_job_ids_are_refused(job_id: str) -> None:
    with pytest.raises(SlurmError):
        release_argv(job_id)


# -- when and by whom a reason was set (issue 45) ----------------------------------------------

OURS = "screener: rd 0.05x peers r42"


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_sinfo_22_05_reason_time_and_user_are_scontrols_stamp() -> None:
    """22.05's reason_changed_at (epoch) and reason_set_by_user are the `[user@time]` that
    `scontrol show node` printed at the same moment, read in the cluster's zone (UTC)."""
    nodes = {n.name: n for n in parse_sinfo(_read("sinfo_22.05_reason_times.json"))}
    shown = show_node_reasons(_read("show_node_22.05_reason_times.txt"), UTC)
    assert shown == {
        "node02": (OURS, "root", _at("2026-11-28T13:38:39")),
        "node03": ("admin: bios", "root", _at("2026-11-28T13:38:41")),
    }
    for name, (reason, user, when) in shown.items():
        node = nodes[name]
        assert (node.reason, node.reason_user, node.reason_time) == (reason, user, when), node
        assert node.reason_time is not None and node.reason_time.tzinfo is UTC
    for name in ("node01", "node04", "node05", "node06"):  # reason_changed_at 0, user null
        assert (nodes[name].reason, nodes[name].reason_time, nodes[name].reason_user) == (
            "",
            None,
            "",
        )
    older = {n.name: n for n in parse_sinfo(_read("sinfo_22.05_drained.json"))}
    assert older["node02"].reason_time == _at("2026-11-22T05:27:41")
    assert older["node02"].reason_user == "root" and older["node01"].reason_time is None


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_sinfo_24_11_and_26_05_reason_object_time_and_user(version: str) -> None:
    """24.11 nests time and user in `reason`; 26.05 keeps `reason.time` and moved the user to
    `reason_set_by_user`: both read alike, the time scontrol printed (UTC)."""
    (node,) = parse_sinfo(_read(f"{version}/sinfo_drained.json"))
    shown = show_node_reasons(_read(f"{version}/scontrol_show_node_drained.txt"), UTC)
    assert shown["node01"] == (OURS, "root", node.reason_time)
    assert node.reason_user == "root"
    nodes = {n.name: n for n in parse_sinfo(_read(f"{version}/sinfo_N_two_reasons.json"))}
    assert nodes["node01"].reason == "screener: rd 0.05x peers r1"
    assert nodes["node01"].reason_user == nodes["node02"].reason_user == "root"
    assert nodes["node01"].reason_time is not None
    assert nodes["node01"].reason_time.date() == datetime(2026, 11, 28).date()
    # no reason: no time and no user, though 24.11 says root at time 0 and 26.05 ""
    assert (nodes["node03"].reason_time, nodes["node03"].reason_user) == (None, "")


def test_newer_node_shape_reason_changed_at_object() -> None:
    """{"set", "infinite", "number"} (23.02+ node records, slurmrestd): set is a time."""
    nodes = {n.name: n for n in parse_sinfo(_read("nodes_23.11_shape.json"))}
    assert nodes["cn002"].reason_time == _at("2026-11-22T05:27:41")
    assert nodes["cn002"].reason_user == "slurm"
    assert nodes["cn003"].reason_time is None  # a reason without a time: unknown
    assert nodes["cn001"].reason_time is None


@pytest.mark.parametrize(
    "value",
    [
        None,
        0,
        -5,
        {"set": False, "number": 1795873119},
        {"set": True, "infinite": True},
        0xFFFFFFFE,
        0xFFFFFFFF,
        2**63,
    ],
)
def test_unset_infinite_or_impossible_times_are_unknown(value: Any) -> None:
    assert epoch_time(value) is None


def test_a_time_of_the_wrong_type_is_a_slurm_error() -> None:
    assert epoch_time({"set": True, "infinite": False, "number": 1795873119}) == _at(
        "2026-11-28T13:38:39"
    )
    for bad in ("x", [1], True, {"number": "soon"}):
        with pytest.raises(SlurmError):
            epoch_time(bad)
    text = json.dumps(
        {
            "nodes": [
                {"name": "n1", "state": "idle", "reason": "x", "reason_changed_at": "yesterday"}
            ]
        }
    )
    with pytest.raises(SlurmError, match="expected a number"):
        parse_sinfo(text)


def _pyslurm_module(records: list[dict[str, Any]]) -> Any:
    """A stand-in for the pyslurm module whose Nodes.load() gives ``records`` as Node
    objects (the attributes captured from pyslurm 22.5.3); a "reason_user" of KeyError
    raises it, as pyslurm does for a uid without a passwd entry."""

    class Node(SimpleNamespace):
        def __getattribute__(self, key: str) -> Any:
            value = super().__getattribute__(key)
            if value is KeyError:
                raise KeyError(4242)
            return value

    nodes = {r["name"]: Node(**r) for r in records}
    return SimpleNamespace(Nodes=SimpleNamespace(load=lambda: nodes))


def test_pyslurm_backend_reads_what_the_cli_reads() -> None:
    """pyslurm 22.5.3's reason_time (epoch) and reason_user, captured at the same moment as
    sinfo --json: the pyslurm backend's nodes are the CLI backend's, field for field."""
    captured = json.loads(_read("pyslurm_22.5.3_reason_times.json"))
    assert captured["pyslurm"] == "22.5.3"
    via_pyslurm = PyslurmClient(_pyslurm_module(captured["nodes"])).nodes()
    via_cli = parse_sinfo(_read("sinfo_22.05_reason_times.json"))
    assert via_pyslurm == via_cli
    assert [n.name for n in via_pyslurm if n.reason_time] == ["node02", "node03"]


def test_pyslurm_reason_user_of_a_uid_without_a_name_is_empty() -> None:
    record = {
        "name": "n1",
        "state": "IDLE+DRAIN",
        "reason": OURS,
        "reason_time": 1795873119,
        "reason_user": KeyError,
        "partitions": ["debug"],
    }
    unset = {**record, "name": "n2", "reason": None, "reason_time": None, "reason_user": None}
    n1, n2 = PyslurmClient(_pyslurm_module([record, unset])).nodes()
    assert (n1.reason, n1.reason_time, n1.reason_user) == (OURS, _at("2026-11-28T13:38:39"), "")
    assert (n2.reason, n2.reason_time, n2.reason_user) == ("", None, "")


def test_tagged_drains_are_screeners_drains_within_the_window() -> None:
    """Captured: node02 drained by screener's tag at 13:38:39, node03 by an admin 2 s later."""
    nodes = parse_sinfo(_read("sinfo_22.05_reason_times.json"))
    drained_at = _at("2026-11-28T13:38:39")
    assert tagged_drains(nodes, "screener:", drained_at - timedelta(hours=1)) == {"node02"}
    assert tagged_drains(nodes, "screener:", drained_at) == {"node02"}  # at `since`: counted
    assert tagged_drains(nodes, "screener:", drained_at + timedelta(seconds=1)) == frozenset()
    assert tagged_drains(nodes, "admin:", drained_at) == {"node03"}


def test_tagged_drains_unknown_time_counts_other_tags_and_resumed_nodes_do_not() -> None:
    since = _at("2026-11-28T12:00:00")
    drained = frozenset({"IDLE", "DRAIN"})
    late, early = _at("2026-11-28T12:30:00"), _at("2026-11-28T11:00:00")
    ours = SlurmNode("n1", drained, OURS, ("debug",), late, "slurm")
    nodes = [
        ours,
        replace(ours, name="n2", reason_time=None),  # time unknown: within the window
        replace(ours, name="n3", reason_time=early),  # before the window
        replace(ours, name="n4", states=frozenset({"MIXED", "DRAIN"})),  # draining: counted
        replace(ours, name="n5", states=frozenset({"IDLE"})),  # not drained (any more)
        replace(ours, name="n6", reason="screener-job: rd 0.1x r7"),  # the ingest's own tag
        replace(ours, name="n7", reason="RMA: screener: said so"),  # an admin's reason
        replace(ours, name="n8", reason="screener:"),  # the tag alone
        replace(ours, name="n9", reason="screener: due for its check: no sweep verdict in 48 h"),
    ]
    assert tagged_drains(nodes, "screener:", since) == {"n1", "n2", "n4", "n8", "n9"}
    # the tag is a whole word: "screener" owns neither "screener: ..." nor "screener-job: ..."
    assert tagged_drains(nodes, "screener", since) == frozenset()
    assert tagged_drains([], "screener:", since) == frozenset()
