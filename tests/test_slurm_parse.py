"""Slurm JSON parsing (captured 22.05 outputs, documented newer shapes) and the argv the
command-line backend builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from screener.errors import ConfigError, SlurmError
from screener.slurm.cli_backend import drain_argv, release_argv, resume_argv
from screener.slurm.client import check_reason
from screener.slurm.parse import parse_sinfo, parse_squeue_keyed

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
