"""The sweep's pure parts (issue 25): the mode passed to the job as arguments, the --wait
bound over deep_max_rounds, refusals before submitting, and the deep steady-state note."""

from __future__ import annotations

from pathlib import Path

import pytest

from screener.cli import main
from screener.hooks.sweep_step import srun_probe_argv
from screener.hooks.sweep_submit import SweepMode, submit_argv, wait_timeout_s
from screener.policy import Policy, SweepPolicy
from screener.probe.fio import policy_jobs, probe_duration_s
from screener.probe_data import FioJobResult, NodeProbe, RunSummary, Status, Verdict
from screener.steady import annotate, settled

REPO = Path(__file__).resolve().parents[1]


def test_the_mode_reaches_the_job_as_script_arguments() -> None:
    mode = SweepMode(dry_run=True, deep=True, config="/etc/s.toml")
    argv = submit_argv(["n2", "n1"], "/opt/sweep.sbatch", wait=True, job_args=mode.job_args())
    assert argv[-5:] == ["/opt/sweep.sbatch", "--config", "/etc/s.toml", "--dry-run", "--deep"]
    assert "--wait" in argv and not any(a.startswith("--export") for a in argv)
    assert SweepMode().job_args() == []
    step = srun_probe_argv(["n1"], deep=True, config="/etc/s.toml")
    assert step[step.index("screener.cli") + 1 : step.index("probe")] == [
        "--config",
        "/etc/s.toml",
    ]


def test_the_wait_covers_every_deep_round() -> None:
    """--wait: both screen rounds, each up to deep_max_rounds probes at their timeouts."""
    policy = Policy()
    pp, slack = policy.probe, policy.transport.command_timeout_s
    per_round = probe_duration_s(pp, policy_jobs(pp)) + 2 * slack
    assert wait_timeout_s(policy, deep=True) >= 2 * policy.sweep.deep_max_rounds * per_round
    assert wait_timeout_s(policy, deep=False) >= 2 * per_round
    assert wait_timeout_s(policy, deep=True) > wait_timeout_s(policy, deep=False)


def test_a_script_that_drops_its_arguments_is_refused_before_submitting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old-sweep.sbatch"
    old.write_text("#!/bin/sh\nexec screener sweep ${SCREENER_SWEEP_DEEP:+--deep}\n")
    code = main(["sweep", "--submit", "--dry-run", "--script", str(old)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert "does not pass its arguments on" in err[0] and "--dry-run would be lost" in err[0]
    assert main(["sweep", "--wait"]) == 1
    assert "--wait and --script go with --submit" in capsys.readouterr().err
    assert '"$@"' in (REPO / "jobs" / "sweep.sbatch").read_text()


def _read(node: str, mb_s: float) -> NodeProbe:
    job = FioJobResult(
        name="seq_read",
        rw="read",
        bw_bytes=mb_s * 1e6,
        iops=mb_s,
        total_ios=100,
        runtime_ms=500.0,
        lat_mean_ns=1e6,
        lat_p50_ns=1e6,
        lat_p99_ns=2e6,
        lat_p999_ns=3e6,
        slow_fraction=0.0,
        error=0,
    )
    return NodeProbe(node=node, seq_read=job)


def test_falling_figures_never_settle_and_the_verdict_says_so() -> None:
    sweep = SweepPolicy(deep_window=3, deep_max_rounds=4)
    falling = [_read("a", mb) for mb in (40, 20, 10, 5)]
    flat = [_read("b", mb) for mb in (61, 60, 60)]
    assert not settled(falling, sweep) and settled(flat, sweep)
    summary = RunSummary(
        (Verdict("a", Status.OK, "within peers"), Verdict("b", Status.OK, "within peers"))
    )
    deep = {"a": (falling, False), "b": (flat, True)}
    out = {v.node: v for v in annotate(summary, deep, 3).verdicts}
    assert out["a"].signals == ("not_steady",) and out["b"].signals == ("steady",)
    assert "deep: not steady after 4 rounds (rounds 2-4 read 20 -> 5 MB/s)" in out["a"].reason
    assert out["b"].status is Status.OK and "deep: steady over rounds 1-3" in out["b"].reason
