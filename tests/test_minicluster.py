"""deploy/minicluster: pure parts (names, faults, generated configs, preflight) as fast unit
tests; then the real thing: sshd, Slurm, /scratch and every fault on the session cluster,
and `down` on a cluster of its own."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from deploy.minicluster import (
    Cluster,
    ClusterError,
    ClusterHandle,
    ClusterInfo,
    ClusterSpec,
    argv,
    render,
)
from deploy.minicluster.cluster import parse_sinfo
from deploy.minicluster.nodes import FULL_FREE_BYTES
from deploy.minicluster.preflight import HostFacts, problems
from deploy.minicluster.procs import BLKIO, Proc, alive, loop_backing, reaped, wait_until
from deploy.minicluster.slots import claim_slot
from deploy.minicluster.spec import (
    hostlist,
    node_names,
    parse_fault_arg,
    parse_fault_value,
    validate_state_dir,
)
from tests.hooked_cluster import fio_job as _fio

DATA = Path(__file__).parent / "data" / "minicluster"
REPO = Path(__file__).resolve().parents[1]
MB = 1_000_000


# -- pure: names, values, specs --------------------------------------------------------------


def test_node_names_are_padded_and_compress_to_a_hostlist() -> None:
    assert node_names("node", 3) == ["node01", "node02", "node03"]
    assert node_names("fleet", 120)[-1] == "fleet120"
    assert hostlist(node_names("node", 8)) == "node[01-08]"
    assert hostlist(["node01"]) == "node01"


@pytest.mark.parametrize(
    ("kind", "text", "expected"),
    [
        ("slow_read", "20000000", 20_000_000),
        ("slow_read", "20M", 20_000_000),
        ("slow_read", "20MB", 20_000_000),
        ("slow_read", "20MiB", 20 * 1024 * 1024),
        ("slow_write", "1G", 1_000_000_000),
        ("slow_randread", "250", 250),
        ("unreachable", None, None),
        ("no_fio", "", None),
    ],
)
def test_fault_values_parse(kind: str, text: str | None, expected: int | None) -> None:
    assert parse_fault_value(kind, text) == expected


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        ("slow_read", None, "needs a value"),
        ("slow_read", "fast", "bad rate"),
        ("slow_read", "0", "must be positive"),
        ("unreachable", "3", "takes no value"),
        ("explode", None, "unknown fault"),
    ],
)
def test_bad_fault_values_are_one_line_errors(kind: str, text: str | None, message: str) -> None:
    with pytest.raises(ClusterError, match=message) as err:
        parse_fault_value(kind, text)
    assert "\n" not in str(err.value)


def test_fault_argument_form() -> None:
    assert parse_fault_arg("node03:slow_read=20M") == ("node03", "slow_read", 20_000_000)
    assert parse_fault_arg("node01:unreachable") == ("node01", "unreachable", None)
    with pytest.raises(ClusterError, match="NODE:KIND"):
        parse_fault_arg("slow_read=20M")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": 0}, "--nodes"),
        ({"prefix": "Node-1"}, "--prefix"),
        ({"subnet": "10.0.0"}, "loopback"),
        ({"subnet": "127.0.300"}, "loopback"),
        ({"slurm_port_base": 80}, "port"),
        ({"sshd_only": True, "prolog": "/bin/true"}, "--sshd-only"),
        ({"prolog": "/tmp/my hook.sh"}, "--prolog"),
        ({"pace_bps": -1}, "--pace"),
        ({"sshd_only": True, "pace_bps": 300_000_000}, "--pace needs /scratch"),
    ],
)
def test_invalid_specs_are_rejected(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ClusterError, match=message):
        ClusterSpec(**kwargs)  # type: ignore[arg-type]


def test_pace_is_kept_in_cluster_json_only_when_set(tmp_path: Path) -> None:
    assert "pace_bps" not in ClusterSpec().to_json()  # files of unpaced clusters unchanged
    paced = ClusterSpec(pace_bps=300_000_000, pace_iops=20_000)
    assert ClusterSpec.from_json(paced.to_json()) == paced
    with pytest.raises(ClusterError, match="--pace: bad rate 'fast'"):
        Cluster(tmp_path / "mc").up(2, pace="fast")


def test_state_dir_must_be_safe_for_generated_configs() -> None:
    with pytest.raises(ClusterError, match="state dir"):
        validate_state_dir(Path("/tmp/with space"))
    with pytest.raises(ClusterError, match="too long"):
        validate_state_dir(Path("/tmp/" + "x" * 120))


def test_info_round_trips_through_the_state_dir(tmp_path: Path) -> None:
    spec = ClusterSpec(nodes=4, subnet="127.0.77", slurm_port_base=23000)
    info = ClusterInfo(tmp_path, spec)
    info.save()
    again = ClusterInfo.load(tmp_path)
    assert again == info
    assert again.nodes == ["node01", "node02", "node03", "node04"]
    assert again.addr("node04") == "127.0.77.4"
    assert again.slurmd_port("node02") == 23002
    env = again.env(inherit=False)
    assert env["SLURM_CONF"] == str(tmp_path / "slurm" / "slurm.conf")
    assert env["SCREENER_KNOWN_HOSTS"] == str(info.known_hosts)
    with pytest.raises(ClusterError, match="unknown node 'node05'"):
        again.addr("node05")


def test_loading_a_missing_cluster_says_how_to_start_one(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"no minicluster in .* \(run `python -m deploy"):
        ClusterInfo.load(tmp_path)


# -- pure: generated files -------------------------------------------------------------------


def _info(tmp_path: Path, **kw: object) -> ClusterInfo:
    return ClusterInfo(tmp_path, ClusterSpec(**kw))  # type: ignore[arg-type]


def test_slurm_conf_has_one_port_per_node_and_the_private_munge(tmp_path: Path) -> None:
    info = _info(tmp_path, nodes=4, slurm_port_base=17000)
    conf = render.slurm_conf(info, cpus=2, prolog=None, epilog=None)
    assert "SlurmctldPort=17000\n" in conf
    assert (
        "NodeName=node[01-04] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[17001-17004] "
        "CPUs=2 State=UNKNOWN\n" in conf
    )
    assert f"AuthInfo=socket={tmp_path}/munge/munge.socket\n" in conf
    assert "PartitionName=debug Nodes=node[01-04] Default=YES" in conf
    assert "ReturnToService=2\n" in conf
    assert "PrologSlurmctld" not in conf
    hooked = render.slurm_conf(info, 2, tmp_path / "p.sh", tmp_path / "e.sh")
    assert f"PrologSlurmctld={tmp_path}/p.sh\n" in hooked
    assert f"EpilogSlurmctld={tmp_path}/e.sh\n" in hooked


def test_known_hosts_and_ssh_config_use_strict_checking(tmp_path: Path) -> None:
    info = _info(tmp_path, nodes=2, subnet="127.0.33")
    keys = {n: f"ssh-ed25519 AAAAkey{n} {n}-hostkey\n" for n in info.nodes}
    lines = render.known_hosts(info, keys).splitlines()[1:]
    assert lines[1] == "node02,[node02]:2222,[127.0.33.2]:2222 ssh-ed25519 AAAAkeynode02"
    cfg = render.ssh_config(info)
    block = cfg.split("Host node02\n")[1]
    assert "HostName 127.0.33.2\n" in block
    assert "StrictHostKeyChecking yes\n" in block
    assert f"UserKnownHostsFile {info.known_hosts}\n" in block
    assert f"IdentityFile {info.client_key}\n" in block


def test_sshd_config_listens_on_the_node_address_only(tmp_path: Path) -> None:
    conf = render.sshd_config(_info(tmp_path, nodes=3, subnet="127.0.44"), "node03")
    assert "ListenAddress 127.0.44.3:2222\n" in conf
    assert "UsePAM no\n" in conf
    assert re.search(r"^MaxStartups (\d+)", conf, re.M)
    assert int(re.findall(r"^MaxStartups (\d+)", conf, re.M)[0]) >= 64


def test_hook_wrapper_exports_slurm_conf_then_execs_the_script(tmp_path: Path) -> None:
    info = _info(tmp_path, nodes=2)
    script = tmp_path / "hook.sh"
    script.write_text('#!/bin/sh\necho "conf=$SLURM_CONF ssh=$SCREENER_SSH_CONFIG args=$*"\n')
    script.chmod(0o755)
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(render.hook_wrapper(info, str(script)))
    wrapper.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin"}  # what slurmctld gives a hook: no SLURM_CONF
    out = subprocess.run([str(wrapper), "a b"], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == f"conf={info.slurm_conf} ssh={info.ssh_config} args=a b"


def test_remote_command_is_quoted_for_the_remote_shell() -> None:
    cmd = argv.ssh(Path("/s/ssh_config"), "node01", ["sh", "-c", "echo $HOME; ls 'x y'"])
    assert cmd[-3:] == ["node01", "--", "sh -c 'echo $HOME; ls '\"'\"'x y'\"'\"''"]


def test_sinfo_states_parse_from_real_output() -> None:
    states = parse_sinfo((DATA / "sinfo_node_states.txt").read_text())
    assert states["node02"] == "drained"
    assert states["node03"] == "down"
    assert states["node04"] == "allocated"
    assert len(states) == 8
    after = parse_sinfo((DATA / "sinfo_after_resume.txt").read_text())
    assert after["node03"] == "idle*"  # resumed but not yet heard from


@pytest.mark.parametrize(
    ("facts", "sshd_only", "expected"),
    [
        (HostFacts(0, True, True, ()), False, []),
        (HostFacts(1000, True, True, ()), False, ["must run as root (uid is 1000)"]),
        (HostFacts(0, False, True, ()), False, ["no loop device support"]),
        (HostFacts(0, False, True, ()), True, []),
        (HostFacts(0, True, False, ()), False, ["no cgroup v1 blkio"]),
        (HostFacts(0, True, True, ("slurmd", "munged")), False, ["missing binaries: slurmd, "]),
    ],
)
def test_preconditions_name_what_is_missing(
    facts: HostFacts, sshd_only: bool, expected: list[str]
) -> None:
    found = problems(facts, sshd_only)
    assert len(found) == len(expected)
    for line, start in zip(found, expected, strict=True):
        assert line.startswith(start)


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "deploy.minicluster", "--state-dir", str(tmp_path)]
    res = subprocess.run([*cli, "status"], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 1
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert "no minicluster in" in res.stderr
    res = subprocess.run(
        [*cli, "up", "--nodes", "2", "--fault", "node01:slow_read=fast"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1 and "bad rate 'fast'" in res.stderr
    assert res.stderr.count("\n") == 1
    res = subprocess.run(
        [*cli, "up", "--nodes", "2", "--fault", "node09:no_fio"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1 and "unknown node 'node09'" in res.stderr
    assert not (tmp_path / "cluster.json").exists()  # refused before building anything


# -- the real cluster --------------------------------------------------------------------------


def test_each_node_reports_its_hostname_over_ssh(cluster: ClusterHandle) -> None:
    procs = {
        n: subprocess.Popen(cluster.ssh_argv(n, "hostname"), stdout=subprocess.PIPE, text=True)
        for n in cluster.nodes
    }
    for node, proc in procs.items():
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert out.strip() == node
    # the plain ssh command line from the docs works as well
    res = subprocess.run(
        ["ssh", "-F", str(cluster.ssh_config), cluster.nodes[0], "hostname"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.stdout.strip() == cluster.nodes[0]


def test_each_node_reports_its_hostname_via_srun(cluster: ClusterHandle) -> None:
    for node in cluster.nodes:
        res = cluster.slurm("srun", "-w", node, "-N1", "hostname", timeout=60)
        assert res.stdout.strip() == node


def test_scratch_is_private_to_each_node(cluster: ClusterHandle) -> None:
    a, b = cluster.nodes[0], cluster.nodes[1]
    name = f"{cluster.scratch}/private-{os.getpid()}"
    cluster.ssh(a, "sh", "-c", f"echo {a} > {name}")
    assert cluster.ssh(a, "cat", name).stdout.strip() == a
    assert cluster.ssh(b, "test", "-e", name, check=False).returncode == 1
    assert not Path(name).exists()  # nor on the host
    step = cluster.slurm("srun", "-w", a, "-N1", "cat", name)  # job steps see the node's fs
    assert step.stdout.strip() == a
    cluster.ssh(a, "rm", name)


def test_slow_read_throttles_reads_not_writes_and_heals(cluster: ClusterHandle) -> None:
    node = cluster.nodes[1]
    # 2 MB/s, read in 64 KiB blocks: at 20 MB/s, "10x the throttle" (200 MB/s) was more than
    # an unthrottled loop-device write gave beside 3 busy workers (58 MB/s, CI of 930edcb)
    rate = 2 * MB
    cluster.inject(node, "slow_read", "2M")
    write = _fio(cluster, node, "write", runtime=1)["write"]["bw_bytes"]
    read = _fio(cluster, node, "read", bs="64k", runtime=2)["read"]["bw_bytes"]
    assert rate / 2 < read < rate * 1.5, f"throttled read {read / MB:.1f} MB/s"
    assert write > 10 * rate, f"write {write / MB:.1f} MB/s should be unthrottled"
    assert cluster.heal(node) == {node: ["slow_read"]}
    healed = _fio(cluster, node, "read", runtime=1)["read"]["bw_bytes"]
    assert healed > 10 * rate, f"healed read {healed / MB:.1f} MB/s"


def test_slow_randread_limits_iops(cluster: ClusterHandle) -> None:
    node = cluster.nodes[2]
    _fio(cluster, node, "write", runtime=0.5)
    cluster.inject(node, "slow_randread", 300)
    iops = _fio(cluster, node, "randread", bs="4k", runtime=1.5)["read"]["iops"]
    assert 150 < iops < 450, f"throttled randread {iops:.0f} IOPS"
    cluster.heal(node)
    assert _fio(cluster, node, "randread", bs="4k", runtime=1)["read"]["iops"] > 3000


def test_slow_write_throttles_writes(cluster: ClusterHandle) -> None:
    node = cluster.nodes[3]
    cluster.inject(node, "slow_write", 20 * MB)
    write = _fio(cluster, node, "write", runtime=1.5)["write"]["bw_bytes"]
    read = _fio(cluster, node, "read", runtime=1)["read"]["bw_bytes"]
    assert 10 * MB < write < 30 * MB, f"throttled write {write / MB:.1f} MB/s"
    assert read > 200 * MB


def test_sbatch_runs_a_job_on_four_nodes(cluster: ClusterHandle) -> None:
    if len(cluster.nodes) < 4:
        pytest.skip("needs 4 nodes")
    out = cluster.state_dir / f"job-{os.getpid()}.out"
    job = cluster.slurm(
        "sbatch", "--parsable", "-N4", f"--output={out}", "--wrap", "srun hostname"
    ).stdout.strip()
    deadline = time.monotonic() + 60
    state = ""
    while time.monotonic() < deadline:
        show = cluster.slurm("scontrol", "show", "job", job, "-o").stdout
        state = re.search(r"JobState=(\S+)", show).group(1)  # type: ignore[union-attr]
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            break
        time.sleep(0.2)  # polling the job's real state, bounded by the deadline
    assert state == "COMPLETED"
    hosts = out.read_text().split()
    assert len(hosts) == 4 and len(set(hosts)) == 4 and set(hosts) <= set(cluster.nodes)
    out.unlink()


def test_unreachable_stops_sshd_and_heal_keeps_the_host_key(cluster: ClusterHandle) -> None:
    node, peer = cluster.nodes[0], cluster.nodes[1]
    cluster.inject(node, "unreachable")
    res = cluster.ssh(node, "hostname", check=False)
    assert res.returncode == 255 and "Connection refused" in res.stderr
    assert cluster.ssh(peer, "hostname").stdout.strip() == peer
    status = {n.name: n for n in cluster.cluster.status().nodes}
    assert not status[node].sshd and status[node].faults == {"unreachable": None}
    assert cluster.heal() == {node: ["unreachable"]}
    # strict host-key checking passes: the restarted sshd presents the same key
    assert cluster.ssh(node, "hostname").stdout.strip() == node


def test_no_fio_hides_fio_on_one_node_only(cluster: ClusterHandle) -> None:
    node, peer = cluster.nodes[2], cluster.nodes[3]
    cluster.inject(node, "no_fio")
    assert cluster.ssh(node, "sh", "-c", "command -v fio", check=False).returncode != 0
    assert cluster.ssh(node, "fio", "--version", check=False).returncode == 127
    step = cluster.slurm("srun", "-w", node, "-N1", "fio", "--version", check=False)
    assert step.returncode != 0  # job steps on that node do not find it either
    assert cluster.ssh(peer, "fio", "--version").stdout.startswith("fio-")
    cluster.heal(node)
    assert cluster.ssh(node, "fio", "--version").stdout.startswith("fio-")


def test_full_scratch_leaves_under_a_mebibyte(cluster: ClusterHandle) -> None:
    node, peer = cluster.nodes[4 % len(cluster.nodes)], cluster.nodes[0]
    probe = (
        f"df -B1 --output=avail {cluster.scratch} | tail -n1; "
        f"if err=$(dd if=/dev/zero of={cluster.scratch}/fill-test bs=1M count=2 2>&1); "
        'then echo fits; else echo "$err" | head -n1; fi; '
        f"rm -f {cluster.scratch}/fill-test"
    )  # one ssh round trip: free bytes, then whether 2 MiB still fit

    def check(n: str) -> tuple[int, str]:
        avail, dd_result = cluster.ssh(n, "sh", "-c", probe).stdout.splitlines()
        return int(avail), dd_result

    cluster.inject(node, "full_scratch")
    avail, dd_result = check(node)
    assert avail < FULL_FREE_BYTES
    assert "No space left on device" in dd_result
    avail, dd_result = check(peer)
    assert avail > 100 * 2**20 and dd_result == "fits"
    cluster.heal(node)
    avail, dd_result = check(node)
    assert avail > 100 * 2**20 and dd_result == "fits"


def test_faults_on_unknown_nodes_and_status(cluster: ClusterHandle) -> None:
    with pytest.raises(ClusterError, match="unknown node 'nodeXX'"):
        cluster.inject("nodeXX", "slow_read", "1M")
    cluster.inject(cluster.nodes[0], "slow_write", "50M")
    st = cluster.cluster.status()
    assert st.healthy
    assert st.nodes[0].faults == {"slow_write": 50 * MB}
    assert all(n.slurm_state == "idle" for n in st.nodes)


def test_up_again_is_idempotent_and_repairs(cluster: ClusterHandle) -> None:
    spec = cluster.info.spec
    mc = Cluster(cluster.state_dir)
    kwargs = {
        "subnet": spec.subnet,
        "slurm_port_base": spec.slurm_port_base,
        "slurm_version": spec.slurm_version,  # SCREENER_TEST_SLURM's: up refuses a change
        "pace": spec.pace_bps,  # the session cluster's pace (conftest): the same spec
        "pace_iops": spec.pace_iops,
    }
    before = json.loads((cluster.state_dir / "runtime.json").read_text())
    mc.up(spec.nodes, **kwargs)  # type: ignore[arg-type]
    assert json.loads((cluster.state_dir / "runtime.json").read_text()) == before
    with pytest.raises(ClusterError, match="a different cluster is recorded"):
        mc.up(spec.nodes + 1, **kwargs)  # type: ignore[arg-type]
    victim = cluster.nodes[-1]
    sshd = Proc.from_json(before["nodes"][victim]["procs"]["sshd"])
    os.kill(sshd.pid, 15)
    wait_until("sshd to exit", lambda: not alive(sshd), time.monotonic() + 10)
    assert cluster.ssh(victim, "true", check=False).returncode == 255
    mc.up(spec.nodes, **kwargs)  # type: ignore[arg-type]
    assert cluster.ssh(victim, "hostname").stdout.strip() == victim


def test_reset_resumes_drained_nodes(cluster: ClusterHandle) -> None:
    node = cluster.nodes[1]
    cluster.slurm("scontrol", "update", f"nodename={node}", "state=drain", "reason=test")
    assert parse_sinfo(cluster.slurm("sinfo", "-h", "-N", "-o", "%N %T").stdout)[node] in (
        "drained",
        "draining",
    )
    cluster.reset()
    assert parse_sinfo(cluster.slurm("sinfo", "-h", "-N", "-o", "%N %T").stdout)[node] == "idle"


@pytest.mark.cluster
def test_down_leaves_nothing_behind(tmp_path: Path) -> None:
    """A 2-node cluster of its own, with a PrologSlurmctld hook: the hook sees SLURM_CONF,
    then `down` leaves no process, mount, loop device or cgroup."""
    if os.environ.get("SCREENER_SKIP_CLUSTER") == "1":
        pytest.skip("SCREENER_SKIP_CLUSTER=1")
    hook_out = tmp_path / "prolog.env"
    hook = tmp_path / "prolog.sh"
    # env writes into a temporary file renamed when complete: the test polls for the name,
    # and `env > file` creates it empty before env has written a line (CI on fd4e250)
    hook.write_text(
        "#!/bin/sh\n"
        f'scontrol show config > /dev/null && env > "{hook_out}.part"'
        f' && mv "{hook_out}.part" "{hook_out}"\n'
    )
    hook.chmod(0o755)
    with claim_slot() as slot:
        mc = Cluster(slot.state_dir)
        try:
            t0 = time.monotonic()
            info = mc.up(
                2,
                prefix="tiny",
                subnet=slot.subnet,
                slurm_port_base=slot.slurm_port_base,
                prolog=str(hook),
                faults=["tiny02:slow_read=5M", "tiny01:no_fio"],
            )
            print(f"up 2 nodes: {time.monotonic() - t0:.2f} s")
            handle = ClusterHandle(mc, info)
            handle.slurm("sbatch", "-N2", "--output=/dev/null", "--wrap", "true")
            deadline = time.monotonic() + 30
            while not hook_out.exists() and time.monotonic() < deadline:
                time.sleep(0.1)  # polling for the hook's output file, bounded
            hook_env = dict(
                ln.split("=", 1) for ln in hook_out.read_text().splitlines() if "=" in ln
            )
            assert hook_env["SLURM_CONF"] == str(info.slurm_conf)
            assert hook_env["SCREENER_SSH_CONFIG"] == str(info.ssh_config)
            assert hook_env["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmctld"
            runtime = json.loads((slot.state_dir / "runtime.json").read_text())
        finally:
            t0 = time.monotonic()
            mc.down()
            print(f"down 2 nodes: {time.monotonic() - t0:.2f} s")
    procs = [Proc.from_json(p) for rec in runtime["nodes"].values() for p in rec["procs"].values()]
    assert len(procs) == 2 * 3 + 2  # holder, sshd, slurmd per node; munged, slurmctld
    assert all(reaped(p) for p in procs)
    loops = [rec["loop"] for rec in runtime["nodes"].values() if rec.get("loop")]
    images = [rec["image"] for rec in runtime["nodes"].values() if rec.get("image")]
    assert len(loops) == 2
    assert not any(loop_backing(dev) in images for dev in loops)
    listing = ["losetup", "--list", "--noheadings", "--output", "BACK-FILE"]
    attached = subprocess.run(listing, capture_output=True, text=True, check=True).stdout
    assert not any(img in attached for img in images)
    # no process anywhere still mounts a loop device backed by one of our images
    for mountinfo in Path("/proc").glob("[0-9]*/mountinfo"):
        try:
            text = mountinfo.read_text()
        except OSError:
            continue
        for dev in set(re.findall(r" (/dev/loop\d+) ", text)):
            assert loop_backing(dev) not in images, f"{dev} of {mountinfo} is ours"
    cgroups = [rec["cgroup"] for rec in runtime["nodes"].values() if rec.get("cgroup")]
    assert len(cgroups) == 3 and all(Path(c).parent == BLKIO for c in cgroups)
    assert not any(Path(c).exists() for c in cgroups)
    assert sorted(p.name for p in slot.state_dir.iterdir()) == [".lock", "logs"]


def test_host_keeps_its_hostname_and_mounts(cluster: Any) -> None:
    # nsenter into a holder that had not unshared yet once renamed the host to "node25"
    assert socket.gethostname() not in cluster.nodes
    assert not os.path.ismount(cluster.scratch)
