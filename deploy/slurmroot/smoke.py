"""A one-node cluster of a root's Slurm, by hand: the proof that the /usr bind is enough.

    python -m deploy.slurmroot.smoke --version 24.11 [--port 20000] [--capture DIR]

One munged (the root's, on a private socket), one slurmctld and one slurmd (`-N node01`),
all with the root's /usr, configured by the minicluster's own slurm.conf renderer (so its
warnings are the ones a real minicluster would get). The controller and the node each get
a namespace holder (`sleep infinity` after the binds; the node's with its own UTS name),
and every daemon enters one with nsenter, as deploy/minicluster does. Clients run through
exec_argv (a fresh namespace per call). Everything it starts is killed at the end, every
process still in one of its namespaces included, and the state dir is removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from deploy.minicluster import render
from deploy.minicluster.spec import ClusterInfo, ClusterSpec
from deploy.slurmroot import EXEC_SCRIPT, SlurmRoot, exec_argv, find

NODE = "node01"


def holder_argv(root: Path, uts: bool) -> list[str]:
    """A namespace owner with the root's /usr bound: daemons nsenter it (pid = sleep's)."""
    return [
        "unshare",
        "--mount",  # the binds live only here
        *(["--uts"] if uts else []),  # a node's own hostname
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        EXEC_SCRIPT,
        "slurmroot-holder",
        str(root),
        "sleep",  # resolved after the binds: the root's sleep
        "infinity",
    ]


def nsenter_argv(pid: int, cmd: list[str], uts: bool) -> list[str]:
    return ["nsenter", "-t", str(pid), "-m", *(["-u"] if uts else []), "--", *cmd]


class Smoke:
    def __init__(self, root: SlurmRoot, port: int, state: Path) -> None:
        self.root = root
        self.state = state
        self.info = ClusterInfo(state, ClusterSpec(nodes=1, slurm_port_base=port))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = {**os.environ, "SLURM_CONF": str(self.info.slurm_conf)}
        self.timings: dict[str, float] = {}

    # -- processes ----------------------------------------------------------------------------
    def start(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.info.logs_dir / f"{name}.out", "ab")  # noqa: SIM115 (lives with proc)
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
        self.procs[name] = proc
        return proc

    def client(self, cmd: list[str], timeout: float = 60.0, check: bool = True) -> str:
        """A Slurm client with the root's /usr, in a fresh namespace."""
        res = subprocess.run(
            exec_argv(self.root.path, cmd),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and res.returncode != 0:
            raise RuntimeError(f"{cmd[0]} exit {res.returncode}: {res.stderr.strip()}")
        return res.stdout + (res.stderr if not check else "")

    def wait(self, what: str, cond: Callable[[], bool], timeout: float = 60.0) -> float:
        t0 = time.monotonic()
        while not cond():
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited {p.returncode} while waiting for {what}")
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.1)
        self.timings[what] = round(time.monotonic() - t0, 2)
        return self.timings[what]

    # -- bring-up -----------------------------------------------------------------------------
    def up(self) -> None:
        info = self.info
        for d in (info.logs_dir, info.slurm_dir / "state", info.slurm_dir / "spool" / NODE):
            d.mkdir(parents=True, exist_ok=True)
        info.munge_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = info.munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        prolog = self.state / "prolog.sh"
        prolog.write_text(
            "#!/bin/sh\n"
            f"exec >>{self.state / 'prolog.out'} 2>&1\n"
            # slurmctld does not hand SLURM_CONF to its hooks (minicluster's wrapper does)
            f"SLURM_CONF={info.slurm_conf}; export SLURM_CONF\n"
            'echo "prolog job=$SLURM_JOB_ID"\n'
            "scontrol -V\n"
            "ldd --version | head -1\n"
        )
        prolog.chmod(0o755)
        info.slurm_conf.write_text(render.slurm_conf(info, 2, prolog, None))

        ctl = self.start("ctl-holder", holder_argv(self.root.path, uts=False))
        node = self.start("node-holder", holder_argv(self.root.path, uts=True))
        self.wait("holders to bind /usr", lambda: _usr_bound(ctl.pid) and _usr_bound(node.pid))
        subprocess.run(nsenter_argv(node.pid, ["hostname", NODE], uts=True), check=True)
        self.start(
            "munged",
            nsenter_argv(
                ctl.pid,
                [
                    "munged",
                    "--foreground",
                    "--force",
                    f"--socket={info.munge_socket}",
                    f"--key-file={key}",
                    f"--pid-file={info.munge_dir / 'munged.pid'}",
                    f"--seed-file={info.munge_dir / 'munged.seed'}",
                    f"--log-file={info.munge_dir / 'munged.log'}",
                ],
                uts=False,
            ),
        )
        self.wait("munged socket", info.munge_socket.exists)
        self.start(
            "slurmctld",
            nsenter_argv(ctl.pid, ["slurmctld", "-D", "-f", str(info.slurm_conf)], False),
        )
        self.wait("slurmctld to listen", lambda: _listening(info.slurmctld_port))
        self.start(
            "slurmd",
            nsenter_argv(node.pid, ["slurmd", "-D", "-N", NODE, "-f", str(info.slurm_conf)], True),
        )
        self.wait("node01 idle", lambda: "idle" in self.sinfo_state(), timeout=90)

    def sinfo_state(self) -> str:
        return self.client(["sinfo", "--noheader", "--Node", "--format=%N %T"], check=False)

    # -- the proof ----------------------------------------------------------------------------
    def exercise(self, capture: Path | None) -> dict[str, object]:
        out: dict[str, object] = {}
        t0 = time.monotonic()
        out["srun_hostname"] = self.client(["srun", "-N1", "hostname"]).strip()
        out["srun_seconds"] = round(time.monotonic() - t0, 2)
        out["srun_python"] = self.client(
            [
                "srun",
                "-N1",
                sys.executable,
                "-c",
                "import platform, sqlalchemy, asyncssh, psycopg, screener;"
                "print(platform.libc_ver())",
            ]
        ).strip()
        done = self.state / "batch.out"
        job = self.client(
            [
                "sbatch",
                "--parsable",
                f"--chdir={self.state}",
                f"--output={done}",
                "--wrap",
                "hostname; cat /etc/os-release",
            ]
        ).strip()
        self.wait("batch job output", lambda: done.exists() and "node01" in done.read_text())
        out["sbatch_job"] = job
        out["sbatch_output_first_line"] = done.read_text().splitlines()[0]
        # A running job with screener's comment, for the JSON samples.
        running = self.client(
            [
                "sbatch",
                "--parsable",
                "--comment=screener=on",
                "--job-name=ior",
                f"--chdir={self.state}",  # its slurm-N.out lands in the state dir
                "--wrap",
                "sleep 60",
            ]
        ).strip()
        self.wait(
            "job running", lambda: "R" in self.client(["squeue", "-h", "-j", running, "-o", "%t"])
        )
        samples = {
            "squeue.json": ["squeue", "--json"],
            # -N as screener's CLI backend runs it (cli_backend.sinfo_argv: 23.02+ group nodes
            # alike but for their reason without it; one node here, so the shape is the same)
            "sinfo.json": ["sinfo", "--json", "-N"],
            "scontrol_show_node.txt": ["scontrol", "show", "node", NODE],
            "scontrol_show_job.txt": ["scontrol", "show", "job", "-d", running],
            "scontrol_version.txt": ["scontrol", "-V"],
        }
        texts = {name: self.client(cmd) for name, cmd in samples.items()}
        self.client(
            [
                "scontrol",
                "update",
                f"nodename={NODE}",
                "state=drain",
                "reason=screener: rd 0.05x peers r42",
            ]
        )
        texts["sinfo_drained.json"] = self.client(["sinfo", "--json", "-N"])
        texts["scontrol_show_node_drained.txt"] = self.client(["scontrol", "show", "node", NODE])
        self.client(["scancel", running])
        self.client(["scontrol", "update", f"nodename={NODE}", "state=resume"])
        meta = json.loads(texts["sinfo.json"]).get("meta", {})
        out["sinfo_json_meta_slurm"] = meta.get("slurm")
        out["prolog"] = (self.state / "prolog.out").read_text().strip().splitlines()
        if capture is not None:
            capture.mkdir(parents=True, exist_ok=True)
            for name, text in texts.items():
                (capture / name).write_text(text)
        # Per-call cost of a client: fresh namespace + 3 binds vs nsenter into the holder.
        t0 = time.monotonic()
        for _ in range(5):
            self.client(["scontrol", "-V"])
        out["client_exec_argv_ms"] = round((time.monotonic() - t0) / 5 * 1000)
        ctl = self.procs["ctl-holder"].pid
        t0 = time.monotonic()
        for _ in range(5):
            subprocess.run(
                nsenter_argv(ctl, ["scontrol", "-V"], False),
                env=self.env,
                check=True,
                capture_output=True,
            )
        out["client_nsenter_ms"] = round((time.monotonic() - t0) / 5 * 1000)
        out["log_warnings"] = self.log_warnings()
        return out

    def log_warnings(self) -> list[str]:
        found = []
        for name in ("slurmctld.log", f"slurmd.{NODE}.log"):
            path = self.info.logs_dir / name
            if path.exists():
                for line in path.read_text(errors="replace").splitlines():
                    low = line.lower()
                    if "error" in low or "warn" in low or "deprecat" in low or "ignor" in low:
                        found.append(f"{name}: {line}")
        return found

    # -- teardown -----------------------------------------------------------------------------
    def down(self) -> list[int]:
        """Kill every process in our namespaces (job steps included), then the daemons."""
        namespaces = set()
        for name in ("ctl-holder", "node-holder"):
            p = self.procs.get(name)
            if p is not None and p.poll() is None:
                with contextlib.suppress(OSError):
                    namespaces.add(os.readlink(f"/proc/{p.pid}/ns/mnt"))
        killed = []
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in _pids_in(namespaces) | {
                p.pid for p in self.procs.values() if p.poll() is None
            }:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                    killed.append(pid)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and (
                _pids_in(namespaces) or any(p.poll() is None for p in self.procs.values())
            ):
                time.sleep(0.1)
        return sorted(set(killed))


