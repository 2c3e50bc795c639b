"""The rolling sweep's pure parts (issue 22): which idle nodes are due, the sbatch line that
holds them at low priority, and the mode the job runs in. On real Slurm:
tests/test_sweep_mode.py (rolling jobs hold the due nodes; a prolog then takes the fast path)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from screener.policy import Policy
from screener.store.run_views import sweep_mode
from screener.sweep.mode import SweepMode
from screener.sweep.rolling import (
    ROLLING_JOB,
    pending_argv,
    rolling_argv,
    rolling_pick,
    time_limit_min,
)

NOW = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)


def ago(s: float) -> datetime:
    return NOW - timedelta(seconds=s)


def test_never_judged_first_then_the_oldest_pass_and_fresh_ones_left_alone() -> None:
    latest = {
        "n1": ("OK", ago(100)),  # fresh: not due
        "n2": ("OK", ago(4000)),  # stale
        "n3": ("OK", ago(2000)),  # stale, less so
        "n5": ("OK", ago(1800)),  # exactly at the age: due
    }
    idle = ["n1", "n2", "n3", "n4", "n5"]  # n4: never judged
    assert rolling_pick(idle, latest, NOW, 1800, 10) == ["n4", "n2", "n3", "n5"]
    assert rolling_pick(idle, latest, NOW, 1800, 2) == ["n4", "n2"]
    assert rolling_pick(["n1"], latest, NOW, 1800, 10) == []


def test_a_node_whose_last_verdict_is_not_a_pass_is_due_at_once() -> None:
    """UNKNOWN (unreachable at its last probe), DEGRADED, or slow but not drained (dry run,
    guard): the prolog would probe it, so the rolling job does it first."""
    latest = {
        "u": ("UNKNOWN", ago(5)),
        "d": ("DEGRADED", ago(5)),
        "s": ("SLOW_READ", ago(5)),
        "ok": ("OK", ago(5)),
    }
    assert sorted(rolling_pick(["u", "d", "s", "ok"], latest, NOW, 1800, 10)) == ["d", "s", "u"]


def test_the_rolling_job_is_exclusive_low_priority_and_bounded() -> None:
    mode = SweepMode(rolling=True, config="/etc/s.toml")
    argv = rolling_argv(["n2", "n1"], "/opt/sweep.sbatch", 10000, 7, mode.job_args())
    assert argv[:2] == ["sbatch", "--parsable"]
    for opt in ("--exclusive", "--nodes=2", f"--job-name={ROLLING_JOB}", "--nice=10000"):
        assert opt in argv
    assert "--time=7" in argv and "--wait" not in argv
    assert argv[-4:] == ["/opt/sweep.sbatch", "--config", "/etc/s.toml", "--rolling"]
    assert "--states=PENDING" in pending_argv() and f"--name={ROLLING_JOB}" in pending_argv()


def test_time_limit_rounds_up_to_whole_minutes() -> None:
    assert time_limit_min(1) == 1
    assert time_limit_min(60) == 1
    assert time_limit_min(61) == 2


def test_the_mode_says_rolling_in_the_log_and_in_screener_show() -> None:
    mode = SweepMode(rolling=True)
    assert "rolling" in mode.describe(Policy())
    assert "rolling" not in SweepMode().describe(Policy())
    shown = sweep_mode({"sweep_mode": mode.as_dict()})
    assert shown is not None and "rolling" in shown
    assert "rolling" not in (sweep_mode({"sweep_mode": SweepMode().as_dict()}) or "")
