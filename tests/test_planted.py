"""Planted names on a node (issue 41): a hostile user on a compute node plants a symlink, a
hard link, a FIFO, a directory or a file of their own where screener works, on scratch that
users may write (mode 0777, not sticky: the kernel's protected_symlinks does not cover it).

Over real sshd with real fio, for every kind at every name screener uses (the private
directory ``TARGET/.screener`` and the probe file's old name ``TARGET/.screener-probe``),
a screen leaves the victim byte-identical, still judges the node (OK, not UNKNOWN) and
names what it found. The planting is done as ``nobody`` on the node, except the hard link
to a root-owned file: the kernel's protected_hardlinks (on here) forbids that to users,
so root makes it, standing in for a node where that protection is off.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.minicluster import ClusterHandle
from screener.hooks.injob import private_dir, start_argv, stop_argv
from screener.probe.private import INJOB_PARENT
from tests import cli_fork
from tests.hooked_cluster import pace_devices

pytestmark = pytest.mark.cluster
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
REGION_MIB = 4  # the probe region: every victim is larger, so fio would not extend it


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def victims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """A root-owned file (0600) and a loop block device over a root-owned file, both larger
    than the probe region, with random content; visible from every emulated node."""
    d = tmp_path_factory.mktemp("victims")
    d.chmod(0o755)
    file = d / "victim.bin"
    file.write_bytes(os.urandom((REGION_MIB + 4) << 20))
    file.chmod(0o600)
    backing = d / "blockdev.bin"
    backing.write_bytes(os.urandom((REGION_MIB + 4) << 20))
    dev = subprocess.run(
        ["losetup", "--find", "--show", str(backing)], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        yield {"file": file, "blockdev": Path(dev), "backing": backing}
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)


@pytest.fixture
def open_scratch(cluster: ClusterHandle) -> Iterator[str]:
    """The last node with its /scratch opened to every user (0777, no sticky bit) and
    nothing of screener's in it; restored afterwards."""
    node = cluster.nodes[-1]
    _on(cluster, node, "sh", "-c", 'rm -rf -- "$1"/.screener*', "clean", cluster.scratch)
    _on(cluster, node, "chmod", "0777", cluster.scratch)
    try:
        yield node
    finally:
        _on(cluster, node, "sh", "-c", 'rm -rf -- "$1"/.screener*', "clean", cluster.scratch)
        _on(cluster, node, "chmod", "0755", cluster.scratch)


def _on(cluster: ClusterHandle, node: str, *argv: str) -> str:
    """Run ``argv`` on ``node`` (in its mount namespace, over its sshd) as root; its stdout."""
    res = cluster.ssh(node, *argv, check=False)
    assert res.returncode == 0, (argv, res.stderr)
    return res.stdout


def _plant(
    cluster: ClusterHandle, node: str, kind: str, path: str, victims: dict[str, Path]
) -> None:
    """Make ``path`` on ``node`` the ``kind`` of object a hostile user would."""
    argv = {
        "symlink-file": [*NOBODY, "ln", "-s", str(victims["file"]), path],
        "symlink-blockdev": [*NOBODY, "ln", "-s", str(victims["blockdev"]), path],
        # root (see the module docstring), to a root file on the same filesystem
        "hardlink": ["sh", "-c", 'ln -f -- "$1"/victim.bin "$2"', "ln", SCRATCH_VICTIM_DIR, path],
        "fifo": [*NOBODY, "mkfifo", path],
        "directory": [*NOBODY, "mkdir", path],
        "file": [*NOBODY, "sh", "-c", 'head -c 8388608 /dev/urandom > "$1"', "plant", path],
    }[kind]
    _on(cluster, node, *argv)


def _config(cluster: ClusterHandle, tmp_path: Path) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[probe]\ntarget = "{cluster.scratch}"\nsize_mib = {REGION_MIB}\nruntime_s = 0.3\n'
        "ramp_s = 0.1\nrand_read = false\nfacts = false\n"
        f'[transport]\nssh_config = "{cluster.ssh_config}"\n'
        f'known_hosts = "{cluster.known_hosts}"\nconnect_timeout_s = 5.0\n'
        f'[store]\nspool_dir = "{tmp_path}/spool"\n'
    )
    return cfg


SCRATCH_VICTIM_DIR = "/scratch/.root-only"  # a root-owned 0700 directory in scratch


def _scratch_victim(cluster: ClusterHandle, node: str) -> str:
    """A root-owned 0600 file with random bytes in scratch (the hard link's victim); its
    sha256 as the node sees it."""
    script = (
        'mkdir -p -m 0700 -- "$1" && head -c 8388608 /dev/urandom > "$1"/victim.bin && '
        'chmod 0600 "$1"/victim.bin && sha256sum < "$1"/victim.bin'
    )
    return _on(cluster, node, "sh", "-c", script, "victim", SCRATCH_VICTIM_DIR)


