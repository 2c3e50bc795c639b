"""Issue 45, the spool side: drains journalled with a spooled run and epilog ingests are
replayed into the store exactly once, by one replayer, twice, or two at once (real
processes over one spool directory), bounded for hooks, never a run still being written.
SQLite and PostgreSQL (the shared server: a fresh database per test, store_fixtures)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, func, select

from screener import run_marker, spool
from screener.probe_data import NodeProbe, RunSummary, Status, Trigger, Verdict
from screener.store import Store, open_store
from screener.store.engine import describe, parse_url
from screener.store.jobs import IngestHead, ResultRow, SlowRow, job_results
from screener.store.slurm_records import SlurmRecords
from screener.store.tables import (
    EpisodeRecord,
    EventRecord,
    NodeProbeRecord,
    RunRecord,
    VerdictRecord,
)

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_url, pg_dbs

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
REASON = "screener: rd 0.05x peers"


def _spool_run(spool_dir: Path, db: str, uid: str, slow: str, others: list[str]) -> Path:
    """A prolog run spooled from the start (the DB down) whose slow node was drained, as
    execute.py journals it: run, verdicts, finish, then the drain's two phases."""
    rec = spool.SpoolingStore(None, str(spool_dir), uid, "down", db=db)
    nodes = [slow, *others]
    run = rec.start_run(Trigger.PROLOG, nodes, {"k": 1}, "77", ",".join(nodes), NOW)
    verdicts = [Verdict(slow, Status.SLOW_READ, "slow", read_mb_s=5.0, confirmed=True)]
    verdicts += [Verdict(n, Status.OK, "within peers", read_mb_s=300.0) for n in others]
    rec.record_verdicts(run, RunSummary(tuple(verdicts)))
    rec.finish_run(run, NOW + timedelta(seconds=20))
    journal = spool.SpooledDrains(rec.path, Trigger.PROLOG, "77")
    journal.intend(slow, REASON)
    journal.drained(slow, REASON)
    journal.guard("guard: 1 of 3 allocated nodes slow (test)", [others[0]])
    return rec.path


def _half_store(store: Store, path: Path, probes: int) -> int:
    """What a prolog that lost its database after ``probes`` probe writes left there: its
    run (status running, tagged) and those probes, from the spool file's own entries."""
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    head = lines[0]
    run_id = store.start_run(
        Trigger(head["trigger"]),
        head["nodes"],
        head["policy"],
        head["job_id"],
        head["nodeset"],
        datetime.fromisoformat(head["started_at"]),
    )
    for e in [e for e in lines if e["kind"] == "probe"][:probes]:
        store.record_probe(run_id, spool.from_json(NodeProbe, e["probe"]), e["round"])
    return run_id


def _spool_probed_run(spool_dir: Path, db: str, uid: str) -> Path:
    """A run whose probes were spooled too: round 1 of n01 and n02, round 2 of n01."""
    path = _spool_run(spool_dir, db, uid, "n01", ["n02", "n03"])
    probes = [("n01", 1), ("n02", 1), ("n01", 2)]
    entries = [
        {"kind": "probe", "round": r, "probe": spool.to_json(NodeProbe(n, duration_s=r))}
        for n, r in probes
    ]
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], *map(json.dumps, entries), *lines[1:]]) + "\n")
    return path


def test_a_half_stored_run_is_completed_not_stored_again(db_url: str, tmp_path: Path) -> None:
    """The DB failed mid-run: its start and first probe are in, the rest spooled. Replay
    completes that row (one runs row per tag), and a replay cut short by an error leaves
    nothing of itself (one transaction), so the next one completes it exactly once."""
    sp, where = tmp_path / "spool", _where(db_url)
    path = _spool_probed_run(sp, where, "20261201090000-dddddddddddd")
    good = path.read_text()
    with open_store(db_url, upgrade=True) as store:
        run_id = _half_store(store, path, probes=1)
        # A replay that fails after writing a probe: its last probe names a bad node.
        lines = [json.loads(x) for x in good.splitlines()]
        lines[3]["probe"]["node"] = "bad node"  # round 2 of n01, after n02's probe
        path.write_text("".join(json.dumps(e) + "\n" for e in lines))
        (cut,) = spool.replay(store, str(sp), where)
        assert cut.outcome.startswith("error: ") and "bad node" in cut.outcome
        assert path.exists()
        assert _count(store, NodeProbeRecord) == 1 and _count(store, VerdictRecord) == 0
        assert _count(store, EventRecord) == 0 and store.latest_runs(1)[0].status == "running"
        path.write_text(good)
        (done,) = spool.replay(store, str(sp), where)
        assert (done.outcome, done.run_id) == ("stored", run_id)
        assert _count(store, RunRecord) == 1
        assert _count(store, NodeProbeRecord) == 3 and _count(store, VerdictRecord) == 3
        (run,) = store.latest_runs(5)
        assert run.status == "done" and run.finished_at == NOW + timedelta(seconds=20)
        assert [e.action for e in store.node_events("n01")] == ["drain", "drain_pending"]
        path.write_text(good)  # the file again (a crash after the commit, before the unlink)
        (again,) = spool.replay(store, str(sp), where)
        assert (again.outcome, again.run_id) == ("already stored", run_id)
        assert _count(store, NodeProbeRecord) == 3 and _count(store, EventRecord) == 3


