"""Killed mid-run (issue 11): SIGTERM (Slurm's PrologEpilogTimeout), SIGINT and SIGKILL.

The real console script screens this machine with a long fio run; the test finds that fio
by its command line (the test's own target directory) and signals screener. Afterwards no
fio of the run is left, the run is stored "failed", never "running".
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import cli_fork

SCREENER = [sys.executable, "-m", "screener.cli"]


def fio_pids(target: Path) -> list[int]:
    """fio processes working under ``target`` (found by argv[0] and their cwd: fio runs in
    screener's private directory there with a relative file name; for the test only)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(d / "cwd")
        except OSError:
            continue
        if argv and argv[0].endswith(b"fio") and Path(cwd).is_relative_to(target):
            pids.append(int(d.name))
    return pids


def tagged(pid: int) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for e in env:
        if e.startswith(b"SCREENER_RUN="):
            return e.split(b"=", 1)[1].decode()
    return None


def wait_for(cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def start(tmp_path: Path, runtime_s: float = 120.0) -> tuple[subprocess.Popen[str], Path, Path]:
    target = tmp_path / "target"
    target.mkdir(exist_ok=True)
    db = tmp_path / "db.sqlite"
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f"[probe]\nsize_mib = 16\nruntime_s = {runtime_s}\nramp_s = 0.2\nrand_read = false\n"
        f'[store]\nspool_dir = "{tmp_path}/spool"\n'
    )
    proc = subprocess.Popen(
        [*SCREENER, "--config", str(cfg), "screen", "--local", "--target", str(target)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SCREENER_DATABASE_URL": f"sqlite:///{db}"},
        # A test run started in the background (`make test &`) inherits SIGINT ignored, and
        # Python then keeps ignoring it: give screener the default disposition, as a shell
        # in the foreground does.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # The measured run (not the layout) has --runtime: wait until it is running.
    wait_for(
        lambda: any(
            b"--time_based" in Path(f"/proc/{p}/cmdline").read_bytes() for p in fio_pids(target)
        ),
        120,
        "fio to start",
    )
    return proc, target, db


def runs(db: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(db) as con:
        return [(int(i), str(s)) for i, s in con.execute("select id, status from runs")]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_stops_fio_and_marks_the_run_failed(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    proc, target, db = start(tmp_path)
    (fio,) = [
        p for p in fio_pids(target) if b"--time_based" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    tag = tagged(fio)
    assert tag, "local fio carries the run tag"
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=100)
    took = time.monotonic() - sent
    assert proc.returncode == code, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    # Generous for a loaded CI machine; waiting for fio would take its 120 s.
    assert took < 60, f"took {took:.1f} s: waited for fio instead of stopping it"
    assert fio_pids(target) == []
    assert runs(db) == [(1, "failed")]
    with sqlite3.connect(db) as con:
        (policy,) = con.execute("select policy from runs").fetchone()
    assert json.loads(policy)["run_tag"] == tag
    assert not list((tmp_path / "spool").glob("live-*"))


def test_sigkill_is_cleaned_up_by_the_next_run(tmp_path: Path) -> None:
    proc, target, db = start(tmp_path)
    (fio,) = [
        p for p in fio_pids(target) if b"--time_based" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    proc.kill()
    proc.communicate(timeout=30)
    # SIGKILL: nothing ran in screener. fio (own session) keeps running, the run is "running".
    assert fio in fio_pids(target)
    assert runs(db) == [(1, "running")]
    assert len(list((tmp_path / "spool").glob("live-*.json"))) == 1
    # The next run, on the same spool: kills the tagged fio by pid, marks run 1 failed.
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        "[probe]\nsize_mib = 16\nruntime_s = 0.5\nramp_s = 0.2\nrand_read = false\n"
        f'[store]\nspool_dir = "{tmp_path}/spool"\n'
    )
    res = cli_fork.run(
        ["--config", str(cfg), "screen", "--local", "--target", str(target)],
        timeout=120,
        env={**os.environ, "SCREENER_DATABASE_URL": f"sqlite:///{db}"},
    )
    assert res.returncode in (0, 3), res.stderr
    assert not Path(f"/proc/{fio}").exists() or fio not in fio_pids(target)
    assert runs(db) == [(1, "failed"), (2, "done")]
    assert not list((tmp_path / "spool").glob("live-*"))


def test_a_users_own_fio_is_never_touched(tmp_path: Path) -> None:
    # A fio that is not screener's (no run tag) survives a SIGTERMed run and its cleanup.
    other = tmp_path / "users"
    other.mkdir()
    argv = ["fio", "--name=u", f"--filename={other}/f", "--size=1M", "--rw=read"]
    user_fio = subprocess.Popen(
        [*argv, "--time_based", "--runtime=120", "--output=/dev/null"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        proc, target, _ = start(tmp_path)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        assert proc.returncode == 143
        assert user_fio.poll() is None
        assert fio_pids(target) == []
    finally:
        user_fio.kill()
        user_fio.wait()
