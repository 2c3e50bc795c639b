"""How the emulated cluster sets up slurmrestd with JWT, fast and without daemons: the
slurm.conf lines, slurmrestd's and `scontrol token`'s argv, what ClusterInfo.env() gives a
client, and the Slurm roots' package check (a root built before slurm-wlm-jwt-plugin is
refused and rebuilt, never reused). The daemons themselves: tests/test_slurm_rest_cluster.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy import slurmroot
from deploy.minicluster import argv, render
from deploy.minicluster.spec import ClusterInfo, ClusterSpec


def info(tmp_path: Path, version: str | None) -> ClusterInfo:
    return ClusterInfo(tmp_path, ClusterSpec(nodes=3, slurm_port_base=23000, slurm_version=version))


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_a_versioned_cluster_gets_jwt_lines_and_exports_url_and_token(
    tmp_path: Path, version: str
) -> None:
    ci = info(tmp_path, version)
    lines = render.slurm_conf(ci, 2, None, None).splitlines()
    assert "AuthType=auth/munge" in lines and "AuthAltTypes=auth/jwt" in lines
    assert f"AuthAltParameters=jwt_key={tmp_path}/slurm/jwt_hs256.key" in lines
    env = ci.env(inherit=False)
    assert env["SCREENER_MINICLUSTER_REST_URL"] == "http://127.0.0.1:23004"
    assert env["SCREENER_MINICLUSTER_REST_UNIX_URL"] == f"unix:{tmp_path}/slurm/rest/rest.sock"
    assert env["SCREENER_MINICLUSTER_REST_TOKEN_FILE"] == f"{tmp_path}/slurm/rest.jwt"


def test_the_hosts_cluster_is_unchanged(tmp_path: Path) -> None:
    ci = info(tmp_path, None)
    conf = render.slurm_conf(ci, 2, None, None)
    assert "AuthAlt" not in conf and "jwt" not in conf
    assert not any(k.startswith("SCREENER_MINICLUSTER_REST") for k in ci.env(inherit=False))


def test_slurmrestd_runs_as_nobody_with_jwt_only(tmp_path: Path) -> None:
    """SLURM_JWT=daemon: under auth/munge slurmrestd rejects every token."""
    cmd = argv.slurmrestd(tmp_path / "slurm.conf", ["unix:/s", "127.0.0.1:1"], "/usr/sbin/x")
    assert cmd[1:3] == ["SLURM_JWT=daemon", "/usr/sbin/x"]
    assert cmd[cmd.index("-u") + 1] == "65534" and cmd[cmd.index("-g") + 1] == "65534"
    assert cmd[cmd.index("-a") + 1] == "rest_auth/jwt"
    assert "SLURMRESTD_SECURITY=disable_user_check" not in " ".join(cmd)
    assert cmd[-2:] == ["unix:/s", "127.0.0.1:1"]
    token = argv.scontrol_token(tmp_path / "slurm.conf", 60, "/usr/bin/scontrol")
    assert token[1:] == [
        f"SLURM_CONF={tmp_path}/slurm.conf",
        "/usr/bin/scontrol",
        "token",
        "username=root",
        "lifespan=60",
    ]


def _stamp(root: Path, packages: tuple[str, ...]) -> None:
    root.mkdir(parents=True)
    stamp = slurmroot.Stamp(
        version="24.11",
        suite="trixie",
        mirror=slurmroot.DEFAULT_MIRROR,
        slurm="24.11.5-4+deb13u1",
        glibc="2.41",
        packages=packages,
        build_seconds=1.0,
        size_bytes=1,
        release_expired=False,
    )
    (root / slurmroot.STAMP).write_text(json.dumps(stamp.to_json()))


def test_a_root_without_the_jwt_plugin_is_refused_not_reused(tmp_path: Path) -> None:
    assert "slurm-wlm-jwt-plugin" in slurmroot.PACKAGES
    old = tuple(p for p in slurmroot.PACKAGES if p != "slurm-wlm-jwt-plugin")
    _stamp(tmp_path / "24.11", old)
    assert not slurmroot.current(slurmroot.read_stamp(tmp_path / "24.11"))
    with pytest.raises(slurmroot.SlurmRootError, match=r"make slurm-root SLURM=24\.11"):
        slurmroot.find("24.11", tmp_path)
    _stamp(tmp_path / "new" / "24.11", slurmroot.PACKAGES)
    assert slurmroot.find("24.11", tmp_path / "new").stamp.packages == slurmroot.PACKAGES