def _scratch_digest(cluster: ClusterHandle, node: str) -> str:
    return _on(cluster, node, "sh", "-c", 'sha256sum < "$1"/victim.bin', "d", SCRATCH_VICTIM_DIR)


KINDS = ["symlink-file", "symlink-blockdev", "hardlink", "fifo", "directory", "file"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_name_is_never_followed_and_the_node_is_still_judged(
    cluster: ClusterHandle,
    open_scratch: str,
    victims: dict[str, Path],
    tmp_path: Path,
    kind: str,
) -> None:
    node, scratch = open_scratch, cluster.scratch
    # One node alone is judged by the floors and its write/read ratio: paced, another
    # worker's load cannot tip the ratio (unpaced, CI read 5.7x its write once: SLOW_READ).
    pace_devices(cluster, [node])
    before = {k: _digest(v) for k, v in victims.items() if k != "blockdev"}
    in_scratch = _scratch_victim(cluster, node)
    old, private = f"{scratch}/.screener-probe", f"{scratch}/.screener"
    _plant(cluster, node, kind, old, victims)  # the probe file's name until issue 41
    _plant(cluster, node, kind, private, victims)  # the private directory's name
    planted_old = _on(cluster, node, "stat", "-c", "%F %u", old)

    res = cli_fork.run(
        [
            "--config",
            str(_config(cluster, tmp_path)),
            "screen",
            node,
            "--no-store",
            "--no-confirm",
            "--json",
        ],
        timeout=300,
    )
    assert res.returncode in (0, 3), res.stderr
    doc = json.loads(res.stdout)
    (verdict,) = doc["nodes"]
    assert verdict["status"] == "OK", verdict  # judged: a planted name hides nothing

    assert {k: _digest(v) for k, v in victims.items() if k != "blockdev"} == before
    assert _scratch_digest(cluster, node) == in_scratch
    # The private name: moved aside (never followed, read or deleted), and said so.
    assert f"{node}: {private} was a " in res.stderr and "moved aside to" in res.stderr, res.stderr
    assert any(n.startswith(f"{node}: {private} was a ") for n in doc["notes"]), doc
    aside = _on(cluster, node, "sh", "-c", 'ls -d -- "$1".planted.*', "ls", private).split()
    assert len(aside) == 1
    assert _on(cluster, node, "stat", "-c", "%F %u", aside[0]) == _expected_stat(kind)
    assert _on(cluster, node, "stat", "-c", "%F %u %a", private).strip() == "directory 0 700"
    # The old name: left exactly as planted, except a hard link to a root file, which is
    # only unlinked (the victim's own name and bytes are untouched: checked above).
    if kind == "hardlink":
        assert _on(cluster, node, "sh", "-c", '[ ! -e "$1" ] && echo gone', "t", old) == "gone\n"
    else:
        assert _on(cluster, node, "stat", "-c", "%F %u", old) == planted_old


def _expected_stat(kind: str) -> str:
    return {
        "symlink-file": "symbolic link 65534\n",
        "symlink-blockdev": "symbolic link 65534\n",
        "hardlink": "regular file 0\n",
        "fifo": "fifo 65534\n",
        "directory": "directory 65534\n",
        "file": "regular file 65534\n",
    }[kind]


@pytest.mark.serial  # replaces /tmp/.screener, which every cluster's in-job iostat uses
@pytest.mark.parametrize("kind", ["symlink-file", "fifo", "directory", "file"])
def test_a_planted_in_job_iostat_parent_does_not_stop_monitoring(
    cluster: ClusterHandle, victims: dict[str, Path], kind: str
) -> None:
    """/tmp/.screener planted by a user before the job: moved aside, iostat still starts and
    its samples are collected; the victim is untouched."""
    node, job = cluster.nodes[0], "990041"
    before = _digest(victims["file"])
    _on(cluster, node, "sh", "-c", 'rm -rf -- "$1" "$1".planted.*', "clean", INJOB_PARENT)
    try:
        _plant(cluster, node, kind, INJOB_PARENT, victims)
        start = cluster.ssh(node, *start_argv(job, node, 1, 60, []), check=False)
        assert start.returncode == 0, start.stderr
        assert f"{INJOB_PARENT} was a " in start.stderr and "moved aside" in start.stderr
        assert Path(private_dir(job, node)).is_dir()
        stop = cluster.ssh(node, *stop_argv(job, node), check=False)
        assert stop.returncode in (0, 7), stop.stderr  # 7: stopped before its first line
        assert not Path(private_dir(job, node)).exists()
        assert _digest(victims["file"]) == before
    finally:
        _on(cluster, node, "sh", "-c", 'rm -rf -- "$1" "$1".planted.*', "clean", INJOB_PARENT)
