"""Slurm 24.11 and 26.05 as screener parses them (issue 43): the outputs captured from the
real releases in tests/data/slurm/<V>/ (one node `node01` running job 4, `sbatch
--comment=screener=on --job-name=ior`, then drained with screener's reason; see the README
there), through the same parsers the CLI backend and ingest use. Then the minicluster's
version plumbing, pure (spec, env, shims), which those clusters run on."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from deploy.minicluster import ClusterError, ClusterInfo, ClusterSpec, argv, render
from deploy.minicluster.spec import HOST_SLURM, SHIM_TOOLS, slurm_version_arg
from deploy.slurmroot import SUITES, SlurmRootError, find, tool_in_root
from screener.errors import SlurmError
from screener.slurm.cli_backend import sinfo_argv
from screener.slurm.job_id import match_job, parse_job_id
from screener.slurm.parse import job_state, parse_sinfo, parse_squeue_keyed
from screener.slurm.show_job import parse_show_job
from tests.hooked_cluster import as_2205_job, as_2205_nodes

DATA = Path(__file__).parent / "data" / "slurm"
VERSIONS = {"24.11": "24.11.5", "26.05": "26.05.5"}  # captured release per directory
REASON = "screener: rd 0.05x peers r42"


def sample(version: str, name: str) -> str:
    return (DATA / version / name).read_text()


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_the_samples_are_what_that_release_printed(version: str) -> None:
    """Captured, not written by hand: Slurm's own meta and `scontrol -V` name the release."""
    for name in ("sinfo.json", "sinfo_drained.json", "squeue.json"):
        meta = json.loads(sample(version, name))["meta"]
        assert meta["slurm"]["release"] == VERSIONS[version], (name, meta)
    # Debian's build names itself slurm-wlm
    assert sample(version, "scontrol_version.txt").split() == ["slurm-wlm", VERSIONS[version]]


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_an_allocated_node_its_state_and_partition(version: str) -> None:
    """`sinfo --json` of 23.02+ groups nodes under sinfo[].nodes.nodes with a state list."""
    data = json.loads(sample(version, "sinfo.json"))
    assert "nodes" not in data and data["sinfo"][0]["node"]["state"] == ["ALLOCATED"]
    (node,) = parse_sinfo(sample(version, "sinfo.json"))
    assert node.name == "node01"
    assert node.states == frozenset({"ALLOCATED"})
    assert node.reason == ""
    assert node.partitions == ("debug",)


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_two_drains_with_other_reasons_are_read_per_node_with_dash_n(version: str) -> None:
    """3 nodes, node01 drained by screener, node02 by an admin (captured on the release,
    2026-11-28): plain `sinfo --json` groups both IDLE+DRAIN nodes in one record with
    node01's reason, so node02 would read as screener's drain; the CLI backend runs `sinfo
    --json -N` (a record per node), and a grouped record with a reason is an error."""
    grouped = json.loads(sample(version, "sinfo_two_reasons.json"))["sinfo"]
    assert grouped[0]["nodes"]["nodes"] == ["node01", "node02"]
    assert grouped[0]["reason"]["description"] == "screener: rd 0.05x peers r1"
    with pytest.raises(SlurmError, match="grouped 2 nodes under one reason: run it with -N"):
        parse_sinfo(sample(version, "sinfo_two_reasons.json"))
    nodes = {n.name: n for n in parse_sinfo(sample(version, "sinfo_N_two_reasons.json"))}
    assert nodes["node01"].reason == "screener: rd 0.05x peers r1"
    assert nodes["node02"].reason == "admin: bios"
    assert nodes["node01"].states == nodes["node02"].states == frozenset({"IDLE", "DRAIN"})
    assert nodes["node03"].states == frozenset({"IDLE"}) and nodes["node03"].reason == ""
    assert sinfo_argv() == ["sinfo", "--json", "-N"]
    tests_view = {
        n["name"]: n for n in as_2205_nodes(json.loads(sample(version, "sinfo_N_two_reasons.json")))
    }
    assert tests_view["node02"]["reason"] == "admin: bios"
    assert tests_view["node02"]["state_flags"] == ["DRAIN"]


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_a_drained_node_keeps_screeners_reason(version: str) -> None:
    """ALLOCATED+DRAIN as a list; the reason an object (24.11 with `user`, 26.05 without)."""
    raw = json.loads(sample(version, "sinfo_drained.json"))["sinfo"][0]
    assert raw["node"]["state"] == ["ALLOCATED", "DRAIN"]
    assert raw["reason"]["description"] == REASON
    assert ("user" in raw["reason"]) is (version == "24.11")  # 26.05 dropped the field
    (node,) = parse_sinfo(sample(version, "sinfo_drained.json"))
    assert (node.name, node.reason, node.partitions) == ("node01", REASON, ("debug",))
    assert node.states == frozenset({"ALLOCATED", "DRAIN"})
    assert "DRAIN" in node.states  # what the drain/resume logic asks
    text = sample(version, "scontrol_show_node_drained.txt")
    assert "State=ALLOCATED+DRAIN " in text and f"Reason={REASON} [root@" in text


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_a_running_job_its_nodes_state_comment_and_restarts(version: str) -> None:
    """`job_state` a list, `comment` a plain string, `restart_cnt` a plain number, the
    array/het ids `{"set", "number"}` objects meaning "not an array task / het job"."""
    raw = json.loads(sample(version, "squeue.json"))["jobs"][0]
    assert raw["job_state"] == ["RUNNING"] and raw["comment"] == "screener=on"
    assert raw["restart_cnt"] == 0
    assert raw["array_task_id"] == {"set": False, "infinite": False, "number": 0}
    assert raw["het_job_id"] == {"set": True, "infinite": False, "number": 0}
    ((key, job),) = parse_squeue_keyed(sample(version, "squeue.json"))
    assert key == (4, None, None, None, None)  # neither an array task nor a het component
    assert job.job_id == "4"
    assert job.nodes == ("node01",)
    assert job.state == "RUNNING"
    assert job.comment == "screener=on"
    assert job.restarts == 0
    assert (job.name, job.partition, job.reason) == ("ior", "debug", "None")


