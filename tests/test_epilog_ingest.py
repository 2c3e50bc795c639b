"""The epilog's ingest: where a job's outputs are (comment token, policy pattern), the
checks on that user-named directory and its files, and one log line for every problem.
Real captured IOR outputs (tests/data/ior/); the full hook on the emulated cluster is in
tests/test_ingest_cluster.py."""

from __future__ import annotations

import os
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from screener.epilog.ingest import (
    check_dir,
    comment_dir,
    ingest_after_job,
    job_drain_reason,
    output_dir,
    owned_reader,
    pattern_dir,
)
from screener.errors import ConfigError
from screener.hooks.log import HookLog
from screener.ingest.judge import Figure
from screener.ingest.results import Phase, SourceKind
from screener.policy import IngestPolicy, Policy, StorePolicy, policy_from_dict
from screener.slurm.client import SlurmJob

DATA = Path(__file__).resolve().parent / "data" / "ior"


def test_output_directory_must_be_absolute_plain_and_without_dotdot() -> None:
    assert check_dir("/home/alice/run-1") == "/home/alice/run-1"
    for bad in ("run", "/home/a/../../etc", "/tmp/x y", "/tmp/$(id)", "/tmp/a\nb", "", "/t;rm"):
        with pytest.raises(ConfigError, match="refused"):
            check_dir(bad)


def test_comment_token_and_pattern() -> None:
    assert comment_dir("screener=on screener_out=/data/r1", "screener_out") == "/data/r1"
    assert comment_dir("screener=on,screener_out=/data/r1;x", "screener_out") == "/data/r1"
    assert comment_dir("screener=on", "screener_out") is None
    assert comment_dir("myscreener_out=/data", "screener_out") is None
    with pytest.raises(ConfigError):
        comment_dir("screener_out=../etc", "screener_out")
    assert pattern_dir("/shared/ior/{user}/{job_id}", "alice", "42") == "/shared/ior/alice/42"
    with pytest.raises(ConfigError, match="user"):
        pattern_dir("/shared/{user}", "../root", "42")
    job = SlurmJob("42", ("node01",), comment="screener=on")
    policy = IngestPolicy(dir_pattern="/shared/{user}")
    env = {"SLURM_JOB_USER": "bob"}
    assert output_dir(job, env, policy, screened=True) == (
        "/shared/bob",
        "[ingest] dir_pattern gives /shared/bob",
    )
    assert output_dir(job, env, policy, screened=False)[0] is None  # pattern: screened only
    named = replace(job, comment="screener_out=/x/y")
    assert output_dir(named, env, policy, screened=False)[0] == "/x/y"  # explicit opt-in


def test_policy_checks_the_ingest_section() -> None:
    assert policy_from_dict({"ingest": {"drain": True}}).ingest.drain
    for bad, msg in (
        ({"drain_tag": "screener:"}, "differ"),
        ({"drain_tag": ""}, "drain_tag"),
        ({"comment_key": "a b"}, "comment_key"),
        ({"dir_pattern": "relative/{user}"}, "dir_pattern"),
        ({"dir_pattern": "/x/{home}"}, "dir_pattern"),
        ({"dir_pattern": "/x/../{user}"}, "dir_pattern"),
    ):
        with pytest.raises(ConfigError, match=msg):
            policy_from_dict({"ingest": bad})


def test_owned_reader_refuses_symlinks_other_owners_and_non_files(tmp_path: Path) -> None:
    mine = tmp_path / "ior-7.ranks.csv"
    shutil.copy(DATA / "ior-fpp-ranks.csv", mine)
    uid = os.stat(mine).st_uid
    read = owned_reader(uid)
    assert read(mine) == (DATA / "ior-fpp-ranks.csv").read_text()
    link = tmp_path / "ior-8.ranks.csv"
    link.symlink_to(mine)
    with pytest.raises(ConfigError, match="cannot read"):
        read(link)  # O_NOFOLLOW: a job cannot point the epilog at another file
    with pytest.raises(ConfigError, match="owned by uid"):
        owned_reader(uid + 4242)(mine)
    with pytest.raises(ConfigError, match="not a regular file"):
        read(tmp_path)


