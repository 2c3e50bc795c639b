"""Which ingested figures may change node state (issue 41, item 5), without a cluster: the
exclusivity scontrol prints, the trust decision, and what an untrusted ingest stores.

Data: real `scontrol show job -d` output of Slurm 22.05.8 on the emulated cluster
(select/linear, partition debug), captured after each job completed:
`show_job_22.05_exclusive.txt` = `sbatch -N2 --ntasks-per-node=1 --exclusive
--comment=screener_out=/tmp/x --wrap 'sleep 1'` (OverSubscribe=NO);
`show_job_22.05_oversubscribe.txt` = the same with `--oversubscribe` instead, after
`scontrol update PartitionName=debug OverSubscribe=YES` (OverSubscribe=YES); the existing
`show_job_22.05_4x1.txt` asked for neither (select/linear gives whole nodes: NO). On the
same cluster `--exclusive=user`, and a plain job on an OverSubscribe=YES partition, also
printed NO; `squeue --json` gave `"shared": "none"` / `"shared"` and pyslurm 22.5.3
`Job.resource_sharing` `'NO'` / `'YES'` for the same jobs. The figures are the real IOR
run with node02 throttled to 20 MB/s (tests/data/ior/cluster/throttled)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from screener.epilog.ingest import ingested_line
from screener.ingest.files import load_files
from screener.ingest.judge import JobFigures, judge_job
from screener.ingest.layout import block_layout
from screener.ingest.service import Ingested, ingest, store_rows
from screener.ingest.trust import UNTRUSTED, Vetted, trusted, vet
from screener.policy import IngestPolicy, Policy, StorePolicy, VerdictPolicy
from screener.slurm.client import SlurmJob
from screener.slurm.show_job import exclusive_of, parse_show_job

DATA = Path(__file__).resolve().parent / "data"
THROTTLED = DATA / "ior" / "cluster" / "throttled"
NODES = ("node01", "node02", "node03", "node04")
SHARED = SlurmJob("2", NODES, exclusive=False)
EXCLUSIVE = replace(SHARED, exclusive=True)
UNKNOWN = replace(SHARED, exclusive=None)


def show_job(name: str) -> str:
    return (DATA / "slurm" / f"show_job_22.05_{name}.txt").read_text()


def throttled(summary: bool = False) -> JobFigures:
    """The real run's judged figures (node02 an in-job read outlier), or its summary only."""
    csv, js = THROTTLED / "ior-2.ranks.csv", THROTTLED / "ior-2.summary.json"
    layout = None if summary else block_layout(NODES, 1)
    files = load_files([js] if summary else [js, csv])
    return judge_job(files, layout, VerdictPolicy(), IngestPolicy())


def test_exclusivity_is_what_scontrol_prints_as_oversubscribe() -> None:
    exclusive = parse_show_job(show_job("exclusive"), "1")
    shared = parse_show_job(show_job("oversubscribe"), "3")
    assert exclusive.exclusive is True and shared.exclusive is False
    # the other fields are read as before
    assert exclusive.nodes == shared.nodes == ("node01", "node02")
    assert (shared.num_tasks, shared.tasks_per_node, shared.cpus_per_node) == (2, 1, (2, 2))
    assert shared.comment == "screener_out=/tmp/x"
    assert parse_show_job(show_job("4x1"), "3").exclusive is True  # select/linear: whole nodes
    gone = show_job("exclusive").replace("OverSubscribe=NO ", "")
    assert parse_show_job(gone, "1").exclusive is None  # missing: unknown
    for value, want in (("NO", True), ("YES", False), ("USER", False), ("MCS", False)):
        assert exclusive_of(value) is want
    assert exclusive_of("OK") is False  # 22.05's word for "as the partition says"
    assert exclusive_of(None) is None and exclusive_of("") is None


