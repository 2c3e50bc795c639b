"""One contract for both Slurm backends (issue 21), against the real slurmctld of the
emulated cluster: the CLI backend (sinfo/squeue --json, scontrol) and pyslurm (22.5.3 on the
host's 22.05; with SCREENER_TEST_SLURM=24.11 that root's 24.11.0 build, its driver run inside
the root as the hooks are) must see the same nodes, states, reasons, partitions and job
fields, and their drains, resumes and releases must show in Slurm's own `sinfo -R`/`squeue`
text. After a drain, every backend says when and by whom its reason was set, as Slurm's own
`scontrol show node` prints it (issue 45).

Each call runs in its own process (tests/slurm_contract_driver.py): libslurm reads its
config once per process. Passing this suite for a pyslurm release is what puts it in
screener.slurm.pyslurm_probe.VERIFIED, the only releases `backend = "auto"` uses.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import re
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from deploy.minicluster import ClusterHandle, argv
from deploy.minicluster.procs import wait_until
from screener.slurm.pyslurm_probe import VERIFIED, version_numbers
from tests.hooked_cluster import SLURM_UNDER_TEST, in_slurm_root, pyslurm_in_root_missing
from tests.slurm_contract_driver import show_node_reasons

REPO = Path(__file__).resolve().parents[1]
HAVE_PYSLURM = importlib.util.find_spec("pyslurm") is not None
NO_PYSLURM = (
    "pyslurm is not installed: the pyslurm half of the Slurm contract did NOT run "
    "(`make pyslurm` installs it from ../shared/vendor)"
)
# slurmrestd (the rest backend) runs in 24.11 and 26.05 clusters; the host's 22.05 has none.
# It runs as nobody with JWT auth, as in production: root's token (the cluster's
# SCREENER_MINICLUSTER_REST_TOKEN_FILE) makes its requests root's, writes included.
HAVE_REST = SLURM_UNDER_TEST is not None
NEEDS_REST = pytest.mark.skipif(
    not HAVE_REST,
    reason="the host's Slurm 22.05 has no slurmrestd: the rest backend's contract runs with "
    "SCREENER_TEST_SLURM=24.11 or 26.05",
)
# Another Slurm (SCREENER_TEST_SLURM): pyslurm is that root's own build, imported by the
# driver run inside the root (in_slurm_root), as the hooks run; 26.05 has none.
PYSLURM_MISSING = (
    (None if HAVE_PYSLURM else NO_PYSLURM)
    if SLURM_UNDER_TEST is None
    else pyslurm_in_root_missing()
)
BACKENDS = [
    "cli",
    pytest.param(
        "pyslurm",
        marks=pytest.mark.skipif(PYSLURM_MISSING is not None, reason=str(PYSLURM_MISSING)),
    ),
]
# Which backends `both` compares: pyslurm only where it can serve the cluster's Slurm.
BOTH = ("cli", "pyslurm") if PYSLURM_MISSING is None else ("cli",)
BACKENDS.append(pytest.param("rest", marks=NEEDS_REST))
WRITERS = BACKENDS  # drain, resume, release: every backend, rest through its JWT
BOTH = (*BOTH, "rest") if HAVE_REST else BOTH  # reads: every cluster with slurmrestd
TAG = "screener: contract test"


def call(
    cluster: ClusterHandle, backend: str, op: str, *args: str, env: dict[str, str] | None = None
) -> Any:
    """One client call through ``backend``; its result (or {"error": ...})."""
    argv = [sys.executable, "-m", "tests.slurm_contract_driver", backend, op, *args]
    res = subprocess.run(
        in_slurm_root(argv) if backend == "pyslurm" else argv,
        env={**cluster.env(), **(env or {})},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert out["backend"] == backend, out["why"]
    return out["result"]


def both(cluster: ClusterHandle, op: str, *args: str) -> Any:
    """The same call through every installed backend; they must agree; the common answer."""
    answers = {b: call(cluster, b, op, *args) for b in BOTH}
    first = next(iter(answers.values()))
    assert all(a == first for a in answers.values()), answers
    return first


def sinfo_reasons(cluster: ClusterHandle) -> dict[str, str]:
    """node -> reason, from Slurm's own `sinfo -R` text."""
    out = cluster.slurm("sinfo", "-R", "-h", "-N", "-o", "%N|%E").stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def sinfo_states(cluster: ClusterHandle, *nodes: str) -> list[str]:
    """Slurm's compact state of ``nodes`` (`sinfo -N -o %t`), one per node."""
    out = cluster.slurm("sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%t").stdout
    return out.split()