def _policy(tmp_path: Path) -> Policy:
    return Policy(store=StorePolicy(url=f"sqlite:///{tmp_path}/s.db"))


def test_epilog_ingest_never_fails_one_line_per_problem(tmp_path: Path) -> None:
    """A corrupt file, a missing or unreadable directory, no directory, a bad token: one
    line each, nothing stored, nothing raised."""
    shutil.copy(DATA / "corrupt-truncated-block-ranks.csv", tmp_path / "ior-9.ranks.csv")
    env = {"SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_USER": "root"}
    policy = _policy(tmp_path)
    cases = [
        (f"screener_out={tmp_path}", "outputs not ingested: ior-9.ranks.csv"),
        ("screener_out=/nonexistent/dir", "outputs not ingested: --dir /nonexistent/dir"),
        ("screener=on", "no outputs to ingest (no screener_out= in the comment"),
        ("screener_out=/a/../etc", "outputs not ingested: output directory"),
        # an OSError other than "no such file" (here a name too long; EACCES as SlurmUser)
        (f"screener_out=/tmp/{'x' * 300}", "outputs not ingested: cannot look into /tmp/x"),
    ]
    for comment, expect in cases:
        log = HookLog("test")
        job = SlurmJob("9", ("node01", "node02"), partition="debug", comment=comment)
        assert ingest_after_job(policy, job, env, True, log) is None
        assert len(log.lines) == 1 and log.lines[0].startswith(f"job 9: {expect}"), log.lines
    quiet = HookLog("test")
    plain = SlurmJob("9", ("node01",), comment="")
    assert ingest_after_job(policy, plain, env, False, quiet) is None
    assert quiet.lines == []  # an unscreened job naming no directory: not even a line
    log = HookLog("test")
    job = SlurmJob("9", ("node01",), comment=f"screener_out={tmp_path}")
    assert ingest_after_job(policy, job, {}, True, log) is None
    assert "SLURM_JOB_UID is not set" in log.lines[0]
    assert not (tmp_path / "s.db").exists() or _count(tmp_path / "s.db") == 0


def _count(db: Path) -> int:
    with sqlite3.connect(db) as con:
        return int(con.execute("select count(*) from job_ingests").fetchone()[0])


def test_epilog_ingests_a_summary_without_asking_slurm(tmp_path: Path) -> None:
    """IOR's JSON summary alone needs no rank layout: stored with the job's partition."""
    shutil.copy(DATA / "ior-fpp-slowrank-summary.json", tmp_path / "ior-11.summary.json")
    log = HookLog("test")
    job = SlurmJob("11", ("node01",), partition="debug", comment=f"screener_out={tmp_path}")
    env = {"SLURM_JOB_UID": str(os.getuid())}
    done = ingest_after_job(_policy(tmp_path), job, env, False, log)
    assert done is not None and done.ingest_id is not None, log.lines
    assert log.lines == [
        f"job 11: ingested (comment names screener_out={tmp_path}) as ingest "
        f"{done.ingest_id}; in-job slow: none"
    ]
    assert _count(tmp_path / "s.db") == 1
    off = replace(_policy(tmp_path), ingest=IngestPolicy(epilog=False))
    assert ingest_after_job(off, job, env, False, HookLog("t")) is None


def test_drain_reason_is_tagged_short_and_valid() -> None:
    def read(ratio: float | None) -> Figure:
        return Figure("n", Phase.READ, 1, 1, 1, 1.0, 1.0, ratio, None, True, SourceKind.IOR_CSV)

    assert job_drain_reason("screener-job:", "4242", [read(0.4), read(0.05)]) == (
        "screener-job: rd 0.05x job 4242"
    )
    assert job_drain_reason("screener-job:", "4242_7", [read(0.001)]) == (
        "screener-job: rd <0.01x job 4242_7"
    )
    assert job_drain_reason("sj:", "1+1", [read(None)]) == "sj: rd slow job 1+1"
