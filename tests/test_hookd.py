"""`screener hookd` (issue 22): the resident server that runs slurmctld's hooks with the
imports done. A hook it runs must be the hook an in-process run would be: the same exit
code, log lines, signals and stored run; whenever it cannot be used, the hook runs in its
own process and says why; it never runs a hook twice, nor code older than what is on disk.

Each test starts the real server (`screener hookd --socket ...`) and synchronises on its
own "listening on" line; the hooks are the real console script, as slurmctld runs it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from screener.hook_server.client import via_hookd
from screener.hook_server.wire import (
    ENV_SOCKET,
    FALLBACK_ENV,
    encode_request,
    package_dir,
    read_line,
)
from tests.hooked_cluster import (
    hooked_cluster,
    in_slurm_root,
    job_state,
    pace_devices,
    run_screener,
    sbatch,
    sinfo_nodes,
    wait_job,
    write_config,
)
from tests.test_prolog_failopen import JOB, SCREENER, config, hook
from tests.test_signals import fio_pids, wait_for

STALE = 75


class Hookd:
    """A running `screener hookd`; its stderr lines, read by a thread, awaited by test."""

    def __init__(self, sock: Path, env: dict[str, str] | None = None) -> None:
        self.sock = sock
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SCREENER_"))}
        self.proc = subprocess.Popen(
            # beside slurmctld, as on a site: with its Slurm's /usr (libslurm, pyslurm build,
            # scontrol); on the host's, a 22.05 pyslurm would talk to a newer slurmctld
            in_slurm_root([str(SCREENER), "hookd", "--socket", str(sock)]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**base, **(env or {})},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.started = self.wait_line("listening on", timeout=120)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line.rstrip("\n"))

    def wait_line(self, needle: str, timeout: float = 60) -> str:
        """The next server line holding ``needle`` (earlier ones are kept in ``seen``)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(left, 0.01))
            except queue.Empty:
                raise AssertionError(f"hookd never said {needle!r}; said {self.seen}") from None
            self.seen.append(line)
            if needle in line:
                return line

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture()
def hookd(tmp_path: Path) -> Iterator[Hookd]:
    server = Hookd(tmp_path / "hookd.sock")
    yield server
    server.stop()


def untimed(line: str) -> str:
    """A log line without its leading timestamp."""
    return line.split(" ", 1)[1]


def via(server: Hookd) -> dict[str, str]:
    return {ENV_SOCKET: str(server.sock)}


# ------------------------------------------------------------------ the same hook, pre-imported


def test_a_screened_job_runs_in_the_worker_with_the_hooks_own_output_and_exit(
    tmp_path: Path, hookd: Hookd
) -> None:
    env = {**JOB, "SLURM_JOB_NODELIST": socket.gethostname(), **via(hookd)}
    res = hook("prolog", config(tmp_path), env, timeout=120)
    # the worker wrote to the hook's own stderr (passed over the socket) and its log file
    assert res.returncode == 0 and "may start" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "hookd not used" not in res.stderr
    line = hookd.wait_line("prolog job 77")
    assert f"uid {os.getuid()}): exit 0 in " in line, line
    assert (tmp_path / "db.sqlite").exists()  # the run stored by the worker
    assert "may start" in (tmp_path / "prolog.log").read_text()
    # the epilog goes the same way
    res = hook("epilog", config(tmp_path), env, timeout=120)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert "exit 0" in hookd.wait_line("epilog job 77")


def test_the_exit_code_and_the_one_line_are_the_in_process_ones(
    tmp_path: Path, hookd: Hookd
) -> None:
    # fail_closed on an opted-in job with a bad restart count: exit 1 (Slurm requeues), one
    # line; and a policy that cannot be loaded: exit 0, one line. Via hookd and without.
    env = {**JOB, "SLURM_JOB_RESTART_COUNT": "abc"}
    cases = [
        (config(tmp_path, "[prolog] fail_closed = true"), 1),
        (tmp_path / "missing.toml", 0),
    ]
    for cfg, code in cases:
        alone = hook("prolog", cfg, {**env, ENV_SOCKET: "off"})
        served = hook("prolog", cfg, {**env, **via(hookd)})
        assert (alone.returncode, served.returncode) == (code, code), (alone, served)
        assert len(served.stderr.splitlines()) == 1, served.stderr
        assert untimed(served.stderr) == untimed(alone.stderr)
        assert f"exit {code} in " in hookd.wait_line("prolog job 77")