def squeue_line(cluster: ClusterHandle, job_id: str, fmt: str) -> str:
    return cluster.slurm("squeue", "-h", "-j", job_id, "-o", fmt).stdout.strip()


def sbatch(cluster: ClusterHandle, *args: str) -> str:
    out = cluster.slurm("sbatch", "--parsable", "-o", "/dev/null", *args).stdout.strip()
    return out.split(";")[0]


def wait(check: Callable[[], bool], what: str = "the job's state") -> None:
    """Poll Slurm until ``check`` holds (60 s)."""
    wait_until(what, check, time.monotonic() + 60)


def test_pyslurm_release_under_test_is_the_verified_one() -> None:
    """The pair this suite passes for is the pair `auto` trusts (and no other). In CI, with
    the vendored wheel beside the checkout, the pyslurm half must run: a skip is a failure."""
    if SLURM_UNDER_TEST is not None:
        _root_build_is_verified(SLURM_UNDER_TEST)
        return
    if not HAVE_PYSLURM:
        vendored = list((REPO.parent / "shared" / "vendor").glob("pyslurm-*.whl"))
        if os.environ.get("SCREENER_CI") == "1" and vendored:  # set by .ci/run
            pytest.fail(f"{NO_PYSLURM}, although {vendored[0]} is there")
        pytest.skip(NO_PYSLURM)
    from importlib.metadata import version

    assert version_numbers(version("pyslurm"))[:2] in VERIFIED


def _root_build_is_verified(release: str) -> None:
    """Another Slurm: the root's own pyslurm build is the one verified. In CI, with its
    source vendored (`make test-slurms` builds it), a missing build is a failure."""
    from deploy.slurmroot.pyslurm import SOURCES, find_pyslurm

    if PYSLURM_MISSING is not None:
        src = SOURCES.get(release)
        vendored = src is not None and (REPO.parent / "shared" / "vendor" / src.tarball).is_file()
        if os.environ.get("SCREENER_CI") == "1" and vendored:
            pytest.fail(f"the pyslurm half did NOT run: {PYSLURM_MISSING}")
        pytest.skip(f"the pyslurm half did NOT run: {PYSLURM_MISSING}")
    assert version_numbers(find_pyslurm(release).stamp.pyslurm)[:2] in VERIFIED


def test_auto_uses_the_roots_pyslurm_inside_the_root_only(cluster: ClusterHandle) -> None:
    """Another Slurm: `auto` where the hooks run (inside its root) picks that root's pyslurm
    build and says why; on the host, beside the same cluster, the host's 22.5.3 is what
    imports and `auto` refuses it (scontrol -V names the cluster's Slurm): the CLI."""
    if SLURM_UNDER_TEST is None:
        pytest.skip("the host's Slurm: tests/test_prolog.py checks `auto` picks pyslurm there")
    if PYSLURM_MISSING is not None:
        pytest.skip(f"the pyslurm half did NOT run: {PYSLURM_MISSING}")
    from deploy.slurmroot.pyslurm import find_pyslurm

    driver = [sys.executable, "-m", "tests.slurm_contract_driver", "auto", "nodes"]
    inside, outside = (
        subprocess.run(
            argv, env=cluster.env(), cwd=REPO, capture_output=True, text=True, timeout=120
        )
        for argv in (in_slurm_root(driver), driver)
    )
    assert inside.returncode == 0 and outside.returncode == 0, inside.stderr + outside.stderr
    got, host = json.loads(inside.stdout), json.loads(outside.stdout)
    built = find_pyslurm(SLURM_UNDER_TEST).stamp.pyslurm
    assert got["backend"] == "pyslurm", got
    assert f"pyslurm {built} built for Slurm {SLURM_UNDER_TEST}." in got["why"], got
    assert got["why"].endswith(": contract-tested"), got
    assert sorted(n["name"] for n in got["result"]) == sorted(cluster.nodes)
    assert host["backend"] == "cli" and "versions differ" in host["why"], host
    assert built not in host["why"], host  # the .pth adds the root's build inside it only


