"""`screener ingest` and `screener accuracy` end to end (subprocess) on SQLite and on the
real PostgreSQL: records, in-job episodes, refusal to double-ingest, clean errors."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from screener.cli import main
from screener.probe_data import RunSummary, Status, Trigger, Verdict
from screener.store import open_store
from screener.store.engine import make_engine
from screener.store.tables import EpisodeRecord, JobIngestRecord, JobResultRecord, NodeRecord
from tests import cli_fork

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_url, pg_dbs

DATA = Path(__file__).resolve().parent / "data" / "ior"
SLOW_RUN = [str(DATA / "ior-fpp-slowrank-summary.json"), str(DATA / "ior-fpp-slowrank-ranks.csv")]
NORMAL_RUN = [str(DATA / "ior-fpp-summary.json"), str(DATA / "ior-fpp-ranks.csv")]
LAYOUT = ["--nodes", "node[01-04]", "--ranks-per-node", "1"]


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return cli_fork.run(
        args,
        timeout=120,
        env={**os.environ, "SCREENER_DATABASE_URL": url, "SCREENER_CONFIG": ""},
    )


def episodes(url: str) -> list[tuple[str, str, str | None, str]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(
                    NodeRecord.name,
                    EpisodeRecord.trigger,
                    EpisodeRecord.job_id,
                    EpisodeRecord.reason,
                )
                .join(NodeRecord, NodeRecord.id == EpisodeRecord.node_id)
                .order_by(EpisodeRecord.id)
            ).all()
        return [tuple(r) for r in rows]  # type: ignore[misc]
    finally:
        engine.dispose()


def count(url: str, table: type) -> int:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.scalar(select(func.count()).select_from(table)) or 0)
    finally:
        engine.dispose()


def seed_prolog(url: str, job: str, at: datetime) -> None:
    nodes = [f"node0{i}" for i in range(1, 5)]
    with open_store(url) as store:
        run = store.start_run(Trigger.PROLOG, nodes, {}, job, "node[01-04]", at)
        store.record_verdicts(
            run, RunSummary(tuple(Verdict(n, Status.OK, "seeded") for n in nodes))
        )
        store.finish_run(run, at + timedelta(seconds=10))


def test_ingest_slow_run_records_figures_and_one_in_job_episode(db_url: str) -> None:
    out = cli(db_url, "ingest", "4242", *SLOW_RUN, *LAYOUT, "--partition", "batch", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    nodes = [r for r in doc["records"] if r["node"] is not None]
    assert len(nodes) == 16  # 4 nodes x 2 phases x 2 iterations
    assert {(r["node"], r["phase"]) for r in nodes if r["outlier"]} == {("node03", "read")}
    assert all({"node", "phase", "throughput_bytes_s", "outlier"} <= set(r) for r in nodes)
    assert [s["node"] for s in doc["in_job_slow"]] == ["node03"]
    eps = episodes(db_url)
    assert len(eps) == 1 and eps[0][:3] == ("node03", "job", "4242")
    assert eps[0][3].startswith("in-job read")
    assert count(db_url, JobResultRecord) == 20  # 16 node rows + 4 whole-job rows

    shown = json.loads(cli(db_url, "job", "4242", "--json").stdout)
    assert len(shown) == 20 and shown[0]["node"] is None  # whole job first
    assert [(r["node"], r["iteration"]) for r in shown if r["outlier"]] == [
        ("node03", 0),
        ("node03", 1),
    ]
    table = cli(db_url, "job", "4242")  # the stored notes: which phases went unjudged
    assert table.returncode == 0 and "note: write too short to judge in iteration(s) 0, 1:" in (
        " ".join(table.stdout.split())
    )
    missing = cli(db_url, "job", "4243")
    assert missing.returncode == 1 and "has not been ingested" in missing.stderr

    again = cli(db_url, "ingest", "4242", *SLOW_RUN, *LAYOUT)
    assert again.returncode == 1 and "already ingested" in again.stderr
    assert again.stderr.count("\n") == 1 and "Traceback" not in again.stderr
    assert count(db_url, JobResultRecord) == 20 and len(episodes(db_url)) == 1

    replaced = cli(db_url, "ingest", "4242", *NORMAL_RUN, *LAYOUT, "--replace")
    assert replaced.returncode == 0, replaced.stderr
    # its ~30 ms read phases are too short to judge: no episode, and the output says why
    assert "no phase was judged" in replaced.stdout
    assert "note: read too short to judge in iteration(s) 0, 1:" in replaced.stdout
    assert episodes(db_url) == [] and count(db_url, JobIngestRecord) == 1


def test_normal_run_records_no_episode_and_csv_output(db_url: str) -> None:
    out = cli(db_url, "ingest", "77", *NORMAL_RUN, *LAYOUT, "--csv")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("node,phase,iteration,ranks,bytes,seconds,throughput_bytes_s")
    assert len(lines) == 1 + 20 and not any(line.endswith(",True,ior_csv") for line in lines)
    assert episodes(db_url) == []


def test_bad_input_is_one_line_and_stores_nothing(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process (the same main() the console script runs): 10 cases x 2 backends."""
    monkeypatch.setenv("SCREENER_DATABASE_URL", db_url)
    monkeypatch.setenv("SCREENER_CONFIG", "")
    cases = [
        (["ingest", "5", str(DATA / "corrupt-truncated-block-ranks.csv"), *LAYOUT], "truncated"),
        (["ingest", "5", str(DATA / "corrupt-truncated-summary.json")], "not valid JSON"),
        (["ingest", "5", SLOW_RUN[1]], "task layout"),
        (
            ["ingest", "5", SLOW_RUN[1], "--nodes", "node[01-03]", "--ranks-per-node", "1"],
            "outside",
        ),
        (["ingest", "5;rm", SLOW_RUN[1], *LAYOUT], "invalid job id"),
        (["ingest", "5", SLOW_RUN[1], "--nodes", "node[01-04]"], "together"),
        (["ingest", "5", "/nonexistent/file.csv"], "cannot read"),
        (["accuracy", "--since", "tomorrow"], "invalid --since"),
        (["ingest", "5", "--dir", str(DATA), *LAYOUT], "no outputs of job 5"),
        (["ingest", "5", SLOW_RUN[1], "--dir", str(DATA), *LAYOUT], "one of the two"),
    ]
    for args, message in cases:
        assert main(args) == 1, args
        err = capsys.readouterr().err
        assert err.startswith("screener: error:") and message in err, err
        assert err.count("\n") == 1
    assert count(db_url, JobIngestRecord) == 0 and episodes(db_url) == []


