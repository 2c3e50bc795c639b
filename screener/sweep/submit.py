"""`screener sweep --submit`: sbatch jobs/sweep.sbatch over the idle nodes, with every option
that changes what the sweep does passed to the job as arguments (the job never reads the
submitter's environment for them; the mode and the sbatch argv: sweep/mode.py). The
submitting host (the controller) also probes the screener-drained idle nodes over SSH: it
holds the key, the job's compute node does not (sweep/drained.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from screener.errors import ConfigError
from screener.hostlist import fold_nodes
from screener.policy import Policy
from screener.process import run_command
from screener.slurm import SlurmClient, SlurmNode, select_client
from screener.sweep.drained import sweep_drained
from screener.sweep.mode import SweepMode, submit_argv
from screener.sweep.rolling import due_nodes, rolling_argv, time_limit_min
from screener.sweep.step import step_timeout_s
from screener.sweep.wait import wait_for_job

QUEUE_SLACK_S = 600.0  # --wait: the job may queue, the DB and its bookkeeping need their time
ROLLING_SLACK_S = 60.0  # a rolling job's time limit: both rounds' bound plus bookkeeping
PASSES_ARGS = '"$@"'  # a sweep script must hand its arguments on to `screener sweep`


def idle_nodes(nodes: Sequence[SlurmNode], partition: str) -> list[str]:
    """Nodes a sweep job can hold now: IDLE, not drained, not down, in the partition."""
    return [
        n.name
        for n in nodes
        if "IDLE" in n.states
        and not n.drained
        and "DOWN" not in n.states
        and (not partition or partition in n.partitions)
    ]


def wait_timeout_s(policy: Policy, deep: bool) -> float:
    """How long `--submit --wait` waits for sbatch: both screen rounds at the step's bound
    (deep_max_rounds rounds each in deep mode), plus queueing and bookkeeping."""
    return 2 * step_timeout_s(policy, deep) + QUEUE_SLACK_S


def check_script(script: str, mode: SweepMode) -> None:
    """Refuse, before submitting, a script that would lose the mode: missing, or one that
    does not hand its arguments on (an older copy of jobs/sweep.sbatch)."""
    path = Path(script)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"sweep script {script}: {exc.strerror or exc}") from None
    if mode.job_args() and PASSES_ARGS not in text:
        raise ConfigError(
            f"sweep script {script} does not pass its arguments on ({PASSES_ARGS}), so "
            f"{' '.join(mode.job_args())} would be lost: use jobs/sweep.sbatch"
        )


def submit_sweep(
    policy: Policy, script: str, wait: bool, mode: SweepMode, log: Callable[[str], None]
) -> int:
    """Submit the sweep script over the idle nodes with ``mode``; then (nightly, not rolling)
    probe the screener-drained idle nodes from here over SSH (sweep/drained.py): after
    the job with ``wait``, while it runs without. sbatch's exit status."""
    check_script(script, mode)
    client, why = select_client(policy.slurm)
    nodes = idle_nodes(client.nodes(), policy.sweep.partition)
    if mode.rolling:  # the held nodes only: drained ones wait for the nightly sweep
        if not nodes:
            log("no idle node to hold: nothing submitted")
            return 0
        nodes = due_nodes(policy, nodes, datetime.now(UTC), log)
        if not nodes:
            return 0
        minutes = time_limit_min(2 * step_timeout_s(policy, mode.deep) + ROLLING_SLACK_S)
        nice = policy.sweep.rolling_nice
        argv = rolling_argv(nodes, script, nice, minutes, mode.job_args())
        return _sbatch(argv, nodes, (client, why), policy, mode, wait, log)
    status = 0
    if nodes:
        argv = submit_argv(nodes, script, mode.job_args())
        status = _sbatch(argv, nodes, (client, why), policy, mode, wait, log)
    else:
        log("no idle node to hold: nothing submitted")
    sweep_drained(policy, client, mode, nodes, log)  # the job's nodes were judged there
    return status


def _sbatch(
    argv: Sequence[str],
    nodes: Sequence[str],
    backend: tuple[SlurmClient, str],
    policy: Policy,
    mode: SweepMode,
    wait: bool,
    log: Callable[[str], None],
) -> int:
    """Run sbatch, then (``wait``) follow the job until it ended (sweep/wait.py); the exit
    status: sbatch's, or 0 for a job that COMPLETED and 1 for any other end, logged."""
    client, why = backend
    log(f"submitting the sweep over {fold_nodes(nodes)} ({why}): {mode.describe(policy)}")
    res = run_command(argv, timeout=60.0)
    if res.exit_status != 0:
        log(f"sbatch failed: {res.stderr.strip()}")
        return res.exit_status
    job_id = res.stdout.strip().split(";")[0]  # --parsable: "id" or "id;cluster"
    if not wait:
        log(f"sweep job {job_id} submitted")
        return 0
    end = wait_for_job(client, job_id, wait_timeout_s(policy, mode.deep))
    log(f"sweep job {job_id} {'finished' if end.exit_status == 0 else 'ended'}: {end.detail}")
    return end.exit_status