def test_nodes_states_reasons_and_an_overlapping_partition(cluster: ClusterHandle) -> None:
    """Every node with its partitions, after a second partition is created at runtime."""
    extra = cluster.nodes[1:3]
    cluster.slurm("scontrol", "create", "PartitionName=extra", f"Nodes={','.join(extra)}")
    try:
        nodes = {n["name"]: n for n in both(cluster, "nodes")}
        assert sorted(nodes) == sorted(cluster.nodes)
        for name, node in nodes.items():
            want = {"debug", "extra"} if name in extra else {"debug"}
            assert set(node["partitions"]) == want, node
            assert set(node["states"]) == {"IDLE"}, node
            assert node["reason"] == ""
        picked = both(cluster, "nodes", cluster.nodes[0], "nosuchnode")
        assert [n["name"] for n in picked] == [cluster.nodes[0]]
    finally:
        cluster.slurm("scontrol", "delete", "PartitionName=extra")


@pytest.mark.parametrize("backend", WRITERS)
def test_drain_and_resume_show_in_sinfo(cluster: ClusterHandle, backend: str) -> None:
    """One drain of two nodes with a reason, seen by Slurm and by both backends; then resume."""
    a, b = cluster.nodes[0], cluster.nodes[3]
    reason = f"{TAG} {backend} 0.04x peers"
    assert call(cluster, backend, "drain", reason, a, b) == "ok"
    reasons = sinfo_reasons(cluster)
    assert reasons.get(a) == reason and reasons.get(b) == reason, reasons
    seen = {n["name"]: n for n in both(cluster, "nodes", a, b)}
    assert all("DRAIN" in seen[n]["states"] and seen[n]["reason"] == reason for n in (a, b))
    assert call(cluster, backend, "resume", a, b) == "ok"
    assert a not in sinfo_reasons(cluster) and b not in sinfo_reasons(cluster)
    # slurmctld shows a resumed node NOT_RESPONDING for ~2 s (both backends do): wait it out
    idle = ["idle"] * 2
    wait(lambda: sinfo_states(cluster, a, b) == idle, "the resumed nodes idle")
    assert all("DRAIN" not in n["states"] for n in both(cluster, "nodes", a, b))


# scontrol prints a reason's time as local time without a zone, in its own process's zone:
# given one far from UTC (a POSIX TZ, no tzdata needed), its text must still name the instant
# the backends report (epoch seconds, read as UTC)
SCONTROL_TZ, SCONTROL_ZONE = "XST-5:30", timezone(timedelta(hours=5, minutes=30))


