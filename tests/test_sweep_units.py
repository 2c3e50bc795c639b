"""The sweep's pure parts (issue 25): the mode passed to the job as arguments, the --wait
bound over deep_max_rounds, refusals before submitting, and the deep steady-state note;
which side probes which node (issue 41.6: the job never over SSH)."""

from __future__ import annotations

from pathlib import Path

import pytest

from screener.cli import main
from screener.policy import Policy, SweepPolicy, TransportPolicy
from screener.probe.fio import policy_jobs, probe_duration_s
from screener.probe_data import FioJobResult, NodeProbe, RunSummary, Status, Verdict
from screener.slurm import SlurmNode
from screener.steady import annotate, settled
from screener.sweep.drained import screener_drained
from screener.sweep.job import batch_policy
from screener.sweep.mode import SweepMode, submit_argv
from screener.sweep.step import NOT_HELD, not_held, srun_probe_argv
from screener.sweep.submit import wait_timeout_s

REPO = Path(__file__).resolve().parents[1]


def test_the_mode_reaches_the_job_as_script_arguments() -> None:
    mode = SweepMode(dry_run=True, deep=True, config="/etc/s.toml")
    argv = submit_argv(["n2", "n1"], "/opt/sweep.sbatch", job_args=mode.job_args())
    assert argv[-5:] == ["/opt/sweep.sbatch", "--config", "/etc/s.toml", "--dry-run", "--deep"]
    # screener follows the job itself (sweep/wait.py): sbatch never blocks
    assert "--wait" not in argv and not any(a.startswith("--export") for a in argv)
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


def test_the_job_opens_no_ssh_and_the_submitter_probes_only_its_own_idle_drains() -> None:
    """The job screens with the local transport and no key; a node it does not hold is
    UNKNOWN (never reached over SSH); the submitting host probes an idle node only if its
    reason is still the one screener recorded, and not the nodes the job held."""
    keyed = Policy(transport=TransportPolicy(client_keys=("/etc/screener/id_ed25519",)))
    job = batch_policy(keyed)
    assert (job.transport.kind, job.transport.client_keys) == ("local", ())
    assert job.transport.command_timeout_s == keyed.transport.command_timeout_s
    refused = not_held(["n1", "n2"], {"n1"}, "recipe1")
    assert list(refused) == ["n2"]
    probe = refused["n2"].last
    assert not probe.usable and probe.error == f"n2: {NOT_HELD}" and probe.recipe == "recipe1"

    ours = "screener: rd 0.05x peers r42"
    idle_drain, busy_drain = frozenset({"IDLE", "DRAIN"}), frozenset({"ALLOCATED", "DRAIN"})
    every = {
        n.name: n
        for n in (
            SlurmNode("n1", idle_drain, ours),  # ours, idle: probed
            SlurmNode("n2", idle_drain, "RMA 42"),  # an admin changed the reason
            SlurmNode("n3", busy_drain, ours),  # still runs a job
            SlurmNode("n4", idle_drain, ours),  # the job held it (drained it just now)
            SlurmNode("n5", idle_drain, ours),  # no screener drain on record
            SlurmNode("n6", frozenset({"IDLE"})),
        )
    }
    recorded = {"n1": ours, "n2": ours, "n3": ours, "n4": ours, "n5": None}
    assert screener_drained(every, recorded, exclude={"n4"}) == ["n1"]


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
