"""History that still applies (issue 8 §2, §3): only the same probe recipe, within an age
window, and baselines (OK or absolved by a shared cause), on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from store_data import at, verdict

from screener.policy import ProbePolicy
from screener.probe.fio import recipe_fingerprint
from screener.probe_data import FleetFigure, RunSummary, Status, Trigger
from screener.store import Store
from screener.store.history import past_figures

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_url, empty_db_url, pg_dbs, db_store


def judged(s: Store, hours: float, node: str, mb: float, **kw: object) -> int:
    rid = s.start_run(Trigger.SWEEP, [node], {}, None, node, at(hours))
    s.record_verdicts(rid, RunSummary((verdict(node, kw.pop("status", Status.OK), mb, **kw),)))
    return rid


def test_recipe_fingerprint_names_what_changes_the_figures() -> None:
    base = ProbePolicy()
    assert recipe_fingerprint(base) == recipe_fingerprint(ProbePolicy())
    assert len(recipe_fingerprint(base)) == 16
    for change in ({"iodepth": 8}, {"size_mib": 64}, {"seq_bs": "4M"}, {"target": "/tmp"}):
        assert recipe_fingerprint(ProbePolicy(**change)) != recipe_fingerprint(base)  # type: ignore[arg-type]
    assert recipe_fingerprint(ProbePolicy(seq_bs="1m")) == recipe_fingerprint(base)


def test_history_is_same_recipe_and_within_the_age_window(db_store: Store) -> None:
    judged(db_store, 0, "n1", 9000.0, recipe="old")  # another recipe: 9 GB/s
    judged(db_store, 1, "n1", 100.0, recipe="new")  # same recipe but too old
    for h, mb in ((100, 3000.0), (101, 3100.0), (102, 2900.0)):
        judged(db_store, h, "n1", mb, recipe="new")
    since = at(50)
    assert db_store.read_histories(["n1"], 10, "new", since)["n1"] == [2900e6, 3100e6, 3000e6]
    assert db_store.read_histories(["n1"], 10, "new") == {"n1": [2900e6, 3100e6, 3000e6, 100e6]}
    assert db_store.read_histories(["n1"], 10, "old", since)["n1"] == []
    assert db_store.read_histories(["n1"], 10)["n1"] == [2900e6, 3100e6, 3000e6, 100e6, 9000e6]


def test_shared_cause_baselines_feed_history(db_store: Store) -> None:
    judged(db_store, 1, "n1", 3000.0, recipe="r")
    judged(db_store, 2, "n1", 500.0, recipe="r", status=Status.UNKNOWN, baseline=True)
    judged(db_store, 3, "n1", 1.0, recipe="r", status=Status.UNKNOWN)  # an error: not history
    slow = judged(db_store, 4, "n1", 20.0, recipe="r", status=Status.SLOW_READ)
    assert db_store.read_histories(["n1"], 10, "r")["n1"] == [500e6, 3000e6]
    (back,) = db_store.run_verdicts(slow)
    assert back.status == Status.SLOW_READ and not back.baseline


def test_fleet_figures_are_other_nodes_newest_same_recipe_recent(db_store: Store) -> None:
    judged(db_store, 1, "f1", 2000.0, recipe="r")
    judged(db_store, 5, "f1", 3000.0, recipe="r")  # newest of f1
    judged(db_store, 6, "f2", 3100.0, recipe="r")
    judged(db_store, 6, "f3", 9999.0, recipe="other")
    judged(db_store, 7, "me", 3050.0, recipe="r")  # in the run: not a borrowed peer
    judged(db_store, -100, "f4", 3200.0, recipe="r")  # outside the window
    got = db_store.read_fleet(["me"], "r", at(0), 10)
    assert sorted(got, key=lambda f: f.node) == [
        FleetFigure("f1", 3000e6, 3100e6, None),
        FleetFigure("f2", 3100e6, 3100e6, None),
    ]
    assert [f.node for f in got] == ["f2", "f1"]  # newest first
    assert len(db_store.read_fleet(["me"], "r", at(0) - timedelta(days=30), 1)) == 1


def test_a_triage_without_history_of_its_own_reads_the_full_probes(db_store: Store) -> None:
    """The prolog's triage is a recipe of its own; a node with no triage history is compared
    with its full-probe seq reads (store.history.past_figures ``also``), a node with some keeps
    its own: without this, an allocation slow all at once passed its triage as OK."""
    from screener.policy import Policy
    from screener.probe.short import triage_policy

    full = Policy()
    short = triage_policy(full)
    judged(db_store, 1, "n1", 300.0, recipe=recipe_fingerprint(full.probe))
    judged(db_store, 2, "n2", 310.0, recipe=recipe_fingerprint(full.probe))
    judged(db_store, 3, "n2", 280.0, recipe=recipe_fingerprint(short.probe))
    now = at(4)
    own, _ = past_figures(db_store, ["n1", "n2", "n3"], short, now)
    assert own == {"n1": [], "n2": [280e6], "n3": []}
    both, _ = past_figures(db_store, ["n1", "n2", "n3"], short, now, also=(full.probe,))
    assert both == {"n1": [300e6], "n2": [280e6], "n3": []}
    # n3 first seen by a triage that wrote (no history then): that one counts too
    writing = triage_policy(replace(full, prolog=replace(full.prolog, triage_write=True)))
    judged(db_store, 3.5, "n3", 290.0, recipe=recipe_fingerprint(writing.probe))
    every, _ = past_figures(db_store, ["n1", "n3"], short, now, also=(full.probe, writing.probe))
    assert every == {"n1": [300e6], "n3": [290e6]}
    # issue 44: one triage (a requeued job's first attempt) hid three sweeps' full probes,
    # too few to count (MIN_HISTORY 3): the full probe's count until the triage has three
    for k, mb_s in enumerate((180.0, 182.0, 181.0)):
        judged(db_store, 0.1 * k, "n4", mb_s, recipe=recipe_fingerprint(full.probe))
    judged(db_store, 3.6, "n4", 175.0, recipe=recipe_fingerprint(short.probe))
    after, _ = past_figures(db_store, ["n4"], short, now, also=(full.probe,))
    assert after == {"n4": [181e6, 182e6, 180e6]}, after  # newest first
    for k in range(2):
        judged(db_store, 3.7 + 0.1 * k, "n4", 176.0, recipe=recipe_fingerprint(short.probe))
    own3, _ = past_figures(db_store, ["n4"], short, at(5), also=(full.probe,))
    assert own3 == {"n4": [176e6, 176e6, 175e6]}
