"""In-job attribution needs evidence that survives noise (issue 19, item 3): real IOR outputs
of jobs/ior.sbatch on the emulated cluster (tests/data/ior/README.md, `cluster/`).

- a healthy run with 3-12 ms read phases: node02 read 0.31x in one iteration, which gave a
  healthy node an in-job episode; now those phases are too short to judge, and say so;
- a node throttled to 20 MB/s for the whole job: an episode (2 of 2 judged iterations);
- a node at 0.37x in one of three ~0.8 s iterations: judged, but one non-decisive
  iteration is not an episode (unless [ingest] decisive_ratio is set above 0.37).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from screener.ingest.accuracy import compare_all, too_short
from screener.ingest.files import load_files
from screener.ingest.judge import JobFigures, judge_job
from screener.ingest.layout import block_layout
from screener.ingest.results import Phase
from screener.ingest.service import store_rows
from screener.policy import IngestPolicy, VerdictPolicy, policy_from_dict
from screener.probe_data import RunSummary, Status, Trigger, Verdict
from screener.store import Store
from screener.store.jobs import (
    IngestHead,
    in_job_reads,
    ingest_notes,
    prolog_verdicts,
    record_ingest,
)

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_url, db_store, pg_dbs

CLUSTER = Path(__file__).resolve().parent / "data" / "ior" / "cluster"
NODES = ["node01", "node02", "node03", "node04"]
RUNS = {"healthy": "1", "throttled": "2", "transient": "3"}


def files(run: str) -> list[Path]:
    job = RUNS[run]
    return [CLUSTER / run / f"ior-{job}.summary.json", CLUSTER / run / f"ior-{job}.ranks.csv"]


def judged(run: str, rules: IngestPolicy | None = None) -> JobFigures:
    layout = block_layout(NODES, 1)
    return judge_job(load_files(files(run)), layout, VerdictPolicy(), rules or IngestPolicy())


def test_healthy_short_phases_are_not_judged_and_say_so() -> None:
    job = judged("healthy")
    assert job.slow == ()
    nodes = [f for f in job.figures if f.node is not None]
    assert len(nodes) == 16 and all(f.z is None and not f.outlier for f in nodes)
    read0 = {f.node: f for f in nodes if f.phase is Phase.READ and f.iteration == 0}
    assert read0["node02"].ratio is not None and read0["node02"].ratio < 0.35  # the noise
    assert [n.split(":")[0] for n in job.notes] == [
        "read too short to judge in iteration(s) 0, 1",
        "write too short to judge in iteration(s) 0, 1",
    ]
    assert "longest node 0.012 s" in job.notes[0] and "min_phase_s=0.5" in job.notes[0]


def test_a_throttled_node_is_an_episode_in_every_judged_iteration() -> None:
    job = judged("throttled")
    assert [s.node for s in job.slow] == ["node02"]
    assert job.slow[0].reason.startswith("in-job read 20 MB/s")
    assert job.slow[0].reason.endswith("in 2 of 2 judged iterations")
    reads = {(f.node, f.iteration): f for f in job.figures if f.phase is Phase.READ}
    assert reads[("node02", 0)].outlier and reads[("node02", 1)].outlier
    assert not any(f.outlier for f in job.figures if f.node != "node02")
    assert job.notes[0].startswith("write too short to judge in iteration(s) 0, 1")


def test_one_non_decisive_iteration_is_not_an_episode() -> None:
    job = judged("transient")
    assert job.slow == () and not any(f.outlier for f in job.figures)
    first = next(
        f for f in job.figures if (f.node, f.phase, f.iteration) == ("node03", Phase.READ, 0)
    )
    assert first.z is not None and first.z < -3.5  # the peers rule alone would flag it
    assert first.ratio is not None and 0.3 < first.ratio < 0.4
    assert job.notes == (
        "node03 read: an outlier in 1 of 3 judged iterations (worst 0.37x job median), "
        "neither most of them nor <= 0.1x in one: not counted",
    )
    # a site that takes a 0.37x iteration as decisive gets the episode
    bold = judged("transient", IngestPolicy(decisive_ratio=0.4))
    assert [s.node for s in bold.slow] == ["node03"]
    assert bold.slow[0].reason.endswith("in 1 of 3 judged iterations")


def test_no_minimum_judges_the_short_phases() -> None:
    """min_phase_s = min_phase_mib = 0 judges everything: the persistence rule still keeps
    node02's single 0.31x iteration (1 of 2) from being an episode."""
    job = judged("healthy", IngestPolicy(min_phase_s=0.0, min_phase_mib=0.0))
    assert job.slow == () and all(f.z is not None for f in job.figures if f.node is not None)
    assert any(n.startswith("node02 read: an outlier in 1 of 2") for n in job.notes)