@pytest.mark.parametrize(
    ("listed", "word"),
    [
        (["RUNNING"], "RUNNING"),
        (["PENDING"], "PENDING"),
        # seen on 24.11: a PrologSlurmctld failed, the job requeued, EpilogSlurmctld running
        (["PENDING", "COMPLETING"], "COMPLETING"),
        (["RUNNING", "CONFIGURING"], "CONFIGURING"),  # its PrologSlurmctld still running
        (["COMPLETED", "COMPLETING"], "COMPLETING"),
        (["PENDING", "REQUEUED"], "REQUEUED"),
        (["PENDING", "REQUEUE_HOLD", "COMPLETING"], "COMPLETING"),  # 22.05's precedence
        (["FAILED", "SIGNALING"], "SIGNALING"),
        ([], ""),
        ("PENDING", "PENDING"),  # 22.05's word passes through
    ],
)
def test_a_job_state_list_reads_as_22_05_printed_it(listed: object, word: str) -> None:
    """`screener release` waits for PENDING = requeued *and* done completing: a list's head
    alone said PENDING while the requeue was not finished, and the release came too early."""
    assert job_state(listed) == word
    text = json.dumps({"jobs": [{"job_id": 7, "job_state": listed, "nodes": ""}]})
    ((_, job),) = parse_squeue_keyed(text)
    assert job.state == word


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_job_ids_match_as_on_22_05(version: str) -> None:
    """The CLI backend's lookup: `4` is the job; an array task or het component of it is not."""
    records = parse_squeue_keyed(sample(version, "squeue.json"))
    found = match_job(parse_job_id("4"), records)
    assert found is not None and found.nodes == ("node01",)
    assert match_job(parse_job_id("4_1"), records) is None
    assert match_job(parse_job_id("5"), records) is None


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_show_job_detail_of_the_running_job(version: str) -> None:
    """`scontrol show job -d` (ingest, epilog): 24.11 pads `Comment=` with a space, 26.05
    adds SLUID=, SubmitLine=, Exclusive=NODE and prints `StdErr=` empty."""
    rec = parse_show_job(sample(version, "scontrol_show_job.txt"), "4")
    assert (rec.job_id, rec.state, rec.partition, rec.nodes) == (
        "4",
        "RUNNING",
        "debug",
        ("node01",),
    )
    assert rec.comment == "screener=on"
    assert (rec.num_tasks, rec.tasks_per_node, rec.cpus_per_node) == (1, 0, (2,))
    assert rec.exclusive is True  # OverSubscribe=NO
    assert rec.std_out.endswith("/slurm-4.out") and rec.std_out.startswith(rec.work_dir)


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_the_hooked_tests_read_every_version_in_the_2205_shape(version: str) -> None:
    """tests/hooked_cluster.py's job_state/sinfo_nodes: 22.05 records pass untouched; newer
    ones are rebuilt with the fields the hooked tests read."""
    (node,) = as_2205_nodes(json.loads(sample(version, "sinfo_drained.json")))
    assert node == {
        "name": "node01",
        "state": "allocated",
        "state_flags": ["DRAIN"],
        "reason": REASON,
        "partitions": ["debug"],
    }
    job = as_2205_job(json.loads(sample(version, "squeue.json"))["jobs"][0])
    assert (job["job_state"], job["restart_cnt"], job["nodes"]) == ("RUNNING", 0, "node01")
    assert as_2205_job({"job_state": ["PENDING", "REQUEUED"]})["job_state"] == "REQUEUED"
    assert as_2205_job({"job_state": ["COMPLETED", "COMPLETING"]})["job_state"] == "COMPLETING"
    old = json.loads((DATA / "sinfo_22.05_drained.json").read_text())
    assert as_2205_nodes(old) == old["nodes"]
    old_job = json.loads((DATA / "squeue_22.05_running.json").read_text())["jobs"][0]
    assert as_2205_job(old_job) == old_job