def test_hooks_at_once_each_get_their_own_worker(tmp_path: Path, hookd: Hookd) -> None:
    # A burst of job starts: 8 hooks at once (jobs that did not opt in), each its own job
    # id, log line and worker.
    cfg = config(tmp_path)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SCREENER_"))}
    procs = {
        job: subprocess.Popen(
            [SCREENER, "prolog"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **base,
                **JOB,
                **via(hookd),
                "SCREENER_CONFIG": str(cfg),
                "SLURM_JOB_ID": str(job),
                "SLURM_JOB_COMMENT": "",
            },
        )
        for job in range(100, 108)
    }
    for job, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "hookd" not in err, err
        assert f"job {job}: not screened" in err, err
    lines = [hookd.wait_line("prolog job 10") for _ in procs]
    assert sorted(line.split(" job ")[1].split()[0] for line in lines) == [str(j) for j in procs]
    assert len({line.split("(worker ")[1].split(",")[0] for line in lines}) == len(procs)
    assert all("exit 0 in " in line for line in lines), lines


def test_only_the_hooks_go_to_hookd(tmp_path: Path, hookd: Hookd) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SCREENER_")}
    res = subprocess.run(
        [SCREENER, "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **via(hookd)},
    )
    assert res.returncode == 0 and res.stdout.strip(), res
    # a request for anything else, sent by hand, is refused: it runs nothing
    reply = raw_request(hookd.sock, ["screen", "--local"])
    assert reply.startswith("R hookd runs only prolog and epilog"), reply


# ------------------------------------------------------------------ when hookd cannot be used


def refusing_socket(path: Path) -> Path:
    """A socket file nobody listens on (a server killed with SIGKILL leaves one)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()
    return path


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: p, "No such file"),
        (lambda p: p.write_text("x") and p, "Connection refused"),
        (refusing_socket, "Connection refused"),
    ],
    ids=["missing", "regular file", "dead server"],
)
def test_without_a_server_the_hook_runs_in_its_own_process_and_says_why(
    tmp_path: Path, make: object, why: str
) -> None:
    sock = make(tmp_path / "hookd.sock")  # type: ignore[operator]
    env = {**JOB, "SLURM_JOB_RESTART_COUNT": "abc", ENV_SOCKET: str(sock)}
    res = hook("prolog", config(tmp_path, "[prolog] fail_closed = true"), env)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    first, second = res.stderr.strip().splitlines()
    assert "screener hookd not used" in first and why in first, first
    assert "running in this process" in first and "SLURM_JOB_RESTART_COUNT" in second
    # "off" is no socket at all: nothing tried, nothing said
    quiet = hook("prolog", config(tmp_path), {**env, ENV_SOCKET: "off"})
    assert "hookd" not in quiet.stderr and quiet.returncode == 0, quiet.stderr


def test_a_changed_package_is_never_run_by_the_old_server(tmp_path: Path) -> None:
    # A copy of the package (the repository's is not touched), served and then edited, as
    # an upgrade of /opt/screener under a running hookd would.
    copy = tmp_path / "pkg"
    shutil.copytree(package_dir(), copy / "screener", ignore=shutil.ignore_patterns("*.pyc"))
    pythonpath = {"PYTHONPATH": str(copy)}
    server = Hookd(tmp_path / "hookd.sock", pythonpath)
    try:
        assert f"package {copy / 'screener'}" in server.started, server.started
        env = {**JOB, "SLURM_JOB_RESTART_COUNT": "abc", **via(server)}
        cfg = config(tmp_path, "[prolog] fail_closed = true")
        assert hook("prolog", cfg, {**env, **pythonpath}).returncode == 1
        assert "exit 1" in server.wait_line("prolog job 77")
        # a hook running another install of screener is not served by this one
        other = hook("prolog", cfg, env)
        assert other.returncode == 1, other.stderr
        assert f"the hook runs screener from {package_dir()}" in other.stderr, other.stderr
        # the served copy changes on disk: the hook runs the new code itself, and the server
        # exits (systemd restarts it on the new code)
        policy = copy / "screener" / "policy.py"
        st = policy.stat()
        os.utime(policy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        res = hook("prolog", cfg, {**env, **pythonpath})
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert "hookd not used (stale: screener in" in res.stderr, res.stderr
        assert server.proc.wait(timeout=30) == STALE
        assert not server.sock.exists()
    finally:
        server.stop()


def in_child(work: Callable[[], str], preexec: Callable[[], None] | None = None) -> str:
    """``work()`` in a forked child (after ``preexec``, e.g. a setuid): what it returned, or
    ``error: ...``. The child uses only sockets and os calls, then _exit."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            if preexec:
                preexec()
            os.write(write, work().encode())
            code = 0
        except BaseException as exc:
            os.write(write, f"error: {exc}".encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        reply = f.read().decode()
    os.waitpid(pid, 0)
    return reply


def raw_request(sock: Path, argv: list[str], preexec: Callable[[], None] | None = None) -> str:
    """Send one request by hand (as uid ``preexec`` sets, in a child); the server's reply."""

    def send() -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(str(sock))
            body = encode_request(argv, {}, "/", package_dir())
            # a refusing server replies and closes before it reads: the send may break
            # (EPIPE, seen in CI) while its reply waits to be read, as the client does
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                socket.send_fds(s, [body], [0, 1, 2])
            word, rest = read_line(s.makefile("rb"))
            return f"{word} {rest}"

    return in_child(send, preexec)


def test_the_socket_is_private_and_another_user_is_refused() -> None:
    # The socket is 0600; were it opened up by mistake, the server still refuses any uid
    # but its own and root's (SO_PEERCRED), before reading the request.
    d = Path(tempfile.mkdtemp(prefix="screener-hookd-"))
    d.chmod(0o711)  # traversable by uid 65534
    server = Hookd(d / "hookd.sock")
    try:
        assert server.sock.stat().st_mode & 0o777 == 0o600
        server.sock.chmod(0o666)

        def as_nobody() -> None:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)

        reply = raw_request(server.sock, ["prolog"], as_nobody)
        assert reply.startswith("R uid 65534 may not use this hookd"), reply
        # the hook's own client, as that uid: it runs the hook itself and says why
        why = _client_fallback(server.sock, as_nobody)
        assert "may not use this hookd" in why and "Broken pipe" not in why, why
    finally:
        server.stop()
        shutil.rmtree(d)


def _client_fallback(sock: Path, preexec: Callable[[], None]) -> str:
    """``via_hookd`` run in a child as ``preexec`` sets: why it fell back ("" if it did not)."""

    def client() -> str:
        os.environ[ENV_SOCKET] = str(sock)
        os.environ.pop(FALLBACK_ENV, None)
        # more than the socket holds: the send is still going when the server refuses and
        # closes, so it breaks (EPIPE) every time, not only in a rare race
        os.environ["SCREENER_TEST_PADDING"] = "x" * 1_000_000
        got = via_hookd(["prolog"])
        return os.environ.get(FALLBACK_ENV, "") if got is None else f"ran: {got}"

    return in_child(client, preexec)


# ------------------------------------------------------------------ signals and a vanished hook


def long_probe(tmp_path: Path, server: Hookd) -> subprocess.Popen[str]:
    """A screened prolog whose fio runs 120 s, started through ``server``; returns once fio
    is measuring."""
    cfg = config(tmp_path)
    text = cfg.read_text().replace("runtime_s = 0.3", "runtime_s = 120")
    cfg.write_text(text.replace("budget_s = 20", "budget_s = 600"))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SCREENER_"))}
    env = {**JOB, "SLURM_JOB_NODELIST": socket.gethostname(), **via(server)}
    proc = subprocess.Popen(
        [SCREENER, "prolog"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**base, "SCREENER_CONFIG": str(cfg), **env},
    )
    wait_for(
        lambda: any(
            b"--time_based" in Path(f"/proc/{p}/cmdline").read_bytes() for p in fio_pids(tmp_path)
        ),
        120,
        "fio to start",
    )
    return proc


def test_sigterm_to_the_hook_stops_the_run_as_in_process(tmp_path: Path, hookd: Hookd) -> None:
    # Slurm's PrologEpilogTimeout: SIGTERM to the hook. Forwarded, the worker stops fio and
    # exits 143 with one line, as the in-process hook does (docs/slurm.md).
    proc = long_probe(tmp_path, hookd)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=100)
    assert proc.returncode == 143, err
    assert "terminated" in err and "Traceback" not in err, err
    assert fio_pids(tmp_path) == []
    assert "exit 143" in hookd.wait_line("prolog job 77")