def test_policy_keys_are_read_and_bounded() -> None:
    p = policy_from_dict({"ingest": {"min_phase_s": 2, "min_phase_mib": 64.5}})
    assert (p.ingest.min_phase_s, p.ingest.min_phase_mib) == (2, 64.5)
    for key, bad in (
        ("min_phase_s", -1),
        ("min_phase_s", 1e9),
        ("min_phase_mib", -0.5),
        ("decisive_ratio", 0),
        ("decisive_ratio", 1),
        ("min_iostat_samples", 0),
    ):
        with pytest.raises(Exception, match=f"ingest.{key}"):
            policy_from_dict({"ingest": {key: bad}})


def _screened(store: Store, job: str, at: datetime) -> None:
    run = store.start_run(Trigger.PROLOG, NODES, {}, job, "node[01-04]", at)
    store.record_verdicts(run, RunSummary(tuple(Verdict(n, Status.OK, "seeded") for n in NODES)))
    store.finish_run(run, at + timedelta(seconds=20))


def test_accuracy_counts_no_miss_for_noise_and_names_the_short_phases(db_store: Store) -> None:
    at = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    for i, run in enumerate(RUNS):
        job = RUNS[run]
        _screened(db_store, job, at + timedelta(hours=i))
        figures = judged(run)
        head = IngestHead(job, "debug", "node[01-04]", "block", (run,), figures.notes, at)
        rows, slow = store_rows(figures)
        record_ingest(db_store, head, rows, slow, now=at + timedelta(hours=i, minutes=5))
    reads = in_job_reads(db_store, at - timedelta(days=1))
    jobs = {c.job_id: c for c in compare_all(reads, prolog_verdicts(db_store, ["1", "2", "3"]))}
    assert jobs["1"].miss == () and jobs["1"].not_judged == tuple(NODES)  # too short
    assert jobs["2"].miss == ("node02",)  # the throttled node, passed by the prolog
    assert jobs["3"].miss == () and jobs["3"].stayed_ok == tuple(NODES)  # one-off, judged
    short = too_short(ingest_notes(db_store, ["1", "2", "3"]))
    assert [(j, n.split(":")[0]) for j, n in short] == [
        ("1", "read too short to judge in iteration(s) 0, 1"),
        ("1", "write too short to judge in iteration(s) 0, 1"),
        ("2", "write too short to judge in iteration(s) 0, 1"),
    ]


def test_a_replacing_ingest_keeps_the_in_job_iostat_episode(db_store: Store) -> None:
    """The epilog stores in-job iostat (episode "in-job r_await ...") and then ingests with
    replace: a requeued job's second ingest must remove only the ingest's own episodes."""
    from screener.store.slurm_records import SlurmRecords

    at = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    figures = judged("throttled")
    head = IngestHead("2", "debug", "node[01-04]", "block", ("x",), figures.notes, at)
    rows, slow = store_rows(figures)
    record_ingest(db_store, head, rows, slow, now=at)
    records = SlurmRecords(db_store)
    iostat = "in-job r_await 266ms vs job median 0.4ms (util 67%, 9 samples)"
    assert records.open_episode("node04", Trigger.JOB, at, iostat, None, "2")
    record_ingest(db_store, head, rows, slow, now=at + timedelta(minutes=1), replace=True)
    assert [e[3] for e in records.episodes("node04")] == ["2"]  # still there
    assert len(records.episodes("node02")) == 1  # the ingest's own, replaced once


def test_the_epilog_line_names_the_phases_too_short_to_judge() -> None:
    from screener.epilog.ingest import ingested_line
    from screener.ingest.service import Ingested

    line = ingested_line(Ingested("1", judged("healthy"), "block", 7), "comment names X")
    assert line == (
        "job 1: ingested (comment names X) as ingest 7; in-job slow: none; read too short "
        "to judge in iteration(s) 0, 1; write too short to judge in iteration(s) 0, 1"
    )
    line = ingested_line(Ingested("2", judged("throttled"), "block", 8), "comment names X")
    assert "in-job slow: node02; write too short" in line
