"""Processes and cgroups the minicluster owns: run a command, launch a recorded daemon, tell
whether a recorded pid is still *that* process (pid + start time), stop it, empty a cgroup."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from deploy.minicluster import argv
from deploy.minicluster.spec import ClusterError

BLKIO = Path("/sys/fs/cgroup/blkio")
T = TypeVar("T")


@dataclass(frozen=True)
class Proc:
    """A process we started: pid plus its kernel start time, so pid reuse is never mistaken."""

    pid: int
    start: int

    def to_json(self) -> dict[str, int]:
        return {"pid": self.pid, "start": self.start}

    @classmethod
    def from_json(cls, data: dict[str, int]) -> Proc:
        return cls(pid=int(data["pid"]), start=int(data["start"]))


def run(cmd: list[str], timeout: float = 60.0, env: dict[str, str] | None = None) -> str:
    """Run a command to completion; stdout on success, ClusterError with stderr's last line
    otherwise. On timeout the whole process group is killed."""
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # own group, so a timeout kills helpers too
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ClusterError(f"{Path(cmd[0]).name} did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        raise ClusterError(f"{_describe(cmd)} failed (exit {proc.returncode}): {last_line(err)}")
    return out


def _describe(cmd: list[str]) -> str:
    """`nsenter ... mount` reads better as `mount (in node)`."""
    name = Path(cmd[0]).name
    if name == "nsenter" and "--" in cmd:
        return f"{Path(cmd[cmd.index('--') + 1]).name} (inside node)"
    return name


def last_line(text: str) -> str:
    """Last non-empty line, for one-line error messages."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def tail(path: Path) -> str:
    """Last line of a log file, or a note that there is none."""
    try:
        return last_line(path.read_text(errors="replace")[-4000:])
    except FileNotFoundError:
        return f"(no log at {path})"


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) from /proc/PID/stat, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # comm may contain spaces: skip past it
    return fields[0], int(fields[19])


def start_time(pid: int) -> int | None:
    """Kernel start time of a running process, or None if it is gone or a zombie."""
    st = _stat(pid)
    return None if st is None or st[0] in ("Z", "X") else st[1]


def reaped(proc: Proc) -> bool:
    """True once the process is gone from /proc entirely (not even a zombie awaiting init)."""
    st = _stat(proc.pid)
    return st is None or st[1] != proc.start


def alive(proc: Proc | None) -> bool:
    """True while the recorded process runs (same pid *and* same start time)."""
    return proc is not None and start_time(proc.pid) == proc.start


def wait_until(
    what: str,
    check: Callable[[], T | None],
    deadline: float,
    hint: Callable[[], str] | None = None,
) -> T:
    """Poll a real condition until it holds or the deadline passes (ClusterError naming it;
    `hint` adds e.g. the last log line, read at that moment)."""
    delay = 0.02
    while True:
        result = check()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise ClusterError(f"timed out waiting for {what}" + (f": {hint()}" if hint else ""))
        time.sleep(delay)  # back-off between polls of the condition, not a stand-in for it
        delay = min(delay * 1.5, 0.25)


def launch(
    name: str, cmd: list[str], cgroup: Path, pidfile: Path, log: Path, deadline: float
) -> Proc:
    """Start a detached daemon inside `cgroup`; returns its record once its pid is known."""
    pidfile.unlink(missing_ok=True)
    with open(log, "ab") as out:
        subprocess.run(
            argv.launch(cgroup / "cgroup.procs", pidfile, cmd),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            check=True,
            timeout=30,
        )

    def read_pid() -> int | None:
        try:
            text = pidfile.read_text()
        except FileNotFoundError:
            return None
        return int(text) if text.endswith("\n") and text.strip().isdigit() else None

    pid = wait_until(f"{name} to start", read_pid, deadline, lambda: tail(log))
    st = start_time(pid)
    if st is None:
        raise ClusterError(f"{name} exited at once: {tail(log)}")
    return Proc(pid=pid, start=st)


def stop(proc: Proc | None, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; returns when the process is gone."""
    if not alive(proc):
        return
    assert proc is not None
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        with contextlib.suppress(ClusterError):
            wait_until(f"pid {proc.pid} to exit", lambda: not alive(proc), time.monotonic() + wait)
            return
    raise ClusterError(f"pid {proc.pid} survived SIGKILL")


# -- blkio cgroups ------------------------------------------------------------------------


def cgroup_path(name: str) -> Path:
    return BLKIO / name


def cgroup_create(name: str) -> Path:
    """Create (or reuse) one of our blkio cgroups."""
    path = cgroup_path(name)
    path.mkdir(exist_ok=True)
    return path


def cgroup_pids(path: Path) -> list[int]:
    """Processes currently in the cgroup (none if it does not exist)."""
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except FileNotFoundError:
        return []


def cgroup_kill_all(path: Path, deadline: float) -> list[Proc]:
    """SIGKILL everything in one of our cgroups until it is empty (children forked meanwhile
    land in the same cgroup, so repeating converges). Returns what it killed."""
    killed: dict[int, Proc] = {}

    def empty() -> bool:
        pids = cgroup_pids(path)
        for pid in pids:
            st = start_time(pid)
            if st is not None:
                killed.setdefault(pid, Proc(pid, st))
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return not pids

    wait_until(f"cgroup {path.name} to empty", empty, deadline)
    return list(killed.values())


def cgroup_remove(path: Path, deadline: float) -> None:
    """rmdir the cgroup once the kernel agrees it is empty."""

    def removed() -> bool:
        try:
            path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True

    wait_until(f"cgroup {path.name} to be removable", removed, deadline)


def throttle_file(kind: str) -> str:
    """blkio throttle file for a slow_* fault."""
    return {
        "slow_read": "blkio.throttle.read_bps_device",
        "slow_randread": "blkio.throttle.read_iops_device",
        "slow_write": "blkio.throttle.write_bps_device",
    }[kind]


def set_throttle(cgroup: Path, kind: str, devnum: str, value: int) -> None:
    """Write `MAJ:MIN value` (0 removes the rule) to the cgroup's throttle file."""
    (cgroup / throttle_file(kind)).write_text(f"{devnum} {value}\n")


def loop_devnum(device: str) -> str:
    """`7:3` for /dev/loop3, from sysfs."""
    return Path(f"/sys/block/{Path(device).name}/dev").read_text().strip()


def loop_backing(device: str) -> str | None:
    """The file behind a loop device, or None if it is detached."""
    try:
        text = Path(f"/sys/block/{Path(device).name}/loop/backing_file").read_text().strip()
    except (FileNotFoundError, OSError):
        return None
    return text.removesuffix(" (deleted)")
