"""Store API on both backends: round trips, history/flaky queries, atomic writes, errors."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import func, select
from store_data import at, error_probe, full_probe, verdict

from screener.errors import StoreError
from screener.probe_data import IostatSample, NodeProbe, RunSummary, Status, Trigger
from screener.store import Store, open_store, views
from screener.store.tables import Base

POLICY = {"verdict": {"max_write_read_ratio": 5.0}, "probe": {"client_keys": ("a", "b")}}

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_url, empty_db_url, pg_dbs, db_store


def new_run(s: Store, nodes: list[str], hours: float = 0.0, **kw: object) -> int:
    return s.start_run(
        kw.get("trigger", Trigger.SWEEP),  # type: ignore[arg-type]
        nodes,
        POLICY,
        kw.get("job_id"),  # type: ignore[arg-type]
        ",".join(nodes),
        at(hours),
    )


def run_with(s: Store, hours: float, statuses: dict[str, Status], **kw: object) -> int:
    """A finished run in which each node got the given status."""
    rid = new_run(s, sorted(statuses), hours, **kw)
    s.record_verdicts(rid, RunSummary(tuple(verdict(n, st) for n, st in statuses.items())))
    s.finish_run(rid, at(hours) + timedelta(minutes=1))
    return rid


def row_counts(s: Store) -> dict[str, int]:
    with s.engine.connect() as conn:
        return {
            t.name: int(conn.scalar(select(func.count()).select_from(t)) or 0)
            for t in Base.metadata.sorted_tables
        }


# ---- round trips -----------------------------------------------------------------------


def test_probe_round_trip_is_exact(db_store: Store) -> None:
    rid = new_run(db_store, ["node01", "node02"])
    good, bad = full_probe("node01"), error_probe("node02")
    db_store.record_probe(rid, good, 1)
    db_store.record_probe(rid, bad, 1)
    back = db_store.run_probes(rid, 1)
    assert back == [good, bad]  # every figure, sample order, facts, raw text, error
    assert back[0].facts is not None and back[0].facts.pcie_downgraded
    assert len(back[0].iostat) > 2 and back[0].raw_fio.startswith("seq_write: (g=0)")
    assert db_store.run_probes(rid, 2) == []


def test_round_two_is_stored_beside_round_one(db_store: Store) -> None:
    rid = new_run(db_store, ["node01"])
    first = full_probe("node01")
    slower = dataclasses.replace(first, facts=None, iostat=(), duration_s=20.0)
    db_store.record_probe(rid, first, 1)
    db_store.record_probe(rid, slower, 2)
    assert db_store.run_probes(rid, 1) == [first]
    assert db_store.run_probes(rid, 2) == [slower]


def test_run_lifecycle_and_timezones(db_store: Store) -> None:
    cest = timezone(timedelta(hours=2))
    rid = db_store.start_run(
        Trigger.PROLOG, ["node01", "node02"], POLICY, "4242", "node[01-02]", at(0).astimezone(cest)
    )
    (row,) = db_store.latest_runs(5)
    assert (row.id, row.status, row.finished_at, row.trigger) == (rid, "running", None, "prolog")
    assert row.started_at == at(0) and row.started_at.tzinfo == UTC
    summary = RunSummary(
        (
            verdict("node01", Status.OK, confirmed=False, signals=()),
            verdict(
                "node02",
                Status.SLOW_READ,
                12.5,
                z_read=-41.0,
                confirmed=True,
                signals=("peer_read", "ratio"),
            ),
        ),
        shared_cause=False,
        peer_read_median_mb_s=3000.0,
    )
    db_store.record_verdicts(rid, summary)
    db_store.finish_run(rid, at(0.1))
    (row,) = db_store.latest_runs(5)
    assert (row.status, row.finished_at, row.job_id, row.nodeset) == (
        "done",
        at(0.1),
        "4242",
        "node[01-02]",
    )
    assert (row.n_ok, row.n_slow, row.n_unknown, row.node_count) == (1, 1, 0, 2)
    assert db_store.run_verdicts(rid) == list(summary.verdicts)


def test_shared_cause_and_infinite_ratio_are_kept(db_store: Store) -> None:
    rid = new_run(db_store, ["node01"])
    dead = verdict("node01", Status.SLOW_READ, 0.0, z_read=float("nan"))
    assert dead.ratio == float("inf")
    db_store.record_verdicts(
        rid, RunSummary((dead,), shared_cause=True, shared_cause_reason="all slow")
    )
    (back,) = db_store.run_verdicts(rid)
    assert back.ratio == float("inf") and back.z_read is None  # NaN stored as "no figure"
    (row,) = db_store.latest_runs(1)
    assert row.shared_cause and row.shared_cause_reason == "all slow"


def test_latest_runs_is_newest_first_and_limited(db_store: Store) -> None:
    ids = [run_with(db_store, h, {"node01": Status.OK}) for h in (3, 1, 2)]
    assert [r.id for r in db_store.latest_runs(2)] == [ids[0], ids[2]]


# ---- history and flaky ---------------------------------------------------------------------


def test_read_history_is_ok_runs_only_newest_first(db_store: Store) -> None:
    reads = [(1, Status.OK, 3000.0), (2, Status.SLOW_READ, 20.0), (3, Status.OK, 3100.0)]
    reads += [(4, Status.UNKNOWN, 0.0), (5, Status.OK, 2900.0), (6, Status.OK, 3050.0)]
    for h, st, mb in reads:
        rid = new_run(db_store, ["node01", "node02"], h)
        db_store.record_verdicts(rid, RunSummary((verdict("node01", st, mb),)))
    assert db_store.read_histories(["node01"], 3)["node01"] == [3050.0e6, 2900.0e6, 3100.0e6]
    assert db_store.read_histories(["node01"], 10)["node01"] == [
        3050.0e6,
        2900.0e6,
        3100.0e6,
        3000.0e6,
    ]
    assert db_store.read_histories(["node02"], 5)["node02"] == []  # in runs, but never judged
    assert db_store.read_histories(["nobody"], 5)["nobody"] == []
    rid = new_run(db_store, ["node02"], 7)
    db_store.record_verdicts(rid, RunSummary((verdict("node02", Status.OK, 1234.5),)))
    assert db_store.read_histories(["node01", "node02", "nobody"], 3) == {
        "node01": [3050.0e6, 2900.0e6, 3100.0e6],
        "node02": [1234.5e6],
        "nobody": [],
    }


def test_read_tails_are_baselines_of_the_recipe_newest_first(db_store: Store) -> None:
    """The seq-read tails a short read compares with (verdict.usual.tail_ceilings): OK and
    baseline verdicts only (a DEGRADED usual_place one is a baseline), this recipe only,
    figures in ns; a verdict without a tail is left out."""
    rows = [(1, Status.OK, 60.0, "r1", False), (2, Status.SLOW_READ, 900.0, "r1", False)]
    rows += [(3, Status.DEGRADED, 65.0, "r1", True), (4, Status.OK, 5.0, "r2", False)]
    for h, st, p99, recipe, base in rows:
        rid = new_run(db_store, ["node01"], h)
        v = verdict("node01", st, read_p99_ms=p99, read_p999_ms=2 * p99, recipe=recipe)
        db_store.record_verdicts(rid, RunSummary((replace(v, baseline=base),)))
    rid = new_run(db_store, ["node01"], 5)
    db_store.record_verdicts(rid, RunSummary((verdict("node01", Status.OK, recipe="r1"),)))
    got = db_store.read_tails(["node01", "nobody"], 5, "r1")
    assert got == {"node01": [(65.0e6, 130.0e6), (60.0e6, 120.0e6)], "nobody": []}
    assert db_store.read_tails(["node01"], 1, "r1") == {"node01": [(65.0e6, 130.0e6)]}
    assert db_store.read_tails(["node01"], 5, "r2") == {"node01": [(5.0e6, 10.0e6)]}


def test_node_history_rows(db_store: Store) -> None:
    run_with(db_store, 1, {"node01": Status.OK, "node02": Status.OK}, trigger=Trigger.SWEEP)
    r2 = run_with(db_store, 2, {"node01": Status.SLOW_READ}, trigger=Trigger.PROLOG, job_id="77")
    hist = views.node_history(db_store, "node01", at(0))
    newest = hist[0]
    assert (newest.run_id, newest.status, newest.trigger, newest.job_id) == (
        r2,
        Status.SLOW_READ,
        Trigger.PROLOG,
        "77",
    )
    assert [h.status for h in hist] == [Status.SLOW_READ, Status.OK]
    assert hist[0].read_mb_s == 3000.0 and hist[0].reason == "node01 SLOW_READ"
    assert len(views.node_history(db_store, "node01", at(2))) == 1  # only run 2 since hour 2


def test_events(db_store: Store) -> None:
    rid = run_with(db_store, 1, {"node01": Status.SLOW_READ})
    db_store.record_event(
        "node01", "drain", "slow read", at(1.1), rid, "screener: slow read 12 MB/s"
    )
    db_store.record_event("node07", "resume", "passed", at(2))  # a node never screened is created
    events = db_store.node_events()
    assert [(e.node, e.action, e.run_id) for e in events] == [
        ("node07", "resume", None),
        ("node01", "drain", rid),
    ]
    assert events[1].slurm_reason == "screener: slow read 12 MB/s" and events[1].at == at(1.1)
    assert [e.action for e in db_store.node_events("node01")] == ["drain"]


# ---- atomicity and refusals ------------------------------------------------------------


def test_failed_probe_write_leaves_nothing_behind(db_store: Store) -> None:
    rid = new_run(db_store, ["node01"])
    before = row_counts(db_store)
    good = full_probe("node09")  # node09 is not yet known: even the node row must roll back
    bad = dataclasses.replace(
        good, iostat=(*good.iostat, dataclasses.replace(good.iostat[0], device=""))
    )
    with pytest.raises(StoreError) as err:
        db_store.record_probe(rid, bad, 1)  # the probe and jobs rows go in, then the sample fails
    msg = str(err.value)
    assert msg.startswith(f"cannot record the probe of node09 (run {rid}, round 1): ")
    assert "\n" not in msg and "device" in msg
    assert row_counts(db_store) == before
    db_store.record_probe(rid, good, 1)  # nothing left over blocks the retry
    assert db_store.run_probes(rid) == [good]


def test_refusals_are_one_line(db_store: Store) -> None:
    rid = new_run(db_store, ["node01"])
    probe = full_probe("node01")
    db_store.record_probe(rid, probe, 1)
    db_store.record_verdicts(rid, RunSummary((verdict("node01", Status.OK),)))
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: db_store.record_probe(999, probe, 1), "run 999 does not exist"),
        (lambda: db_store.record_probe(rid, probe, 1), "cannot record the probe of node01"),
        (lambda: db_store.record_probe(rid, probe, 0), "round must be a positive integer"),
        (
            lambda: db_store.record_verdicts(rid, RunSummary(())),
            f"verdicts of run {rid} are already recorded",
        ),
        (lambda: db_store.finish_run(999, at(1)), "run 999 does not exist"),
        (lambda: db_store.finish_run(rid, at(1), "exploded"), "run status must be one of"),
        (lambda: db_store.finish_run(rid, datetime(2025, 1, 1)), "must be a timezone-aware"),
        (lambda: new_run(db_store, ["node01; rm -rf /"]), "invalid node name"),
        (lambda: new_run(db_store, ["node01"], job_id="9" * 65), "job id must be 1..64 characters"),
        (lambda: db_store.record_event("node01", "reboot", "x", at(1)), "event action must be"),
        (
            lambda: db_store.record_event("node01", "drain", "x", at(1), 999),
            "run 999 does not exist",
        ),
        (
            lambda: db_store.record_probe(
                rid,
                NodeProbe(
                    "node01", iostat=(IostatSample("sda", "", float("nan"), 0, 0, 0, 0, 0, 0, 0),)
                ),
                2,
            ),
            "non-finite value iostat[0].r_s=nan",
        ),
    ]
    for call, expected in cases:
        with pytest.raises(StoreError) as err:
            call()
        assert expected in str(err.value) and "\n" not in str(err.value)
    assert db_store.run_probes(rid, 2) == []


# ---- concurrency and speed -------------------------------------------------------------


def test_concurrent_writers_all_succeed(db_url: str) -> None:
    """Prolog hooks of jobs starting together write at once (separate engines = separate
    connections, as separate processes would have)."""
    errors: list[BaseException] = []
    done: list[int] = []

    def hook(i: int) -> None:
        s = open_store(db_url)
        try:
            nodes = [f"node{i:02d}", "shared01"]  # everyone meets the same new node
            rid = s.start_run(Trigger.PROLOG, nodes, POLICY, str(i), "x", at(i))
            for n in nodes:
                s.record_probe(rid, full_probe(n), 1)
            s.record_verdicts(rid, RunSummary(tuple(verdict(n, Status.OK) for n in nodes)))
            s.finish_run(rid, at(i + 0.1))
            done.append(rid)
        except BaseException as exc:
            errors.append(exc)
        finally:
            s.close()

    threads = [threading.Thread(target=hook, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with open_store(db_url) as s:
        assert (
            len(s.latest_runs(10)) == 6 and len(s.read_histories(["shared01"], 10)["shared01"]) == 6
        )


def test_recording_a_32_node_run_is_fast(db_store: Store) -> None:
    base = full_probe("node00")
    samples = tuple(dataclasses.replace(base.iostat[i % len(base.iostat)]) for i in range(60))
    nodes = [f"node{i:02d}" for i in range(32)]
    rid = new_run(db_store, nodes)
    t0 = time.perf_counter()
    for n in nodes:
        db_store.record_probe(rid, dataclasses.replace(base, node=n, iostat=samples), 1)
    elapsed = time.perf_counter() - t0
    print(f"\n32 x record_probe (3 jobs + 60 iostat rows + facts): {elapsed * 1000:.0f} ms")
    assert row_counts(db_store)["iostat_samples"] == 32 * 60
    assert elapsed < 4.0  # about 0.1-0.3 s here; seconds would mean row-by-row round trips