def test_a_hook_killed_outright_stops_its_worker(tmp_path: Path, hookd: Hookd) -> None:
    # SIGKILL cannot be forwarded: the worker sees the connection close and stops the run
    # as on SIGTERM, instead of probing on for a hook nobody waits for.
    proc = long_probe(tmp_path, hookd)
    proc.kill()
    proc.communicate(timeout=30)
    assert "exit 143" in hookd.wait_line("prolog job 77", timeout=100)
    wait_for(lambda: fio_pids(tmp_path) == [], 60, "fio to stop")


# ------------------------------------------------------------------ slurmctld, through hookd


def hookd_cluster(tmp_path: Path, nodes: int, **sections: Any) -> Iterator[tuple[Hookd, Any, Path]]:
    """A hooked cluster whose every hook goes through a fresh hookd: (server, cluster,
    prolog log), its policy written (``sections``: write_config's); the server stopped at
    the end."""
    server = Hookd(tmp_path / "hookd.sock")
    cfg = tmp_path / "screener.toml"
    try:
        for cluster in hooked_cluster(tmp_path, cfg, nodes=nodes, hookd=str(server.sock)):
            log = tmp_path / "prolog.log"
            write_config(cfg, cluster, f"sqlite:///{tmp_path}/screener.db", log, **sections)
            yield server, cluster, log
    finally:
        server.stop()