def _usr_bound(pid: int) -> bool:
    try:
        info = Path(f"/proc/{pid}/mountinfo").read_text()
    except OSError:
        return False
    return any(line.split()[4] == "/usr" for line in info.splitlines())


def _listening(port: int) -> bool:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for row in Path(table).read_text().splitlines()[1:]:
                f = row.split()
                if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                    return True
    return False


def _pids_in(namespaces: set[str]) -> set[int]:
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/ns/mnt") in namespaces:
                    pids.add(int(entry))
    return pids


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.slurmroot.smoke", description=__doc__)
    parser.add_argument("--version", required=True)
    parser.add_argument("--port", type=int, default=20000, help="slurmctld; slurmd = +1")
    parser.add_argument("--capture", type=Path, help="write the JSON/text samples here")
    parser.add_argument("--keep", action="store_true", help="keep the state dir (logs)")
    ns = parser.parse_args(args)
    root = find(ns.version)
    state = Path(tempfile.mkdtemp(prefix=f"slurmroot-smoke-{ns.version}-"))
    smoke = Smoke(root, ns.port, state)
    result: dict[str, object] = {"root": str(root.path), "slurm": root.stamp.slurm}
    try:
        t0 = time.monotonic()
        smoke.up()
        result["up_seconds"] = round(time.monotonic() - t0, 2)
        result.update(smoke.exercise(ns.capture))
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["log_warnings"] = smoke.log_warnings()
        for log in sorted(smoke.info.logs_dir.glob("*")):
            tail = log.read_text(errors="replace").splitlines()[-8:]
            result[f"tail {log.name}"] = tail
    finally:
        result["killed"] = len(smoke.down())
        result["timings"] = smoke.timings
        if ns.keep:
            result["state"] = str(state)
        else:
            shutil.rmtree(state, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
