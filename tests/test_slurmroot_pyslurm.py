"""deploy/slurmroot/pyslurm.py's pure parts: the pinned build inputs and the .pth line that
puts a root's pyslurm first on sys.path only inside that root (its effect on a real root and
cluster: tests/test_slurm_contract.py, test_auto_uses_the_roots_pyslurm_inside_the_root_only)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from deploy.slurmroot import SlurmRootError
from deploy.slurmroot.pyslurm import (
    LIBSLURMFULL,
    build_root_packages,
    find_pyslurm,
    pth_line,
    source_for,
)


def test_build_root_pins_the_slurm_dev_packages_to_the_roots_version() -> None:
    pkgs = build_root_packages("24.11.5-4+deb13u1")
    assert "libslurm-dev=24.11.5-4+deb13u1" in pkgs and "gcc" in pkgs
    assert "slurm-wlm-basic-plugins=24.11.5-4+deb13u1" in pkgs  # libslurmfull.so


def test_a_release_without_pyslurm_says_so_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SlurmRootError, match=r"no release for Slurm 26\.05.*CLI") as exc:
        source_for("26.05")
    assert "\n" not in str(exc.value)
    with pytest.raises(SlurmRootError, match=r"make pyslurm SLURM=24\.11"):
        find_pyslurm("24.11", cache=tmp_path)  # nothing built in this cache


def test_pth_line_adds_the_site_only_where_usr_holds_the_roots_library(tmp_path: Path) -> None:
    """Run by a python whose /usr is the host's: a root whose libslurmfull.so is another
    file adds nothing; a "root" whose library *is* the file at /usr adds the site first."""
    site = tmp_path / "site"
    elsewhere = tmp_path / "root"
    (elsewhere / LIBSLURMFULL).parent.mkdir(parents=True)
    (elsewhere / LIBSLURMFULL).write_bytes(b"not the host's library")

    def first_path(root: Path) -> str:
        code = f"import sys\n{pth_line(site, root)}print(sys.path[0])"
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()

    assert first_path(elsewhere) != str(site)
    if not Path("/", LIBSLURMFULL).is_file():
        pytest.skip(f"/{LIBSLURMFULL} absent: no library to be the same file as")
    assert first_path(Path("/")) == str(site)  # "/" as the root: /usr/... is the same file


def test_pth_line_refuses_a_path_a_python_literal_would_not_hold(tmp_path: Path) -> None:
    with pytest.raises(SlurmRootError, match="not a safe path"):
        pth_line(tmp_path / "it's", tmp_path)
