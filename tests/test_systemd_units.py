"""The systemd units of deploy/systemd/ pass `systemd-analyze verify` (no warning at all:
an unknown key or a bad value is only a warning there, so the test wants silence), and
they say what docs/admin.md promises: hardening, own users, the timer's spread."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
UNITS = ROOT / "deploy" / "systemd"
NAMES = (
    "screener-exporter.service",
    "screener-sweep.service",
    "screener-sweep.timer",
    "screener-rolling.service",
    "screener-rolling.timer",
    "screener-hookd.service",
)
SYSTEM_UNITS = Path("/usr/lib/systemd/system")


def _unit(name: str) -> configparser.ConfigParser:
    """A unit file as sections of keys (a key given twice keeps its last value)."""
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read_string((UNITS / name).read_text())
    return parser


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An image root for `systemd-analyze verify --root`: the host's own system units (the
    targets ours are ordered against), ours in /etc/systemd/system, and an executable at
    /opt/screener/bin/screener (verify checks that ExecStart's program exists)."""
    if shutil.which("systemd-analyze") is None or not SYSTEM_UNITS.is_dir():
        pytest.skip("systemd is not installed here: systemd-analyze and its units are missing")
    shutil.copytree(SYSTEM_UNITS, tmp_path / "usr/lib/systemd/system", symlinks=True)
    etc = tmp_path / "etc/systemd/system"
    etc.mkdir(parents=True)
    for name in NAMES:
        shutil.copy(UNITS / name, etc / name)
    program = tmp_path / "opt/screener/bin/screener"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    return tmp_path


def _verify(root: Path, *names: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", f"--root={root}", *names],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_units_pass_systemd_analyze_verify_without_a_warning(root: Path) -> None:
    done = _verify(root, *NAMES)
    assert done.returncode == 0, done.stderr
    assert done.stdout + done.stderr == ""


def test_verify_does_catch_a_bad_unit(root: Path) -> None:
    """The check above can fail: a bad value is reported with its line."""
    unit = root / "etc/systemd/system/screener-exporter.service"
    unit.write_text(unit.read_text().replace("ProtectSystem=strict", "ProtectSystem=stric"))
    done = _verify(root, "screener-exporter.service")
    assert "screener-exporter.service:" in done.stderr and "ignoring: stric" in done.stderr


def test_exporter_runs_as_its_own_user_in_a_sandbox() -> None:
    service = _unit("screener-exporter.service")["Service"]
    assert service["User"] == "screener-exporter"
    assert service["ProtectSystem"] == "strict"
    assert service["NoNewPrivileges"] == "yes"
    assert service["CapabilityBoundingSet"] == ""
    assert "exporter --listen" in service["ExecStart"]
    sysusers = (UNITS / "screener.sysusers.conf").read_text()
    assert "u      screener-exporter " in sysusers and "u      screener " in sysusers


def test_sweep_timer_submits_the_sweep_spread_and_persistent() -> None:
    timer = _unit("screener-sweep.timer")["Timer"]
    assert timer["Persistent"] == "true"
    assert timer["RandomizedDelaySec"] == "30min"
    assert timer["Unit"] == "screener-sweep.service"
    service = _unit("screener-sweep.service")["Service"]
    assert service["Type"] == "oneshot"
    assert " sweep --submit --script /opt/screener/jobs/sweep.sbatch" in service["ExecStart"]
    assert service["User"] == "screener"
    assert service["NoNewPrivileges"] == "yes"


def test_rolling_timer_submits_a_rolling_sweep_every_few_minutes() -> None:
    """The rolling sweep (issue 22): the same service as the nightly one but --rolling, on a
    short repeating timer; its hardening is the sweep service's."""
    timer = _unit("screener-rolling.timer")["Timer"]
    assert timer["OnUnitActiveSec"] == "5min" and timer["OnBootSec"] == "5min"
    assert timer["Unit"] == "screener-rolling.service"
    service = _unit("screener-rolling.service")["Service"]
    nightly = _unit("screener-sweep.service")["Service"]
    assert (
        " sweep --submit --rolling --script /opt/screener/jobs/sweep.sbatch"
        in (service["ExecStart"])
    )
    same = ("User", "NoNewPrivileges", "ProtectSystem", "SystemCallFilter", "WorkingDirectory")
    assert {k: service[k] for k in same} == {k: nightly[k] for k in same}


def test_hookd_serves_the_default_socket_as_slurmuser_and_spares_running_hooks() -> None:
    from screener.hook_server.wire import DEFAULT_SOCKET

    service = _unit("screener-hookd.service")["Service"]
    assert service["User"] == "slurm"  # the hook runs as SlurmUser; hookd serves only its uid
    assert service["ExecStart"].endswith(f"hookd --socket {DEFAULT_SOCKET}")
    assert f"/run/{service['RuntimeDirectory']}/" in DEFAULT_SOCKET
    assert service["RuntimeDirectoryMode"] == "0700"
    assert service["KillMode"] == "process"  # a restart does not kill a hook in flight
    assert service["Restart"] == "always"  # exit 75 (package changed) comes back on new code