def _screened(cluster: Any, out: Path, n: int) -> str:
    """A screened n-node job writing its hostnames to ``out`` (%j: its id)."""
    return sbatch(
        cluster, "-N", str(n), "-o", str(out), "--comment", "screener=on",
        "--wrap", "srun hostname",
    )  # fmt: skip


def _running(cluster: Any, job_id: str) -> bool:
    return bool(job_state(cluster, job_id)["job_state"] == "RUNNING")


def _ran_on(server: Hookd, cluster: Any, log: Path, out: Path, job_id: str) -> set[str]:
    """The job run to its end (its epilog too, through hookd): the nodes it ran on."""
    done = wait_job(cluster, job_id)
    assert done["job_state"] == "COMPLETED", log.read_text()
    assert "exit 0 in " in server.wait_line(f"epilog job {job_id}")
    return set(Path(str(out).replace("%j", job_id)).read_text().split())


@pytest.mark.cluster
def test_slurmctld_hooks_through_hookd_drain_and_requeue(tmp_path: Path) -> None:
    # The action path end to end with every hook run served by hookd: the slow node is
    # drained, the job requeued and run on healthy nodes; each hook run is in the server's
    # journal with its exit code, none fell back to an in-process run.
    for server, cluster, log in hookd_cluster(tmp_path, nodes=4):
        slow = cluster.nodes[0]  # select/linear allocates the lowest idle nodes first
        cluster.inject(slow, "slow_read", "20M")
        job_id = _screened(cluster, tmp_path / "hosts-%j.txt", 3)
        job = wait_job(cluster, job_id)
        text = log.read_text()
        assert job["job_state"] == "COMPLETED" and job["restart_cnt"] >= 1, text
        ran = set((tmp_path / f"hosts-{job_id}.txt").read_text().split())
        assert len(ran) == 3 and slow not in ran, (ran, text)
        assert "DRAIN" in sinfo_nodes(cluster)[slow]["state_flags"]
        assert "hookd not used" not in text, text
        assert "exit 1 in " in server.wait_line(f"prolog job {job_id}")  # requeue
        assert "exit 0 in " in server.wait_line(f"prolog job {job_id}")  # healthy nodes
        assert "exit 0 in " in server.wait_line(f"epilog job {job_id}")