# -- the minicluster's version plumbing (pure) ----------------------------------------------


def test_slurm_version_is_validated_and_the_host_one_means_none(tmp_path: Path) -> None:
    assert ClusterSpec().slurm_version is None
    assert slurm_version_arg(None) is None
    assert slurm_version_arg("") is None and slurm_version_arg(HOST_SLURM) is None
    assert slurm_version_arg(" 24.11 ") == "24.11"
    for version in SUITES:
        assert ClusterSpec(slurm_version=version).slurm_version == version
    with pytest.raises(ClusterError, match=r"--slurm-version must be one of 24\.11, 26\.05"):
        ClusterSpec(slurm_version="23.02")
    with pytest.raises(ClusterError, match="--sshd-only"):
        ClusterSpec(slurm_version="24.11", sshd_only=True)


def test_cluster_json_is_unchanged_for_the_host_slurm(tmp_path: Path) -> None:
    """No slurm_version key unless one is set; both round-trip through the state dir."""
    assert "slurm_version" not in ClusterSpec().to_json()
    info = ClusterInfo(tmp_path, ClusterSpec(nodes=2, slurm_version="26.05"))
    info.save()
    assert json.loads((tmp_path / "cluster.json").read_text())["spec"]["slurm_version"] == "26.05"
    assert ClusterInfo.load(tmp_path) == info
    plain = ClusterInfo(tmp_path / "p", ClusterSpec(nodes=2))
    plain.save()
    assert ClusterInfo.load(tmp_path / "p").spec.slurm_version is None


