"""`screener prolog`: the PrologSlurmctld flow.

Read the job from the environment, screen only opted-in jobs, skip nodes that passed
recently (never flaky ones), screen the rest within the budget, drain confirmed slow nodes
(behind the mass-drain guard) and exit 1 so Slurm requeues the job onto healthy nodes.
Any internal error fails open (exit 0, said in the log) unless ``fail_closed``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from screener.app import make_transport
from screener.errors import ConfigError, ScreenerError, SlurmError, StoreError
from screener.hooks import actions
from screener.hooks.decide import fast_path, selects
from screener.hooks.logging import HookLog
from screener.hooks.start_iostat import start_job_iostat
from screener.model import Trigger
from screener.nodes import expand_nodeset, fold_nodes
from screener.pipeline import screen
from screener.policy import Policy, database_url
from screener.slurm import SlurmClient, SlurmJob, select_client
from screener.slurm.model import check_job_id
from screener.store import Store, open_store
from screener.store.slurm_records import SlurmRecords

EXIT_REQUEUE = 1  # non-zero from PrologSlurmctld: Slurm requeues the batch job
# Seconds kept back from the budget for deciding, draining and recording.
DECIDE_RESERVE_S = 2.0


def job_from_env(env: Mapping[str, str]) -> SlurmJob:
    """The job PrologSlurmctld/EpilogSlurmctld describe in their environment (validated)."""
    job_id = env.get("SLURM_JOB_ID", "")
    nodelist = env.get("SLURM_JOB_NODELIST", "")
    if not job_id or not nodelist:
        raise ConfigError("SLURM_JOB_ID and SLURM_JOB_NODELIST must be set (run as a Slurm hook)")
    try:
        check_job_id(job_id)
    except SlurmError as exc:
        raise ConfigError(str(exc)) from None
    return SlurmJob(
        job_id=job_id,
        nodes=tuple(expand_nodeset(nodelist)),
        partition=env.get("SLURM_JOB_PARTITION", ""),
        name=env.get("SLURM_JOB_NAME", ""),
        comment=env.get("SLURM_JOB_COMMENT", ""),
        restarts=int(env.get("SLURM_JOB_RESTART_COUNT", "0") or 0),
    )


def run_prolog(
    policy: Policy, env: Mapping[str, str], log: HookLog, client: SlurmClient | None = None
) -> int:
    """The hook's exit code: 0 = let the job start, 1 = requeue it (nodes were drained)."""
    t0 = time.monotonic()
    try:
        job = job_from_env(env)
    except ScreenerError as exc:
        return _fail(policy, log, f"cannot read the job: {exc}")
    ok, why = selects(job, policy.prolog)
    if not ok:
        log(f"job {job.job_id}: not screened: {why}")
        return 0
    try:
        if client is None:
            client, backend = select_client(policy.slurm)
        else:
            backend = f"{client.name}: passed in"
        log(
            f"job {job.job_id} ({job.name}) on {fold_nodes(job.nodes)}: screening ({why}); "
            f"slurm backend {backend}"
        )
        store = open_store(database_url(policy), upgrade=database_url(policy).startswith("sqlite"))
    except ScreenerError as exc:
        return _fail(policy, log, f"job {job.job_id}: {exc}")
    try:
        return asyncio.run(_screen_job(policy, job, client, store, log, t0))
    except ScreenerError as exc:
        return _fail(policy, log, f"job {job.job_id}: {exc}")
    finally:
        store.close()


async def _screen_job(
    policy: Policy, job: SlurmJob, client: SlurmClient, store: Store, log: HookLog, t0: float
) -> int:
    pp = policy.prolog
    records = SlurmRecords(store)
    now = datetime.now(UTC)
    last = records.last_pass(job.nodes)
    flaky = records.flaky_since(job.nodes, now - timedelta(seconds=pp.flaky_window_s))
    skip, probe = fast_path(job.nodes, last, flaky, now, pp.fresh_s)
    if skip:
        log(f"fast path: {fold_nodes(skip)} passed within {pp.fresh_s:g}s, not probed")
    drained: list[str] = []
    devices: dict[str, str] = {}
    transport = make_transport(policy.transport)
    try:
        if probe:
            budget = pp.budget_s - (time.monotonic() - t0) - DECIDE_RESERVE_S
            result = await screen(
                probe,
                policy,
                transport,
                store,
                trigger=Trigger.PROLOG,
                job_id=job.job_id,
                nodeset=fold_nodes(probe),
                deadline_s=max(budget, 0.1),
            )
            if result.store_error:
                raise StoreError(result.store_error)
            devices = {
                n: p.facts.device for n, p in result.probes.items() if p.facts and p.facts.device
            }
            for v in result.summary.verdicts:
                log(f"{v.node}: {v.status.value} {v.reason}")
            now = datetime.now(UTC)
            actions.close_passing(result.summary, records, now, result.run_id)
            partition = [
                n.name for n in client.nodes() if not job.partition or job.partition in n.partitions
            ]
            plan = actions.decide_drains(
                result.summary, result.run_id, len(job.nodes), partition, records, policy, now
            )
            drained = actions.apply_drains(
                plan,
                client,
                records,
                result.run_id,
                Trigger.PROLOG,
                job.job_id,
                now,
                policy.slurm.dry_run,
                log,
            )
        if drained:
            if pp.release_requeued:
                _spawn_release(job.job_id, log)
            log(f"job {job.job_id}: exit {EXIT_REQUEUE} so Slurm requeues it onto healthy nodes")
            return EXIT_REQUEUE
        if pp.iostat:
            await start_job_iostat(transport, job, devices, policy, log)
    finally:
        await transport.close()
    log(f"job {job.job_id}: may start ({time.monotonic() - t0:.1f}s)")
    return 0


def _fail(policy: Policy, log: HookLog, message: str) -> int:
    """An error inside screener: open (job runs) by default, closed when configured."""
    if policy.prolog.fail_closed:
        log(f"{message}; fail closed (prolog.fail_closed = true): job requeued")
        return EXIT_REQUEUE
    log(f"{message}; fail open: job runs unscreened")
    return 0


def _spawn_release(job_id: str, log: HookLog) -> None:
    """Start a detached `screener release JOB`: once Slurm has requeued the job it makes it
    eligible at once (22.05 otherwise holds it ~2 minutes for BeginTime)."""
    argv = [sys.executable, "-m", "screener.cli", "release", check_job_id(job_id)]
    try:
        subprocess.Popen(  # fixed argv, validated job id
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outlives the hook; slurmctld does not wait for it
            env=dict(os.environ),
        )
    except OSError as exc:
        log(f"cannot start the release helper ({exc}); the job starts after its BeginTime")
