"""Every numeric config key, hostile values (issue 19, item 5): 0, -1, nan, inf, 1e300, a
30-digit integer and whatever hypothesis draws are either refused at load time, in one
line naming the key, or the policy loads and a representative use of it does not raise.

The representative use (``exercise``) runs the real consumers of the policy: fio/iostat
argv, the verdict over a synthetic fleet, drain reasons checked as Slurm would, the
mass-drain guard, every window turned into a datetime, the SQLite store's history and
fleet reads with the configured limits, timeouts handed to asyncio and to subprocess.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from screener.errors import ConfigError
from screener.hooks.drain_rules import drain_reason, plan_drains
from screener.hooks.injob import NodeJobIo, outliers, start_argv
from screener.policy import Policy, load_policy, policy_from_dict
from screener.probe.fio import fio_argv, layout_argv, layout_timeout_s, probe_duration_s
from screener.probe.iostat import iostat_argv, iostat_count
from screener.process import run_command
from screener.prolog.rules import fast_path
from screener.slurm.client import check_reason
from screener.steady import steady_state
from screener.store import Store, open_store
from screener.verdict.judge import evaluate
from tests.test_verdict import fleet

HOSTILE: list[Any] = [0, -1, math.nan, math.inf, -math.inf, 1e300, 10**30]


def numeric_keys() -> dict[str, type]:
    """Every numeric config key ("section.key") and its type (int or float), read from the
    defaults of Policy's sections: a key added later is fuzzed without a line here."""
    out: dict[str, type] = {}
    for section in dataclasses.fields(Policy):
        defaults = getattr(Policy(), section.name)
        for f in dataclasses.fields(defaults):
            default = getattr(defaults, f.name)
            if isinstance(default, int | float) and not isinstance(default, bool):
                out[f"{section.name}.{f.name}"] = type(default)
    return out


KEYS = sorted(numeric_keys())


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    db = tmp_path_factory.mktemp("fuzz") / "db.sqlite"
    with open_store(f"sqlite:///{db}", upgrade=True) as s:
        yield s


def exercise(policy: Policy, store: Store) -> None:
    """Use every part of ``policy`` the way the commands do; raises if a value breaks one."""
    pp, v, sl, pr, sw = policy.probe, policy.verdict, policy.slurm, policy.prolog, policy.sweep
    now = datetime.now(UTC)
    fio_argv(pp)
    layout_argv(pp)
    layout_timeout_s(pp, policy.transport.command_timeout_s)
    iostat_argv(pp.iostat_interval_s, iostat_count(probe_duration_s(pp), pp.iostat_interval_s))
    start_argv("42", "node01", pr.iostat_interval_s, pr.iostat_max_s, ["nvme0n1"])
    probes = fleet(8, read=30.0)
    history = {p.node: [3000.0, 2900.0, 3100.0] for p in probes}
    summary = evaluate(probes, history, v)
    evaluate(probes[:2], history, v)  # small allocation: fleet/peer paths
    slow = []
    for verdict in summary.verdicts:
        for tag in (sl.tag, policy.ingest.drain_tag):
            check_reason(drain_reason(tag, verdict, 1800.0, 42))
        slow.append((verdict.node, "x"))
    plan_drains(slow[:1], 8, 100, {"node09", "node10", "node11"}, sl)
    windows = [
        timedelta(seconds=pr.fresh_s),
        timedelta(seconds=pr.flaky_window_s),
        timedelta(seconds=sl.partition_window_s),
        timedelta(days=v.history_max_age_days),
        timedelta(hours=v.fleet_window_h),
    ]
    for w in windows:
        assert now - w <= now
    fast_path(["node01"], {"node01": now - timedelta(seconds=10)}, set(), now, pr.fresh_s)
    store.read_histories(["node01"], v.history_runs, None, now - windows[3])
    store.read_fleet(["node01"], None, now - windows[4], v.fleet_max)
    steady_state([1.0, 1.1, 1.0, 0.9, 1.0, 1.05], sw.deep_window, sw.deep_max_excursion, 0.1)
    outliers(
        {
            f"n{i}": NodeJobIo(f"n{i}", r_await_ms=1.0 + i, rkb_s=1e5, util_pct=10.0, samples=3)
            for i in range(5)
        },
        pr.job_r_await_factor,
        pr.job_min_r_await_ms,
    )

    async def timeouts() -> None:
        for t in (policy.transport.command_timeout_s, policy.transport.connect_timeout_s):
            await asyncio.wait_for(asyncio.sleep(0), timeout=t)
        await asyncio.wait_for(asyncio.sleep(0), timeout=pr.budget_s)

    asyncio.run(timeouts())
    run_command(["true"], timeout=sl.command_timeout_s)


def check(key: str, value: Any, store: Store) -> None:
    section, name = key.split(".")
    try:
        policy = policy_from_dict({section: {name: value}})
    except ConfigError as exc:
        message = str(exc)
        assert key in message, message
        assert "\n" not in message and len(message) < 200, message
        return
    exercise(policy, store)


def test_every_numeric_key_is_known() -> None:
    assert {"verdict.mad_floor_fraction", "prolog.fresh_s", "verdict.fleet_max"} <= set(KEYS)
    assert len(KEYS) > 40


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize("key", KEYS)
def test_hostile_values_are_refused_naming_the_key_or_run(
    store: Store, key: str, value: Any
) -> None:
    check(key, value, store)


@pytest.mark.parametrize("key", KEYS)
def test_hostile_values_through_a_toml_file(tmp_path: Path, key: str) -> None:
    section, name = key.split(".")
    for text in ("nan", "inf", "-inf", "1e300", "-1", "0", "9" * 30):
        cfg = tmp_path / "c.toml"
        cfg.write_text(f"[{section}]\n{name} = {text}\n")
        try:
            load_policy(cfg)
        except ConfigError as exc:
            assert key in str(exc), str(exc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    key=st.sampled_from(KEYS),
    value=st.one_of(
        st.integers(),
        st.integers(min_value=-10, max_value=10**6),
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(min_value=0, max_value=1e7),
        st.sampled_from(HOSTILE),
    ),
)
def test_policy_fuzz(store: Store, key: str, value: Any) -> None:
    check(key, value, store)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("verdict.mad_floor_fraction", 0),  # ZeroDivisionError in ingest
        ("verdict.history_max_age_days", 1e10),  # datetime overflow
        ("verdict.fleet_window_h", 1e12),
        ("verdict.fleet_max", 2**63),  # beyond SQLite's integer
        ("prolog.fresh_s", 1e15),
        ("prolog.flaky_window_s", 1e15),
        ("slurm.partition_window_s", 1e15),
        ("transport.command_timeout_s", 1e300),
        ("slurm.command_timeout_s", 1e12),
    ],
)
def test_values_that_crashed_later_are_refused_at_load(key: str, value: Any) -> None:
    section, name = key.split(".")
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        policy_from_dict({section: {name: value}})


@pytest.mark.parametrize("tag", ['scr"eener:', "scr'eener:", "scréener:", "tab\there", "a=b"])
@pytest.mark.parametrize("key", ["slurm.tag", "ingest.drain_tag"])
def test_tags_slurm_would_refuse_in_a_reason_are_refused_at_load(key: str, tag: str) -> None:
    section, name = key.split(".")
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        policy_from_dict({section: {name: tag}})


def test_tags_slurm_accepts_load() -> None:
    p = policy_from_dict({"slurm": {"tag": "site-chk:"}, "ingest": {"drain_tag": "job_chk#1"}})
    assert p.slurm.tag == "site-chk:"