def scontrol_reason(cluster: ClusterHandle, node: str) -> tuple[str, str, datetime]:
    """(reason, user, when) of ``node`` as `scontrol show node -o` prints it, read in the
    zone scontrol printed it in (SCONTROL_TZ)."""
    exe = argv.client("scontrol", cluster.info.client_bin)
    res = subprocess.run(
        [exe, "show", "node", "-o", node],
        env={**cluster.env(), "TZ": SCONTROL_TZ},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return show_node_reasons(res.stdout, SCONTROL_ZONE)[node]


@pytest.mark.parametrize("backend", WRITERS)
def test_a_drains_time_and_user_agree_with_scontrol(cluster: ClusterHandle, backend: str) -> None:
    """A drain through ``backend``; then every backend reports its reason_time (within 1 s
    of each other and of scontrol's `[user@time]`, inside the drain call) and reason_user
    (who drained: this process's user, or root's JWT through slurmrestd); a resumed node
    has neither."""
    node = cluster.nodes[1]
    reason = f"{TAG} {backend} at"
    before = datetime.now(UTC).replace(microsecond=0)  # Slurm keeps whole seconds
    assert call(cluster, backend, "drain", reason, node) == "ok"
    after = datetime.now(UTC)
    said, user, at = scontrol_reason(cluster, node)
    assert said == reason and before <= at <= after, (said, at, before, after)
    assert user == ("root" if backend == "rest" else pwd.getpwuid(os.geteuid()).pw_name)
    seen = {b: call(cluster, b, "nodes", node) for b in BOTH}
    for b, answer in seen.items():
        (got,) = answer
        assert got["reason"] == reason and got["reason_user"] == user, (b, got)
        when = datetime.fromisoformat(got["reason_time"])
        assert when.utcoffset() == timedelta(0) and abs(when - at) <= timedelta(seconds=1), (
            b,
            got,
            at,
        )
    assert call(cluster, backend, "resume", node) == "ok"
    wait(lambda: sinfo_states(cluster, node) == ["idle"], "the resumed node idle")
    # 22.05 and 26.05 clear the reason on resume; 24.11's JSON keeps the last one on the idle
    # node (measured: IDLE, reason and time unchanged). Either way the node is not drained,
    # so tagged_drains never counts it, and every backend says the same.
    answers = [call(cluster, b, "nodes", node)[0] for b in BOTH]
    assert all("DRAIN" not in a["states"] for a in answers), answers
    cleared = ("", None, "")
    kept = (reason, seen[backend][0]["reason_time"], user)
    told = {(a["reason"], a["reason_time"], a["reason_user"]) for a in answers}
    assert told in ({cleared}, {kept}), answers
    assert told == {cleared} or SLURM_UNDER_TEST == "24.11", answers


@pytest.mark.parametrize("backend", BACKENDS)
def test_errors_are_slurm_errors_in_slurm_words(cluster: ClusterHandle, backend: str) -> None:
    """Unknown node: an error naming it; unknown job: None (gone); a bad reason: refused."""
    err = call(cluster, backend, "drain", TAG, "nosuchnode")
    assert "error" in err and re.search(r"(?i)invalid node name|nosuchnode", err["error"]), err
    assert call(cluster, backend, "job", "999999") is None
    assert "error" in call(cluster, backend, "drain", "reason=with'quote", cluster.nodes[0])
    assert "error" in call(cluster, backend, "resume", "nosuchnode")
    assert sinfo_reasons(cluster) == {}


@pytest.mark.parametrize("backend", BACKENDS)
def test_controller_unreachable_is_an_error_not_a_gone_job(
    cluster: ClusterHandle, backend: str, tmp_path: Path
) -> None:
    """slurmctld not answering (its port closed) is a SlurmError, never "job gone" (None)."""
    conf = tmp_path / "slurm.conf"
    text = cluster.slurm_conf.read_text()
    text = re.sub(r"(?m)^SlurmctldPort=\d+", "SlurmctldPort=1", text)
    # libslurm retries for about MessageTimeout (30 s here), which pyslurm cannot cut short
    conf.write_text(re.sub(r"(?m)^MessageTimeout=\d+", "MessageTimeout=2", text))
    assert "SlurmctldPort=1\n" in conf.read_text() and "MessageTimeout=2\n" in conf.read_text()
    # rest: slurmrestd itself not answering (its socket gone), as the backend meets it
    env = {"SLURM_CONF": str(conf), "SCREENER_MINICLUSTER_REST_URL": f"unix:{tmp_path}/gone"}
    for op, args in (("job", ["1"]), ("nodes", []), ("release", ["1"])):
        out = call(cluster, backend, op, *args, env=env)
        assert isinstance(out, dict) and "error" in out, (op, out)


def test_job_fields_running_pending_array_het_agree(cluster: ClusterHandle) -> None:
    """Running (name, comment, partition, nodes), pending (BeginTime), array tasks by
    `A_T` and by their own id, het components by `H+O`: both backends, as squeue says."""
    n1, n2 = cluster.nodes[0], cluster.nodes[1]
    run = sbatch(cluster, "-J", "ior-x", "--comment=screener=on", f"-w{n1}", "--wrap", "sleep 300")
    later = sbatch(cluster, "--begin=now+3600", "--wrap", "true")
    arr = sbatch(cluster, "--array=1-2", "-N1", f"-w{n2}", "--wrap", "sleep 300")
    het = sbatch(cluster, "-N1", "--wrap", "sleep 300", ":", "-N1", "--wrap", "sleep 300")
    wait(lambda: squeue_line(cluster, run, "%T") == "RUNNING")
    job = both(cluster, "job", run)
    assert (job["name"], job["comment"], job["partition"], job["nodes"]) == (
        "ior-x",
        "screener=on",
        "debug",
        [n1],
    )
    assert job["state"] == "RUNNING" and job["restarts"] == 0
    pending = both(cluster, "job", later)
    assert (pending["state"], pending["reason"], pending["nodes"]) == ("PENDING", "BeginTime", [])
    # array tasks: `A_1` names task 1 whatever unique id Slurm gave it
    wait(lambda: squeue_line(cluster, f"{arr}_1", "%T") == "RUNNING")
    task = both(cluster, "job", f"{arr}_1")
    assert task["job_id"] == f"{arr}_1" and task["nodes"] == [n2]
    unique = squeue_line(cluster, f"{arr}_1", "%A")
    assert both(cluster, "job", unique)["nodes"] == [n2]
    assert both(cluster, "job", f"{arr}_7") is None
    # het components: each its own nodes; `H` alone is component 0
    wait(lambda: squeue_line(cluster, het, "%T").split() == ["RUNNING"] * 2)
    comp = {o: both(cluster, "job", f"{het}+{o}") for o in (0, 1)}
    assert comp[0]["nodes"] and comp[1]["nodes"] and comp[0]["nodes"] != comp[1]["nodes"]
    assert both(cluster, "job", het)["nodes"] == comp[0]["nodes"]
    said = dict(line.split() for line in squeue_line(cluster, het, "%i %N").splitlines())
    assert {f"{het}+{o}": comp[o]["nodes"] for o in (0, 1)} == {i: [n] for i, n in said.items()}, (
        said
    )


@pytest.mark.parametrize("backend", WRITERS)
def test_requeued_job_is_released_now(cluster: ClusterHandle, backend: str) -> None:
    """A requeued job waits for BeginTime; release makes it eligible and it runs again."""
    job = sbatch(cluster, "--requeue", f"-w{cluster.nodes[2]}", "--wrap", "sleep 300")
    wait(lambda: squeue_line(cluster, job, "%T") == "RUNNING")
    cluster.slurm("scontrol", "requeue", job)
    wait(lambda: squeue_line(cluster, job, "%T") == "PENDING")
    seen = both(cluster, "job", job)
    assert seen["state"] == "PENDING" and seen["restarts"] == 1, seen
    assert seen["reason"] == "BeginTime", seen
    assert call(cluster, backend, "release", job) == "ok"
    wait(lambda: squeue_line(cluster, job, "%T") == "RUNNING")
    assert both(cluster, "job", job)["restarts"] == 1


def auto_in(env: dict[str, str]) -> Any:
    """`backend = "auto"` listing nodes in exactly ``env``: the driver's JSON (it must live)."""
    res = subprocess.run(
        [sys.executable, "-m", "tests.slurm_contract_driver", "auto", "nodes"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_a_bare_environment_never_imports_pyslurm(tmp_path: Path) -> None:
    """No SLURM_CONF and no /etc/slurm/slurm.conf: `auto` says why and stays on the CLI; the
    process lives (a direct `import pyslurm` there exits it: checked below)."""
    if not HAVE_PYSLURM:
        pytest.skip(NO_PYSLURM)
    if Path("/etc/slurm/slurm.conf").exists():
        pytest.skip("this machine has /etc/slurm/slurm.conf: the environment is not bare")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    direct = subprocess.run(
        [sys.executable, "-c", "import pyslurm; print('alive')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert direct.returncode != 0 and "alive" not in direct.stdout  # why the rule exists
    out = auto_in(env)
    assert out["backend"] == "cli" and "no Slurm config" in out["why"], out
    assert "error" in out["result"]  # the CLI cannot reach Slurm either: a SlurmError


def test_a_broken_slurm_conf_never_kills_the_process(tmp_path: Path) -> None:
    """A slurm.conf libslurm cannot parse is found in the child import: CLI, with the why."""
    if not HAVE_PYSLURM:
        pytest.skip(NO_PYSLURM)
    conf = tmp_path / "slurm.conf"
    conf.write_text("garbage=[[\n")
    env = {"PATH": os.environ["PATH"], "SLURM_CONF": str(conf)}
    out = auto_in(env)
    assert out["backend"] == "cli" and "import pyslurm fails" in out["why"], out
