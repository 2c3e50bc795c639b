"""`screener exporter --textfile PATH` writes only a regular file or a new name (issue 19,
item 7): as root, the temp-file-and-rename once replaced /dev/full with a regular file, and
a directory gave IsADirectoryError. Anything else is one line, exit 1, PATH unchanged.

A real device node: a character device made with mknod in tmp_path, with /dev/full's
numbers (never /dev/full itself: the old code, as root, replaced it on the machine).
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from screener.store.migrate import upgrade
from tests import cli_fork


def exporter(tmp_path: Path, out: Path) -> subprocess.CompletedProcess[str]:
    url = f"sqlite:///{tmp_path / 's.db'}"
    if not (tmp_path / "s.db").exists():
        upgrade(url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCREENER_")}
    env["SCREENER_DATABASE_URL"] = url
    return cli_fork.run(["exporter", "--textfile", str(out)], env=env, timeout=60)


def one_line(res: subprocess.CompletedProcess[str], needle: str) -> None:
    assert res.returncode == 1, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith("screener: error: textfile") and needle in lines[0], lines[0]


def identity(path: Path) -> tuple[int, int, int]:
    st = path.lstat()
    return st.st_ino, stat.S_IFMT(st.st_mode), st.st_rdev


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root (the case of the issue)")
def test_a_device_node_is_refused_and_left_alone(tmp_path: Path) -> None:
    dev = tmp_path / "full"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # /dev/full's numbers
    before = identity(dev)
    one_line(exporter(tmp_path, dev), "is a character device")
    assert identity(dev) == before and stat.S_ISCHR(dev.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "s.db"]  # no temp left


def test_a_directory_a_fifo_a_socket_and_a_symlink_are_refused(tmp_path: Path) -> None:
    d = tmp_path / "dir.prom"
    d.mkdir()
    one_line(exporter(tmp_path, d), "is a directory")
    assert d.is_dir() and not list(d.iterdir())
    fifo = tmp_path / "fifo.prom"
    os.mkfifo(fifo)
    one_line(exporter(tmp_path, fifo), "is a FIFO")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    sock_path = tmp_path / "sock.prom"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        one_line(exporter(tmp_path, sock_path), "is a socket")
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep\n")
    link = tmp_path / "link.prom"
    link.symlink_to(target)
    one_line(exporter(tmp_path, link), "is a symbolic link")
    assert link.is_symlink() and target.read_text() == "keep\n"


def test_a_regular_file_and_a_new_name_are_written(tmp_path: Path) -> None:
    old = tmp_path / "old.prom"
    old.write_text("stale\n")
    assert exporter(tmp_path, old).returncode == 0
    new = tmp_path / "new.prom"
    res = exporter(tmp_path, new)
    assert res.returncode == 0, res.stderr
    for p in (old, new):
        assert stat.S_ISREG(p.lstat().st_mode) and "screener_" in p.read_text()
