"""Shadow mode per rule ([verdict] shadow): the shadowed rule is evaluated and stored, but
never makes a node SLOW. Fleets built from the captured real probe (tests/store_data.py),
one node's seq read scaled down."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from store_data import error_probe, full_probe

from screener.errors import ConfigError
from screener.policy import RULE_NAMES, Policy, SlurmPolicy, VerdictPolicy, policy_from_dict
from screener.probe_data import NodeProbe, Status, Trigger, Verdict
from screener.store import Store
from screener.store.query_rows import RunDetail
from screener.verdict.judge import evaluate, suspects
from screener.verdict.shadow import fired, shadow_rules, shadowed
from tests import cli_fork

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_store, pg_dbs

VERDICT = Path(__file__).parent.parent / "screener" / "verdict"


def _node(name: str, read_factor: float = 1.0, spread: int = 0) -> NodeProbe:
    p = full_probe(name)
    assert p.seq_read is not None
    read = dataclasses.replace(
        p.seq_read, bw_bytes=p.seq_read.bw_bytes * read_factor * (1 + spread / 100)
    )
    return dataclasses.replace(p, seq_read=read, facts=None)  # its facts: PCIe down, md rebuild


def _fleet(slow_factor: float) -> list[NodeProbe]:
    return [_node("node01", slow_factor)] + [_node(f"node{i:02d}", spread=i) for i in range(2, 9)]


def _verdicts(probes: list[NodeProbe], **policy: object) -> dict[str, Verdict]:
    summary = evaluate(probes, {}, VerdictPolicy(**policy))  # type: ignore[arg-type]
    return {v.node: v for v in summary.verdicts}


def test_rule_names_are_every_tag_the_rules_give() -> None:
    """RULE_NAMES (what [verdict] shadow accepts) = the tags judge.py and rules.py append."""
    tags: set[str] = set()
    for name in ("judge.py", "rules.py"):
        for node in ast.walk(ast.parse((VERDICT / name).read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "append"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "tags"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                tags.add(node.args[0].value)
    assert tags - {"facts"} == set(RULE_NAMES)  # "facts": fact problems, DEGRADED, no drain


def test_a_slow_node_whose_only_rules_are_shadowed_is_ok_and_says_it_would_have_drained() -> None:
    live = _verdicts(_fleet(0.02))
    assert live["node01"].status is Status.SLOW_READ
    rules = [t for t in live["node01"].signals if t in RULE_NAMES]
    assert "peer_read" in rules and "ratio" in rules
    shadow = _verdicts(_fleet(0.02), shadow=tuple(rules))
    v = shadow["node01"]
    assert v.status is Status.OK
    assert v.reason.startswith("would have drained (shadow: ")
    assert live["node01"].reason in v.reason
    assert set(shadow_rules(v.signals)) == set(rules)
    assert fired(v.signals) == fired(live["node01"].signals)
    assert not v.baseline  # its figures do not teach the node's history
    assert {n: x.status for n, x in shadow.items() if n != "node01"} == {
        n: x.status for n, x in live.items() if n != "node01"
    }
    summary = evaluate(_fleet(0.02), {}, VerdictPolicy(shadow=tuple(rules)))
    assert suspects(summary) == []  # no re-probe, no drain


def test_a_live_rule_still_decides_beside_a_shadowed_one() -> None:
    v = _verdicts(_fleet(0.02), shadow=("ratio",))["node01"]
    assert v.status is Status.SLOW_READ
    assert "peer_read" in v.signals and "shadow:ratio" in v.signals and "ratio" not in v.signals
    assert not v.reason.startswith("would have drained")


def test_shadowing_a_rule_that_did_not_fire_changes_nothing() -> None:
    assert _verdicts(_fleet(0.02), shadow=("peer_tail",)) == _verdicts(_fleet(0.02))


def test_a_failed_probe_shadowed_stays_unknown() -> None:
    """read_timeout can make SLOW_READ (drain_read_timeout); shadowed, the verdict of a
    failed probe is UNKNOWN, never OK."""
    v = Verdict("node02", Status.SLOW_READ, "fio timed out reading", signals=("read_timeout",))
    out = shadowed(v, ("read_timeout",))
    assert out.status is Status.UNKNOWN and out.signals == ("shadow:read_timeout",)
    assert (
        evaluate([error_probe()], {}, VerdictPolicy(shadow=("read_timeout",))).verdicts[0].status
        is Status.UNKNOWN
    )


def test_shadow_names_are_checked_against_the_rules() -> None:
    p = policy_from_dict({"verdict": {"shadow": ["peer_tail", "history"]}})
    assert p.verdict.shadow == ("peer_tail", "history")
    with pytest.raises(ConfigError) as err:
        policy_from_dict({"verdict": {"shadow": ["peer_tail", "pear_tail"]}})
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("verdict.shadow: unknown rule 'pear_tail' (rules: peer_read,")
    with pytest.raises(ConfigError, match="wrong type"):
        policy_from_dict({"verdict": {"shadow": "peer_tail"}})


# ---- visible where admins look: the run's report, `screener doctor` ----------------------


def _screened_run(store: Store, policy: Policy) -> RunDetail:
    """The slow fleet judged under ``policy`` and stored with it: the run as `show` reads it."""
    from screener.store import views

    at = datetime(2026, 11, 1, 22, 0, tzinfo=UTC)
    summary = evaluate(_fleet(0.02), {}, policy.verdict)
    nodes = [v.node for v in summary.verdicts]
    run = store.start_run(Trigger.MANUAL, nodes, policy.to_dict(), None, "node[01-08]", at)
    store.record_verdicts(run, summary)
    store.finish_run(run, at + timedelta(seconds=30))
    return views.run_detail(store, run)


def test_the_run_and_its_html_report_say_dry_run_shadow_and_would_have_drained(
    db_store: Store,
) -> None:
    from screener.report import html

    policy = Policy(verdict=VerdictPolicy(shadow=("peer_read",)), slurm=SlurmPolicy(dry_run=True))
    detail = _screened_run(db_store, policy)
    assert detail.rollout is not None
    assert detail.rollout.startswith("dry run: decided and recorded, nobody drained")
    assert "shadow rules peer_read: recorded ('would have drained'), never drain" in detail.rollout
    (stored,) = [n for n in detail.nodes if n.node == "node01"]
    assert stored.status is Status.SLOW_READ  # ratio is live: it still decides
    page = html.render(detail, [])
    assert "<b>Rollout:</b> dry run" in page
    assert _screened_run(db_store, Policy()).rollout is None


def test_would_have_drained_nodes_are_named_in_the_report(db_store: Store) -> None:
    from screener.report import html

    policy = Policy(verdict=VerdictPolicy(shadow=("peer_read", "ratio")))
    detail = _screened_run(db_store, policy)
    (stored,) = [n for n in detail.nodes if n.node == "node01"]
    assert stored.status is Status.OK and "shadow:peer_read" in stored.signals
    page = html.render(detail, [])
    assert "Would have drained: node01." in page
    assert (
        detail.rollout
        == "shadow rules peer_read, ratio: recorded ('would have drained'), never drain"
    )


def test_doctor_shows_dry_run_and_shadow_rules(tmp_path: Path) -> None:
    config = tmp_path / "screener.toml"
    config.write_text('[slurm]\ndry_run = true\n[verdict]\nshadow = ["peer_tail"]\n')
    env = {**os.environ, "SCREENER_DATABASE_URL": f"sqlite:///{tmp_path}/x.db"}
    argv = ["--config", str(config), "doctor", "--json"]
    done = cli_fork.run(argv, timeout=120, env=env)
    info = json.loads(done.stdout)
    assert info["dry_run"].startswith("on: decide and record, never drain nor resume")
    assert info["shadow_rules"].startswith("peer_tail: recorded ('would have drained')")
    config.write_text("")
    done = cli_fork.run(argv, timeout=120, env=env)
    info = json.loads(done.stdout)
    assert info["dry_run"].startswith("off") and info["shadow_rules"] == "none: every rule decides"


def test_a_slow_node_left_with_only_a_close_call_live_is_degraded() -> None:
    """A node at 0.6x its peers with a latency tail: SLOW by the tail rule; with that rule in
    shadow, the close call alone decides: DEGRADED (re-probed, never drained)."""
    base = evaluate(_fleet(0.6), {}, VerdictPolicy())
    node = next(v for v in base.verdicts if v.node == "node01")
    assert node.signals == ("close_call",) and node.status is Status.DEGRADED
    slow = dataclasses.replace(node, status=Status.SLOW_READ, signals=("peer_tail", "close_call"))
    v = shadowed(slow, ("peer_tail",))
    assert v.status is Status.DEGRADED and v.signals == ("shadow:peer_tail", "close_call")
    assert "peer_tail in shadow: DEGRADED by close_call" in v.reason
    assert not v.confirmed and not v.baseline