def test_trust_needs_an_exclusive_allocation_or_in_job_iostat() -> None:
    assert trusted(EXCLUSIVE, False) == (True, "exclusive allocation")
    assert trusted(EXCLUSIVE, True)[0] is True
    assert trusted(SHARED, False) == (False, "shared allocation, no in-job iostat confirmation")
    assert trusted(SHARED, True) == (
        True,
        "shared allocation, slowness confirmed by in-job iostat",
    )
    assert trusted(UNKNOWN, False) == (
        False,
        "allocation not known to be exclusive, no in-job iostat confirmation",
    )
    assert trusted(SlurmJob("2", NODES), False)[0] is False  # a backend that cannot tell


def test_untrusted_outliers_are_held_back_and_the_figures_say_why() -> None:
    figures = throttled()
    assert [s.node for s in figures.slow] == ["node02"]
    shared = vet(figures, SHARED, confirmed=())
    want = (
        f"{UNTRUSTED} (shared allocation, no in-job iostat confirmation): recorded only; "
        "in-job slow node02: no episode, no drain"
    )
    assert shared.note == want and shared.figures.notes[-1] == want
    assert shared.figures.slow == () and [s.node for s in shared.held] == ["node02"]
    assert shared.figures.figures == figures.figures  # every figure still recorded
    assert store_rows(shared.figures)[1] == []  # no episode row
    assert "not known to be exclusive" in (vet(figures, UNKNOWN, ()).note or "")

    confirmed = vet(figures, SHARED, confirmed={"node02", "node04"})
    assert confirmed.figures.slow == figures.slow and confirmed.held == ()
    assert confirmed.note == (
        f"{UNTRUSTED} (shared allocation): recorded only, except in-job slow node02 "
        "(slowness confirmed by in-job iostat)"
    )
    assert vet(figures, SHARED, confirmed={"node03"}).figures.slow == ()  # another node

    assert vet(figures, EXCLUSIVE, ()) == Vetted(figures)  # as before: no note, acts
    summary = throttled(summary=True)  # job-wide figures only: nothing to act on
    assert vet(summary, SHARED, ()) == Vetted(summary)


def test_the_epilog_line_names_an_outlier_recorded_only() -> None:
    v = vet(throttled(), SHARED, ())
    line = ingested_line(Ingested("2", v.figures, "block", 7, v.held), "comment names X")
    assert line.startswith("job 2: ingested (comment names X) as ingest 7; in-job slow: ")
    assert "in-job slow: node02 (recorded only); " in line


def _rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as con:
        return con.execute(sql).fetchall()


@pytest.mark.parametrize("job", [SHARED, EXCLUSIVE], ids=["shared", "exclusive"])
def test_an_untrusted_ingest_is_stored_but_opens_no_episode(tmp_path: Path, job: SlurmJob) -> None:
    """service.ingest with the epilog's trust, into a real SQLite store: the shared job's
    figures and outlier flags are stored with the note, no episode; the exclusive job's
    outlier gets its episode as before."""
    policy = Policy(store=StorePolicy(url=f"sqlite:///{tmp_path}/s.db"))
    now = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    done = ingest(
        "2",
        [THROTTLED / "ior-2.summary.json", THROTTLED / "ior-2.ranks.csv"],
        policy,
        nodes="node[01-04]",
        ranks_per_node=1,
        partition="debug",
        observed_at=now,
        now=now,
        trust=lambda figures: vet(figures, job, ()),
    )
    db = tmp_path / "s.db"
    outliers = _rows(
        db,
        "select n.name from job_results r join nodes n on n.id = r.node_id"
        " where r.outlier and r.phase = 'read' group by n.name",
    )
    assert outliers == [("node02",)]  # the record is kept either way
    episodes = _rows(db, "select n.name from episodes e join nodes n on n.id = e.node_id")
    notes = str(_rows(db, "select notes from job_ingests")[0][0])
    if job.exclusive:
        assert episodes == [("node02",)] and UNTRUSTED not in notes and done.held == ()
    else:
        assert episodes == [] and f"{UNTRUSTED} (shared allocation" in notes
        assert [s.node for s in done.held] == ["node02"] and done.figures.slow == ()