@pytest.mark.cluster
def test_in_job_iostat_starts_after_the_exit_and_a_short_job_leaves_nothing(
    tmp_path: Path,
) -> None:
    # Through hookd the prolog sends its exit code first and starts in-job iostat after
    # (the job does not wait for that SSH round). A job of a moment may end before the
    # start is done: its epilog waits on the job's lock, then stops what was started, so
    # no detached iostat (nor its private directory) outlives the job. Both ways in: a
    # probed allocation (the screen's facts) and an all-fresh one (sentinels only).
    for server, cluster, log in hookd_cluster(tmp_path, nodes=3):
        for _ in ("probed", "fresh"):
            job_id = sbatch(cluster, "-N", "3", "--comment", "screener=on", "--wrap", "true")
            assert "exit 0 in " in server.wait_line(f"prolog job {job_id}", timeout=240)
            assert "1 deferred step(s)" in server.wait_line(f"prolog job {job_id}")
            assert "exit 0 in " in server.wait_line(f"epilog job {job_id}", timeout=240)
            text = log.read_text()
            assert "in-job iostat starts once Slurm has the exit code" in text, text
            started = text.rindex("in-job iostat started on 3 of 3 nodes")
            first_stop = text.index(f"screener epilog: job {job_id}:")
            assert started < first_stop, text  # the stop came after the start
            epilog = [x for x in text.splitlines() if f"screener epilog: job {job_id}:" in x]
            assert any("iostat ran on" in x or "stored as run" in x for x in epilog), text
            assert not any("not started" in x for x in epilog), text
            left = sorted(Path("/tmp/.screener").glob(f"iostat-{job_id}-*"))
            assert left == [], (left, epilog)
        assert "fast path: " in text, text  # the second job's nodes were fresh


@pytest.mark.cluster
def test_an_admins_week_through_hookd(tmp_path: Path) -> None:
    # What an admin meets after the first drain, every hook served by hookd: the drained
    # node resumed by hand while still slow is drained again by the next job that gets it
    # (the second offence); a node that passed minutes ago turns slow and the next job,
    # a 1-node one, is kept off it by its sentinel and the full probe (too small for a
    # triage: the fleet's figures are its peers). Each job ends on healthy nodes.
    # Two distinct slow nodes of the 4 probed lately would be a shared cause to the shipped
    # small-job guard (max_drain_fraction 0.34: held, nobody drained, as test_guard_cluster
    # shows); this site lets a 1-node job drain up to half of them.
    guard = {"partition_max_drain_fraction": 0.5, "max_drain_fraction": 0.5}
    for server, cluster, log in hookd_cluster(tmp_path, nodes=5, slurm=guard):
        pace_devices(cluster, list(cluster.nodes))  # the device sets each node's rate
        first, second = cluster.nodes[0], cluster.nodes[1]
        out = tmp_path / "hosts-%j.txt"

        cluster.inject(first, "slow_read", "20M")
        a = _screened(cluster, out, 3)  # select/linear: the lowest idle nodes, node01 too
        assert first not in _ran_on(server, cluster, log, out, a)
        assert "DRAIN" in sinfo_nodes(cluster)[first]["state_flags"]

        resumed = run_screener(cluster, tmp_path / "screener.toml", "resume", first)
        assert resumed.returncode == 0, resumed.stderr  # by hand, although still slow
        # two healthy nodes held by an unscreened job, so the next one must take node01
        blocker = sbatch(cluster, "-w", ",".join(cluster.nodes[3:]), "--wrap", "sleep 600")
        wait_for(functools.partial(_running, cluster, blocker), 120, "the blocker to run")
        b = _screened(cluster, out, 3)
        assert "exit 1 in " in server.wait_line(f"prolog job {b}", timeout=240)  # drained
        cluster.slurm("scancel", blocker)
        assert first not in _ran_on(server, cluster, log, out, b)
        assert "DRAIN" in sinfo_nodes(cluster)[first]["state_flags"]
        text = log.read_text()
        assert text.count(f"drained {first}: screener: rd ") == 2, text

        cluster.inject(second, "slow_read", "12M")  # it passed in job a or b, minutes ago
        c = _screened(cluster, out, 1)  # the lowest idle node: node02
        hosts = _ran_on(server, cluster, log, out, c)
        text = log.read_text()
        assert len(hosts) == 1 and second not in hosts, (hosts, text)
        # its sentinel (dd's once it has 2 readings of its own, fio's before) saw it
        assert re.search(rf"{second}: (dd )?sentinel read ", text), text
        assert f"drained {second}: " in text, text
        assert "DRAIN" in sinfo_nodes(cluster)[second]["state_flags"]
        assert "hookd not used" not in text, text