def test_a_killed_runs_failed_guess_gives_way_to_its_spooled_finish(tmp_path: Path) -> None:
    """A run marked failed by finish_stale (its process killed after its spooled finish):
    the spool's finish and the rest of the run are stored, not skipped as already stored."""
    url = f"sqlite:///{tmp_path}/s.db"
    sp, where = tmp_path / "spool", _where(url)
    path = _spool_probed_run(sp, where, "20261201090000-eeeeeeeeeeee")
    with open_store(url, upgrade=True) as store:
        run_id = _half_store(store, path, probes=0)
        store.finish_run(run_id, NOW, "failed")
        (done,) = spool.replay(store, str(sp), where)
        assert (done.outcome, done.run_id) == ("stored", run_id)
        assert store.latest_runs(1)[0].status == "done"
        assert _count(store, NodeProbeRecord) == 3 and _count(store, RunRecord) == 1


def _count(store: Store, table: Any, *where: ColumnElement[bool]) -> int:
    with store.reading("count") as conn:
        return int(conn.scalar(select(func.count()).select_from(table).where(*where)) or 0)


def _where(url: str) -> str:
    return describe(parse_url(url))


def test_a_spooled_drain_is_replayed_once_with_its_episode(db_url: str, tmp_path: Path) -> None:
    sp = tmp_path / "spool"
    path = _spool_run(sp, _where(db_url), "20261201090000-aaaaaaaaaaaa", "n01", ["n02", "n03"])
    kinds = [json.loads(x)["kind"] for x in path.read_text().splitlines()]
    assert kinds == [
        "run", "verdicts", "finish", "drain_pending", "drain", "guard_reason", "guard_trip"
    ]  # fmt: skip
    assert spool.waiting(path) == {"run": 1, "drain events": 2}
    copy = tmp_path / "copy.jsonl"
    shutil.copy(path, copy)
    with open_store(db_url, upgrade=True) as store:
        (first,) = spool.replay(store, str(sp), _where(db_url))
        assert first.outcome == "stored" and not path.exists()
        shutil.copy(copy, path)  # the same file again (a crash before its removal)
        (again,) = spool.replay(store, str(sp), _where(db_url))
        assert again.outcome == "already stored" and again.run_id == first.run_id
        assert _count(store, RunRecord) == 1 and _count(store, VerdictRecord) == 3
        (run,) = store.latest_runs(1)
        assert run.status == "done" and run.job_id == "77"
        events = store.node_events("n01")
        assert [e.action for e in events] == ["drain", "drain_pending"]
        assert {e.slurm_reason for e in events} == {REASON}
        assert {e.run_id for e in events} == {first.run_id}
        rec = SlurmRecords(store)
        assert rec.screener_reason("n01") == REASON  # resumable once replayed
        assert [(e[0], e[2], e[3]) for e in rec.episodes("n01")] == [("prolog", None, "77")]
        assert [e.action for e in store.node_events("n02")] == ["guard_trip"]
        assert rec.pending_drains() == []


def test_an_intent_without_outcome_stays_pending_for_the_next_run(tmp_path: Path) -> None:
    """Killed between the journal's intent and scontrol's outcome: replayed as an intent,
    which the next run settles against Slurm (finish_pending), as with the store up."""
    url = f"sqlite:///{tmp_path}/s.db"
    rec = spool.SpoolingStore(
        None, str(tmp_path / "sp"), "20261201090000-bbbbbbbbbbbb", "x", db=_where(url)
    )
    run = rec.start_run(Trigger.PROLOG, ["n01"], {}, "5", "n01", NOW)
    spool.SpooledDrains(rec.path, Trigger.PROLOG, "5").intend("n01", REASON)
    del run
    with open_store(url, upgrade=True) as store:
        (done,) = spool.replay(store, str(tmp_path / "sp"), _where(url))
        assert done.outcome == "stored"
        assert store.latest_runs(1)[0].status == "failed"  # it never finished
        (pending,) = SlurmRecords(store).pending_drains()
        assert (pending.node, pending.reason, pending.job_id) == ("n01", REASON, "5")


