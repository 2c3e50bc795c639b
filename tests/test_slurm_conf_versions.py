"""The hook contract per Slurm release (issue 43): the slurm.conf lines deploy/slurm/ gives
admins for 22.05, 24.11 and 26.05, the emulated cluster writing the very same lines for the
release it runs, and what each real slurmctld made of them (`scontrol show config`,
captured in tests/data/slurm/, see the README there)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from deploy.minicluster import ClusterInfo, ClusterSpec, render
from deploy.minicluster.spec import HOST_SLURM
from deploy.slurmroot import SUITES

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "slurm"
VERSIONS = (HOST_SLURM, *sorted(SUITES))  # 22.05 (the host's), 24.11, 26.05
HOOKS = {
    "PrologSlurmctld": "/opt/screener/jobs/prolog-slurmctld",
    "EpilogSlurmctld": "/opt/screener/jobs/epilog-slurmctld",
}
# Every setting of each file, exactly: a key added or dropped is a decision for docs/slurm.md.
EXPECTED = {
    "22.05": {**HOOKS, "PrologEpilogTimeout": "300"},
    "24.11": {**HOOKS, "PrologEpilogTimeout": "300"},
    # 25.05 split PrologEpilogTimeout into PrologTimeout and EpilogTimeout
    "26.05": {**HOOKS, "PrologTimeout": "300", "EpilogTimeout": "300"},
}
# What screener does not need on any release, each for a reason given in the files.
NOT_SET = ("SchedulerParameters", "PrologFlags", "MaxBatchRequeue", "SlurmctldParameters")


def _spec_version(version: str) -> str | None:
    return None if version == HOST_SLURM else version


def _settings(version: str) -> dict[str, str]:
    return dict(render.screener_conf_lines(render.screener_conf_path(version).read_text()))


def _conf_keys(conf: str) -> list[str]:
    return [line.split("=", 1)[0] for line in conf.splitlines() if line and line[0] != "#"]


@pytest.mark.parametrize("version", VERSIONS)
def test_each_release_has_its_lines(version: str) -> None:
    settings = _settings(version)
    assert settings == EXPECTED[version]
    assert not set(settings) & set(NOT_SET)
    text = render.screener_conf_path(version).read_text()
    # each file says which releases it is for and where the why is
    assert f"verified on {version}." in text and "docs/slurm.md" in text


def test_every_release_the_cluster_runs_has_a_file() -> None:
    assert set(EXPECTED) == {HOST_SLURM, *SUITES}
    names = {p.name for p in render.SCREENER_CONF_DIR.glob("slurm.conf.screener*")}
    assert names == {f"slurm.conf.screener-{v}" for v in VERSIONS}
    assert render.screener_conf_path(None) == render.screener_conf_path(HOST_SLURM)


def test_prolog_timeout_only_where_the_release_knows_it() -> None:
    """PrologTimeout/EpilogTimeout are 25.05 keys: 22.05 and 24.11 refuse to start with them
    (unrecognized key); 26.05 still accepts PrologEpilogTimeout, but the split keys say
    which hook each bound is for."""
    for version in ("22.05", "24.11"):
        assert "PrologTimeout" not in _settings(version)
    assert "PrologEpilogTimeout" not in _settings("26.05")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_cluster_writes_the_admins_lines(version: str, tmp_path: Path) -> None:
    """The emulated cluster of that release carries every line of the admin's file, its own
    hook wrappers in place of /opt/screener, each key once."""
    info = ClusterInfo(tmp_path, ClusterSpec(nodes=3, slurm_version=_spec_version(version)))
    prolog, epilog = tmp_path / "slurm" / "prolog.sh", tmp_path / "slurm" / "epilog.sh"
    conf = render.slurm_conf(info, 2, prolog, epilog)
    lines = conf.splitlines()
    for key, value in EXPECTED[version].items():
        want = {"PrologSlurmctld": str(prolog), "EpilogSlurmctld": str(epilog)}.get(key, value)
        assert f"{key}={want}" in lines, (key, conf)
    keys = _conf_keys(conf)
    assert len(keys) == len(set(keys)), keys
    assert "/opt/screener" not in conf
    assert not set(keys) & set(NOT_SET), keys
    # the timeouts apply without hooks too; a hook not given has no line
    bare = render.slurm_conf(info, 2, None, None)
    assert not {"PrologSlurmctld", "EpilogSlurmctld"} & set(_conf_keys(bare))
    assert all(
        f"{k}={v}" in bare.splitlines() for k, v in EXPECTED[version].items() if "Timeout" in k
    )
    only_prolog = render.slurm_conf(info, 2, prolog, None)
    assert "EpilogSlurmctld" not in _conf_keys(only_prolog)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("PrologSlurmctld=/a\nEpilogSlurmctld=/b\nPrologTimeout = 300\n", "line 3: not one"),
        ("PrologSlurmctld=/a\nEpilogSlurmctld=/b\nPrologSlurmctld=/c\n", "set twice"),
        ("# only a comment\nPrologEpilogTimeout=300\n", "no PrologSlurmctld, EpilogSlurmctld"),
        ("PrologSlurmctld=/a EpilogSlurmctld=/b\n", "line 1: not one"),
    ],
)
def test_a_malformed_file_is_refused(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        render.screener_conf_lines(text)


def _show_config(version: str) -> dict[str, str]:
    """`scontrol show config` of that release's slurmctld running the cluster's slurm.conf
    (captured: tests/data/slurm/README.md), `Key = value` lines."""
    name = "show_config_22.05_hooks.txt" if version == HOST_SLURM else f"{version}/show_config.txt"
    out = {}
    for line in (DATA / name).read_text().splitlines():
        m = re.match(r"^(\S+)\s+= (.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_the_real_daemon_took_every_line(version: str) -> None:
    """Each release's slurmctld started with its file's lines (an unknown key is fatal) and
    reports them as set: the hooks, the timeout (26.05 prints PrologTimeout=EpilogTimeout as
    PrologEpilogTimeout), no prolog flags, no scheduler parameters, requeue on by default."""
    shown = _show_config(version)
    assert shown["SLURM_VERSION"].startswith(version), shown.get("SLURM_VERSION")
    # 22.05 prints the hook keys bare, 23.02+ as a list ([0])
    prolog = shown.get("PrologSlurmctld") or shown["PrologSlurmctld[0]"]
    epilog = shown.get("EpilogSlurmctld") or shown["EpilogSlurmctld[0]"]
    assert prolog.endswith("/prolog_slurmctld.sh") and epilog.endswith("/epilog_slurmctld.sh")
    assert shown["PrologEpilogTimeout"] == "300"
    assert "PrologTimeout" not in shown and "EpilogTimeout" not in shown
    assert shown["PrologFlags"] in {"(null)", ""}
    assert shown["SchedulerParameters"] == "(null)"
    assert shown["JobRequeue"] == "1"
    if version != "22.05":
        assert shown["MaxBatchRequeue"] == "5"


def test_docs_name_the_per_release_files_only() -> None:
    """No page points at the single file of before (deploy/slurm/slurm.conf.screener)."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for page in pages:
        stale = re.findall(r"slurm\.conf\.screener(?![-\w])", page.read_text())
        assert not stale, page
    slurm_md = (REPO / "docs" / "slurm.md").read_text()
    for version in VERSIONS:
        assert f"deploy/slurm/slurm.conf.screener-{version}" in slurm_md, version
