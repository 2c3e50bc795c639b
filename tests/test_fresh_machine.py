"""What a fresh machine lacks: machine state the project must create itself, and a plain
(non-editable) wheel install that must be able to migrate its database.

The cluster test runs first in the session (see conftest.py): it moves sshd's
privilege-separation directory aside, which the session cluster's sshd would need per
connection, and puts back exactly what it found (the same directory, or nothing).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.minicluster import Cluster
from deploy.minicluster.nodes import SSHD_PRIVSEP_DIR, ensure_privsep_dir
from deploy.minicluster.slots import claim_slot
from deploy.minicluster.spec import ClusterError

pytest_plugins = ["store_fixtures"]

REPO = Path(__file__).resolve().parents[1]


def test_privsep_dir_is_created_root_owned_0755(tmp_path: Path) -> None:
    target = tmp_path / "run" / "sshd"
    ensure_privsep_dir(target)
    st = target.stat()
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o755
    assert (st.st_uid, st.st_gid) == (0, 0)


def test_privsep_dir_with_a_loose_mode_is_tightened(tmp_path: Path) -> None:
    target = tmp_path / "sshd"
    target.mkdir()
    target.chmod(0o777)  # sshd refuses a group/world-writable privsep dir
    os.chown(target, 65534, 65534)
    ensure_privsep_dir(target)
    st = target.stat()
    assert stat.S_IMODE(st.st_mode) == 0o755
    assert (st.st_uid, st.st_gid) == (0, 0)


def test_a_file_in_place_of_the_privsep_dir_is_refused_not_removed(tmp_path: Path) -> None:
    target = tmp_path / "sshd"
    target.write_text("keep me")
    with pytest.raises(ClusterError, match="not a directory"):
        ensure_privsep_dir(target)
    assert target.read_text() == "keep me"


@contextlib.contextmanager
def moved_aside(path: Path) -> Iterator[None]:
    """``path`` absent for the block; afterwards exactly what was there before: the same
    directory (renamed back: inode, mode, owner, contents), or nothing."""
    saved = path.with_name(f"{path.name}.screener-test-{os.getpid()}")
    found = path.exists() or path.is_symlink()
    if found:
        path.rename(saved)
    try:
        yield
    finally:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)  # the one the block made
        if found:
            saved.rename(path)


def test_moved_aside_puts_back_the_same_directory(tmp_path: Path) -> None:
    target = tmp_path / "sshd"
    target.mkdir(mode=0o711)
    (target / "keep").write_text("me")
    before = target.stat()
    with moved_aside(target):
        assert not target.exists()
        target.mkdir()  # what the cluster's ensure_privsep_dir does
    after = target.stat()
    assert (after.st_ino, stat.S_IMODE(after.st_mode)) == (before.st_ino, 0o711)
    assert (target / "keep").read_text() == "me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sshd"]


def test_moved_aside_leaves_nothing_where_nothing_was(tmp_path: Path) -> None:
    target = tmp_path / "sshd"
    with moved_aside(target):
        target.mkdir()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.fresh_machine
@pytest.mark.serial  # moves /run/sshd aside: every other cluster's sshd needs it
def test_cluster_comes_up_without_run_sshd_and_every_node_answers() -> None:
    """The bug a fresh machine showed: sshd exited at once ("Missing privilege separation
    directory: /run/sshd"). Move it aside, bring a cluster up, ssh to every node, put it back."""
    if os.environ.get("SCREENER_SKIP_CLUSTER") == "1":
        pytest.skip("SCREENER_SKIP_CLUSTER=1: emulated cluster disabled")
    with claim_slot() as slot, moved_aside(SSHD_PRIVSEP_DIR):
        assert not SSHD_PRIVSEP_DIR.exists()
        mc = Cluster(slot.state_dir)
        try:
            info = mc.up(3, subnet=slot.subnet, slurm_port_base=slot.slurm_port_base)
            st = SSHD_PRIVSEP_DIR.stat()
            assert stat.S_IMODE(st.st_mode) == 0o755 and st.st_uid == 0
            for node in info.nodes:
                out = subprocess.run(
                    ["ssh", "-F", str(info.ssh_config), node, "hostname"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    stdin=subprocess.DEVNULL,
                )
                assert out.returncode == 0, out.stderr
                assert out.stdout.strip() == node
        finally:
            mc.down()


def _venv_with_wheel(tmp: Path) -> Path:
    """Build a wheel of this checkout and install it (not editable) into a new venv."""
    wheels = tmp / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("screener-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return venv


def _screener(venv: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the installed console script from / (outside the source tree), clean env."""
    env = {"PATH": "/usr/bin:/bin", "SCREENER_DATABASE_URL": url, "HOME": "/root"}
    return subprocess.run(
        [str(venv / "bin" / "screener"), "--config", "/dev/null", *args],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.postgres
def test_wheel_install_migrates_sqlite_and_postgres_outside_the_source_tree(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> None:
    if os.environ.get("SCREENER_SKIP_PG") == "1":
        pytest.skip("SCREENER_SKIP_PG=1")
    venv = _venv_with_wheel(tmp_path_factory.mktemp("wheel"))
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import screener; print(screener.__file__)"],
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert site.startswith(str(venv)), f"imported from the source tree: {site}"
    sqlite_url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'fresh.db'}"
    pg_url = request.getfixturevalue("pg_dbs").create()
    for url in (sqlite_url, pg_url):
        up = _screener(venv, url, "db", "upgrade")
        assert up.returncode == 0, up.stderr
        assert "database at revision" in up.stdout
        runs = _screener(venv, url, "runs", "--json")
        assert runs.returncode == 0, runs.stderr
        assert runs.stdout.strip() == "[]"
        current = _screener(venv, url, "db", "current")
        assert current.stdout.split()[-1] == up.stdout.split()[-1]