def test_env_puts_the_shims_first_on_path_only_for_a_version(tmp_path: Path) -> None:
    host = ClusterInfo(tmp_path, ClusterSpec(nodes=2))
    assert host.client_bin is None and host.slurm_root is None
    assert "PATH" not in host.env(inherit=False)
    assert host.env()["PATH"] == os.environ["PATH"]
    info = ClusterInfo(tmp_path, ClusterSpec(nodes=2, slurm_version="24.11"))
    assert info.client_bin == tmp_path / "bin"
    assert info.slurm_root == Path("/var/cache/screener/slurm-root/24.11")
    path = info.env()["PATH"].split(os.pathsep)
    assert path[0] == str(tmp_path / "bin") and path[1:] == os.environ["PATH"].split(os.pathsep)
    again = info.env(inherit=False)
    assert again["PATH"].split(os.pathsep).count(str(tmp_path / "bin")) == 1
    # the cluster's own clients use the shims too, never the host's (22.05) tools
    assert argv.sinfo_states(info.client_bin)[0] == str(tmp_path / "bin" / "sinfo")
    assert argv.resume_nodes("node01", info.client_bin)[0] == str(tmp_path / "bin" / "scontrol")
    assert argv.sinfo_states()[0] == argv.tool("sinfo")
    # the hooks run inside slurmctld's namespace: the wrapper exports no PATH
    assert "PATH=" not in render.hook_wrapper(info, "/bin/true").replace("SLURM_CONF=", "")


def test_the_shim_enters_the_controller_in_the_callers_directory(tmp_path: Path) -> None:
    """Constant text but for an absolute path and a pid, each checked; run here with `echo`
    standing in for nsenter, it passes the caller's arguments through untouched."""
    text = render.slurm_shim("/usr/bin/nsenter", 4242, "/usr/bin/sinfo")
    assert text.startswith("#!/bin/sh\n")
    assert text.endswith('exec /usr/bin/nsenter -t 4242 -m --wd="$PWD" -- /usr/bin/sinfo "$@"\n')
    for bad in (("/usr/bin/x;rm", 42, "/usr/bin/sinfo"), ("nsenter", 42, "/usr/bin/sinfo")):
        with pytest.raises(ValueError, match="safe absolute path"):
            render.slurm_shim(*bad)
    with pytest.raises(ValueError, match="pid"):
        render.slurm_shim("/usr/bin/nsenter", 0, "/usr/bin/sinfo")
    shim = tmp_path / "sinfo"
    shim.write_text(render.slurm_shim("/bin/echo", 4242, "/usr/bin/sinfo"))
    shim.chmod(0o755)
    out = subprocess.run(
        [str(shim), "-o", "%N $HOME; x", ""], cwd=tmp_path, capture_output=True, text=True
    )
    expected = f"-t 4242 -m --wd={tmp_path} -- /usr/bin/sinfo -o %N $HOME; x \n"
    assert out.returncode == 0 and out.stdout == expected


def test_a_missing_root_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(SlurmRootError, match=r"`make slurm-root SLURM=24\.11`") as exc:
        find("24.11", cache=tmp_path)
    assert "\n" not in str(exc.value)
    with pytest.raises(SlurmRootError, match=r"no Debian suite for Slurm 23\.02"):
        find("23.02", cache=tmp_path)


def test_tools_are_found_in_a_root(tmp_path: Path) -> None:
    (tmp_path / "usr" / "sbin").mkdir(parents=True)
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "sbin" / "slurmd").write_text("")
    (tmp_path / "usr" / "bin" / "sinfo").write_text("")
    assert tool_in_root(tmp_path, "slurmd") == "/usr/sbin/slurmd"
    assert tool_in_root(tmp_path, "sinfo") == "/usr/bin/sinfo"
    assert tool_in_root(tmp_path, "sacct") is None
    assert set(SHIM_TOOLS) >= {"sinfo", "squeue", "scontrol", "sbatch", "srun", "scancel"}