REPLAYER = """
import json, sys, time
from pathlib import Path
from screener import spool
from screener.store import open_store
url, spool_dir, where, gate = sys.argv[1:5]
store = open_store(url)
deadline = time.monotonic() + 60
while not Path(gate).exists() and time.monotonic() < deadline:
    time.sleep(0.005)  # both replayers start together: the gate is a real condition
done = spool.replay(store, spool_dir, where, max_files=None, budget_s=None)
print(json.dumps([[Path(r.path).name, r.outcome] for r in done]))
"""


def test_two_replayers_at_once_store_everything_once(db_url: str, tmp_path: Path) -> None:
    sp, where = tmp_path / "spool", _where(db_url)
    n = 12
    paths = [
        _spool_run(sp, where, f"20261201090{i:03d}-{i:012x}", f"s{i:02d}", [f"h{i:02d}a"])
        for i in range(n)
    ]
    with open_store(db_url, upgrade=True) as store:
        for path in paths[::2]:  # half of them half-stored: the DB failed after their start
            _half_store(store, path, probes=0)
    gate = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", REPLAYER, db_url, str(sp), where, str(gate)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    gate.touch()  # both wait for it: they replay at once
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out))
    stored = [name for out in outs for name, outcome in out if outcome == "stored"]
    assert sorted(stored) == sorted({*stored}) and len(stored) == n, outs
    assert spool.spool_files(str(sp)) == []
    with open_store(db_url) as store:
        assert _count(store, RunRecord) == n
        assert _count(store, RunRecord, RunRecord.status == "done") == n
        assert _count(store, VerdictRecord) == 2 * n
        assert _count(store, EventRecord, EventRecord.action == "drain") == n
        assert _count(store, EventRecord, EventRecord.action == "drain_pending") == n
        assert _count(store, EventRecord, EventRecord.action == "guard_trip") == n
        assert _count(store, EpisodeRecord) == n


def test_hooks_replay_a_bounded_share_and_never_a_live_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    sp, where = tmp_path / "spool", _where(url)
    uids = [f"2026120109000{i}-{i:012x}" for i in range(4)]
    for i, uid in enumerate(uids):
        _spool_run(sp, where, uid, f"s{i}", [f"h{i}a", f"h{i}b"])
    live = run_marker.mark_live(str(sp), uids[0], ["s0"], "ssh")  # this process: alive
    assert live is not None and run_marker.is_live(str(sp), uids[0])
    with open_store(url, upgrade=True) as store:
        assert spool.replay(store, str(sp), where, budget_s=0.0) == []  # no time: nothing
        done = spool.replay(store, str(sp), where, max_files=2)
        assert [r.outcome for r in done] == ["skipped: its run is still going", "stored", "stored"]
        assert len(spool.spool_files(str(sp))) == 2  # the live one and the third
        live.unlink()
        rest = spool.replay(store, str(sp), where)
        assert [r.outcome for r in rest] == ["stored", "stored"]
        assert spool.replayed_line(done) == "1 skipped, 2 stored"
        assert _count(store, RunRecord) == 4
    assert spool.spooled_since(str(sp), time.time() + 1) is False


def test_a_spooled_ingest_is_replayed_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    sp, where = tmp_path / "spool", _where(url)
    head = IngestHead("4242", "debug", "n[01-02]", "block", ("ior:ior-4242.txt",), (), NOW)
    rows = [
        ResultRow("n01", "read", 0, 1, 1 << 30, 2.0, 5e8, 1.0, 0.1, False, "ior_csv"),
        ResultRow("n02", "read", 0, 1, 1 << 30, 200.0, 5e6, 0.01, -9.0, True, "ior_csv"),
    ]
    slow = [SlowRow("n02", "in-job read 0.01x of the job's median")]
    doc = {
        "head": spool.to_json(head),
        "rows": spool.to_json(rows),
        "slow": spool.to_json(slow),
        "ingested_at": NOW.isoformat(),
    }
    path = spool.spool_ingest(str(sp), where, "20261201090000-cccccccccccc", doc)
    assert path.stat().st_mode & 0o777 == 0o600 and spool.waiting(path) == {"ingest": 1}
    copy = tmp_path / "copy.json"
    shutil.copy(path, copy)
    with open_store(url, upgrade=True) as store:
        (first,) = spool.replay(store, str(sp), where)
        assert first.outcome == "stored" and first.run_id is not None
        shutil.copy(copy, path)
        (again,) = spool.replay(store, str(sp), where)
        assert again.outcome == "already stored"
        got = job_results(store, "4242")
        assert sorted((r.node, r.outlier) for r in got) == [("n01", False), ("n02", True)]
        assert [e[3] for e in SlurmRecords(store).episodes("n02")] == ["4242"]
    assert spool.ingest_files(str(sp)) == [] and not os.path.exists(path)
