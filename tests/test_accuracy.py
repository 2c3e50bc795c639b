"""Screening accuracy: prolog verdicts vs in-job outliers. Pure classification over seeded
rows, then the same through the store (SQLite and the real PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from screener.ingest.accuracy import compare_all, compare_job, summarize, unknowable
from screener.ingest.files import load_files
from screener.ingest.judge import judge_job
from screener.ingest.layout import block_layout
from screener.ingest.service import store_rows
from screener.policy import VerdictPolicy
from screener.probe_data import RunSummary, Status, Trigger, Verdict
from screener.store import Store
from screener.store.jobs import (
    IngestHead,
    InJobRow,
    PrologRow,
    in_job_reads,
    prolog_verdicts,
    record_ingest,
)

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_url, db_store, pg_dbs

DATA = Path(__file__).resolve().parent / "data" / "ior"
T0 = datetime(2026, 11, 1, 22, 0, tzinfo=UTC)
OK, SLOW = Status.OK, Status.SLOW_READ


def injob(
    job: str, node: str, outlier: bool, judged: bool = True, part: str = "batch", at: datetime = T0
) -> InJobRow:
    return InJobRow(job, part, at, node, judged, outlier)


def prolog(job: str, node: str, status: Status, run: int = 1, at: datetime = T0) -> PrologRow:
    return PrologRow(job, run, at - timedelta(minutes=1), node, status)


def test_a_node_that_passed_and_was_slow_is_a_miss() -> None:
    c = compare_job(
        "7",
        [injob("7", n, n == "n3") for n in ("n1", "n2", "n3", "n4")],
        [prolog("7", n, OK) for n in ("n1", "n2", "n3", "n4")],
    )
    assert c.screened and c.miss == ("n3",) and c.stayed_ok == ("n1", "n2", "n4")
    assert c.caught == c.false_alarm == c.unscreened == ()


def test_drained_nodes_are_caught_but_unknowable_and_the_last_attempt_counts() -> None:
    # attempt 1 (run 1) found n5 slow: drained, job requeued onto n1-n4 (run 2), all OK
    verdicts = (
        [prolog("8", "n5", SLOW, run=1)]
        + [prolog("8", n, OK, run=1) for n in ("n1", "n2", "n3")]
        + [
            prolog("8", n, OK, run=2, at=T0 + timedelta(minutes=3))
            for n in ("n1", "n2", "n3", "n4")
        ]
    )
    c = compare_job("8", [injob("8", n, False) for n in ("n1", "n2", "n3", "n4")], verdicts)
    assert c.caught == ("n5",) and c.miss == () and len(c.stayed_ok) == 4
    row = summarize([c])[0]
    assert row.caught == 1 and row.miss_rate == 0.0
    assert any("cannot be known" in line for line in unknowable([c]))


def test_slow_verdict_that_ran_anyway_is_confirmed_or_false_alarm() -> None:
    c = compare_job(
        "9",
        [injob("9", "a", True), injob("9", "b", False), injob("9", "c", False, judged=False)],
        [prolog("9", "a", SLOW), prolog("9", "b", Status.SLOW_WRITE), prolog("9", "c", OK)],
    )
    assert c.confirmed == ("a",) and c.false_alarm == ("b",) and c.not_judged == ("c",)


def test_unknown_and_unscreened_jobs_are_not_scored() -> None:
    c = compare_job("10", [injob("10", "a", True)], [prolog("10", "a", Status.UNKNOWN)])
    assert c.unscreened == ("a",) and c.miss == ()
    lone = compare_job("11", [injob("11", "a", True)], [])
    assert not lone.screened and lone.unscreened == ("a",)
    assert any("no prolog verdicts" in line for line in unknowable([c, lone]))


def test_summaries_per_partition_day_and_job() -> None:
    day2 = T0 + timedelta(days=1)
    rows = [injob("1", n, n == "a") for n in "abcd"] + [
        injob("2", n, False, part="gpu", at=day2) for n in "abcd"
    ]
    verdicts = [prolog("1", n, OK) for n in "abcd"] + [prolog("2", n, OK, at=day2) for n in "abcd"]
    jobs = compare_all(rows, verdicts)
    by_part = {r.group: r for r in summarize(jobs, "partition")}
    assert set(by_part) == {"batch", "gpu", "all"}
    assert by_part["batch"].misses == 1 and by_part["batch"].miss_rate == pytest.approx(0.25)
    assert by_part["gpu"].misses == 0 and by_part["all"].passed == 8
    assert by_part["all"].miss_rate == pytest.approx(1 / 8) and by_part["all"].missed_nodes == "a"
    days = [r.group for r in summarize(jobs, "day")]
    assert days == ["2026-11-01", "2026-11-02", "all"]
    assert [r.group for r in summarize(jobs, "job")] == ["1", "2"]
    with pytest.raises(ValueError, match="group by"):
        summarize(jobs, "week")


# ---- through the store --------------------------------------------------------------------


def _prolog_run(store: Store, job: str, statuses: dict[str, Status], at: datetime) -> int:
    nodes = sorted(statuses)
    run = store.start_run(Trigger.PROLOG, nodes, {}, job, ",".join(nodes), at)
    store.record_verdicts(run, RunSummary(tuple(Verdict(n, statuses[n], "seeded") for n in nodes)))
    store.finish_run(run, at + timedelta(seconds=20))
    return run


def _ingest(store: Store, job: str, files: list[str], at: datetime, replace: bool = False) -> int:
    nodes = ["node01", "node02", "node03", "node04"]
    figures = judge_job(
        load_files([DATA / f for f in files]), block_layout(nodes, 1), VerdictPolicy()
    )
    head = IngestHead(job, "batch", "node[01-04]", "block", tuple(files), figures.notes, at)
    rows, slow = store_rows(figures)
    return record_ingest(store, head, rows, slow, now=at + timedelta(seconds=5), replace=replace)


def test_accuracy_from_the_store_counts_the_miss(db_store: Store) -> None:
    four = {f"node0{i}": OK for i in range(1, 5)}
    _prolog_run(db_store, "500", four, T0)
    _ingest(db_store, "500", ["ior-fpp-slowrank-summary.json", "ior-fpp-slowrank-ranks.csv"], T0)
    _prolog_run(db_store, "501", four, T0 + timedelta(hours=1))
    _ingest(db_store, "501", ["ior-fpp-summary.json", "ior-fpp-ranks.csv"], T0 + timedelta(hours=1))
    _ingest(db_store, "502", ["fio-4jobs.json"], T0 + timedelta(hours=2))  # never screened
    _prolog_run(db_store, "999", four, T0)  # screened, never ingested: not in the figures
    rows = in_job_reads(db_store, T0 - timedelta(days=1))
    assert {r.job_id for r in rows} == {"500", "501", "502"}
    verdicts = prolog_verdicts(db_store, sorted({r.job_id for r in rows}))
    assert {v.job_id for v in verdicts} == {"500", "501"} and len(verdicts) == 8
    jobs = {c.job_id: c for c in compare_all(rows, verdicts)}
    assert jobs["500"].miss == ("node03",) and len(jobs["500"].stayed_ok) == 3
    # 501's healthy read phases lasted ~30 ms: too short to judge ([ingest] min_phase_s)
    assert jobs["501"].miss == () and len(jobs["501"].not_judged) == 4
    assert not jobs["502"].screened
    (total,) = summarize(list(jobs.values()), "partition")
    assert (total.jobs, total.screened_jobs, total.misses, total.passed) == (3, 2, 1, 4)
    assert in_job_reads(db_store, T0 + timedelta(minutes=30)) != rows  # window applies


def test_fast_path_nodes_count_as_screened_ok(db_store: Store) -> None:
    """Nodes the prolog let in unprobed (passed within fresh_s) are screened OK for the job:
    the slow one among them is a miss, not "unscreened"."""
    from screener.store.jobs import FAST_PATH_RUN
    from screener.store.slurm_records import SlurmRecords

    _prolog_run(db_store, "600", {"node01": OK, "node02": OK}, T0)
    passed = {"node03": T0 - timedelta(minutes=20), "node04": T0 - timedelta(minutes=5)}
    SlurmRecords(db_store).record_fast_path(passed, "600", T0, 3600.0)
    _ingest(db_store, "600", ["ior-fpp-slowrank-summary.json", "ior-fpp-slowrank-ranks.csv"], T0)
    rows = in_job_reads(db_store, T0 - timedelta(days=1))
    verdicts = prolog_verdicts(db_store, ["600"])
    fast = sorted(v.node for v in verdicts if v.run_id == FAST_PATH_RUN)
    assert fast == ["node03", "node04"] and all(v.status is OK for v in verdicts)
    (job,) = compare_all(rows, verdicts)
    assert job.miss == ("node03",) and job.unscreened == ()
    assert job.stayed_ok == ("node01", "node02", "node04")
    events = db_store.node_events("node03")
    assert [e.action for e in events] == ["fast_path"]