def test_accuracy_counts_one_miss_and_says_what_it_cannot_know(db_url: str) -> None:
    now = datetime.now(UTC)
    seed_prolog(db_url, "600", now - timedelta(hours=2))
    seed_prolog(db_url, "601", now - timedelta(hours=1))
    assert cli(db_url, "ingest", "600", *SLOW_RUN, *LAYOUT, "--partition", "batch").returncode == 0
    assert (
        cli(db_url, "ingest", "601", *NORMAL_RUN, *LAYOUT, "--partition", "batch").returncode == 0
    )
    old = (now - timedelta(days=40)).isoformat()
    ingest_old = cli(db_url, "ingest", "500", *SLOW_RUN, *LAYOUT, "--observed-at", old)
    assert ingest_old.returncode == 0, ingest_old.stderr
    out = cli(db_url, "accuracy", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    (row,) = doc["rows"]  # the 40-day-old job is outside the default 30d window
    assert row["group"] == "batch" and row["jobs"] == 2 and row["misses"] == 1
    assert row["passed"] == 4 and row["missed_nodes"] == "node03"  # 601 had 30 ms reads
    assert row["not_judged"] == 4
    assert any("cannot be known" in line for line in doc["cannot_know"])
    short = [(s["job_id"], s["note"].split(":")[0]) for s in doc["too_short"]]
    assert ("601", "read too short to judge in iteration(s) 0, 1") in short
    assert all(job == "601" or "write" in note for job, note in short)  # 600's reads judged
    wide = json.loads(cli(db_url, "accuracy", "--since", "60d", "--by", "job", "--json").stdout)
    assert [r["group"] for r in wide["rows"]] == ["500", "600", "601"]
    table = cli(db_url, "accuracy")
    assert table.returncode == 0 and "node03" in table.stdout and "cannot know" in table.stdout
    assert "not judged: job 601: read too short to judge" in table.stdout
