"""`screener epilog`: the EpilogSlurmctld flow after a job.

1. In-job iostat (screened jobs): stop the iostat the prolog started on each node, store
   the samples as a run with trigger "job" (one node_probes row per node: raw_iostat +
   samples, no fio), and open an in-job slow episode for nodes whose reads were outliers
   among the job's nodes.
2. In-job benchmark figures: when the job names its output directory, ingest its IOR/fio
   outputs (screener/epilog/ingest.py) and, if configured, drain in-job outliers
   (on a shared allocation only those step 1 found slow too: screener/ingest/trust.py).
3. What waits in the spool (runs, drains, ingests of a database outage) is replayed when the
   database answers: bounded (screener.spool.REPLAY_MAX_FILES / REPLAY_BUDGET_S).
Never fails the job.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from screener.epilog.ingest import ingest_after_job
from screener.errors import ProbeError, ScreenerError, TransportError
from screener.hooks.injob import (
    MIN_COMPARED,
    NOT_BEGUN,
    NOT_OURS,
    NOT_STARTED,
    compared,
    outliers,
    stop_argv,
    summarize,
)
from screener.hooks.job import job_from_env, selects
from screener.hooks.later import JobLock, remove_stale
from screener.hooks.log import HookLog
from screener.hostlist import fold_nodes
from screener.policy import Policy, database_url
from screener.probe.iostat import parse_iostat
from screener.probe_data import NodeProbe, Trigger
from screener.slurm.client import SlurmClient, SlurmJob

if TYPE_CHECKING:  # the store and the transport are imported where they are used: a job
    # that was not screened, with nothing to ingest and no spool, needs neither (~0.3 s)
    from screener.transport.base import Transport

_NOT_STARTED = "no in-job iostat was started"
WAITED_S = 0.05  # a lock wait at least this long is said in the log (the start was running)


def run_epilog(
    policy: Policy, env: Mapping[str, str], log: HookLog, client: SlurmClient | None = None
) -> int:
    """Always 0: an epilog failure would only mark nodes, and monitoring is evidence."""
    try:
        job = job_from_env(env)
    except ScreenerError as exc:
        log(f"cannot read the job: {exc}")
        return 0
    t0 = time.time()
    ok, why = selects(job, policy.prolog)
    confirmed = _in_job_iostat(policy, job, ok, why, log)
    ingest_after_job(policy, job, env, ok, log, client, confirmed)
    replay_spool(policy, log, t0)
    return 0


def replay_spool(policy: Policy, log: HookLog, since: float) -> None:
    """Replay what waits in the spool when the database answers, unless something was
    spooled since ``since`` (Unix time: the database failed just now). Never raises."""
    from screener import spool

    spool_dir = policy.store.spool_dir
    try:
        if not (spool.spool_files(spool_dir) or spool.ingest_files(spool_dir)):
            return
        if spool.spooled_since(spool_dir, since):
            return
        from screener.store import open_store
        from screener.store.engine import describe, parse_url

        url = database_url(policy)
        with open_store(url, upgrade=url.startswith("sqlite")) as store:
            done = spool.replay(store, spool_dir, describe(parse_url(url)))
    except Exception as exc:  # bookkeeping: never fails the epilog
        log(f"spool not replayed: {exc}")
        return
    if done:
        log(f"spool replayed: {spool.replayed_line(done)}")


def _in_job_iostat(
    policy: Policy, job: SlurmJob, ok: bool, why: str, log: HookLog
) -> frozenset[str]:
    """Stop and store the in-job iostat the prolog started (screened jobs only); the nodes
    it found slow (they confirm the job's own figures for those nodes)."""
    if not ok or not policy.prolog.iostat:
        log(f"job {job.job_id}: nothing to collect ({why if not ok else 'prolog.iostat off'})")
        return frozenset()
    # A prolog under hookd starts iostat after its exit code, holding this lock meanwhile:
    # a job that ended first waits here for the start, so nothing is left running.
    t = policy.transport
    bound = t.connect_timeout_s + 2 * t.command_timeout_s  # its facts + start rounds
    t0 = time.monotonic()
    lock = JobLock.take(policy.store.spool_dir, job.job_id, bound)
    if lock is None:
        log(f"job {job.job_id}: in-job iostat lock not taken: stopping without it")
    elif time.monotonic() - t0 >= WAITED_S:
        log(f"job {job.job_id}: waited {time.monotonic() - t0:.2f}s for in-job iostat to start")
    try:
        probes = asyncio.run(_collect(policy, job.job_id, list(job.nodes)))
    except ScreenerError as exc:
        log(f"job {job.job_id}: cannot collect in-job iostat: {exc}")
        return frozenset()
    finally:
        if lock is not None:
            lock.release(remove=True)
        # and the lock files of jobs that never had an epilog, once older than any in-job
        # iostat (prolog.iostat_max_s) could still be starting
        remove_stale(policy.store.spool_dir, policy.prolog.iostat_max_s)
    if not any(p.iostat for p in probes):
        log(f"job {job.job_id}: {no_samples(probes, policy.prolog.iostat_interval_s)}")
        return frozenset()
    try:
        return _store(policy, job.job_id, probes, log)
    except ScreenerError as exc:
        log(f"job {job.job_id}: in-job iostat not stored: {exc}")
        return frozenset()


async def _collect(policy: Policy, job_id: str, nodes: list[str]) -> list[NodeProbe]:
    from screener.app import make_transport

    transport = make_transport(policy.transport)
    try:
        return list(await asyncio.gather(*(_stop(transport, policy, job_id, n) for n in nodes)))
    finally:
        await transport.close()


async def _stop(transport: Transport, policy: Policy, job_id: str, node: str) -> NodeProbe:
    try:
        res = await transport.run(
            node, stop_argv(job_id, node), timeout=policy.transport.command_timeout_s
        )
    except TransportError as exc:
        return NodeProbe(node=node, error=str(exc), error_kind=exc.kind)
    return stopped(node, res.exit_status, res.stdout)


def stopped(node: str, exit_status: int | None, stdout: str) -> NodeProbe:
    """What the stop command on ``node`` tells: samples, "ran but no interval ended" (a
    NodeProbe without samples or error), or why there is nothing."""
    if exit_status == NOT_STARTED:
        return NodeProbe(node=node, error=_NOT_STARTED, error_kind="probe")
    if exit_status == NOT_OURS:
        why = "in-job iostat directory is not screener's (someone else made it): left alone"
        return NodeProbe(node=node, error=why, error_kind="probe")
    if exit_status == NOT_BEGUN or (
        exit_status == 0
        and (_HEADER in stdout or not stdout.strip())
        and not _INTERVAL.search(stdout)
    ):
        return NodeProbe(node=node, raw_iostat=stdout)  # ran, but no interval ended
    try:
        samples = parse_iostat(stdout, node)
    except ProbeError as exc:
        return NodeProbe(node=node, error=str(exc), error_kind="probe", raw_iostat=stdout)
    return NodeProbe(node=node, iostat=samples, raw_iostat=stdout)


_HEADER = '"statistics": ['  # iostat -o JSON prints it before the first interval
_INTERVAL = re.compile(r'"statistics": \[\s*\{')


def no_samples(probes: list[NodeProbe], interval_s: int) -> str:
    """Why no node has an in-job iostat sample, said per outcome (issue 19: "not started"
    was logged for a job that merely ended before iostat's first interval)."""
    ran = [p.node for p in probes if p.error is None]
    absent = [p.node for p in probes if p.error == _NOT_STARTED]
    failed = [p for p in probes if p.error is not None and p.error != _NOT_STARTED]
    parts = []
    if ran:
        parts.append(
            f"iostat ran on {fold_nodes(ran)}; job shorter than one {interval_s}-s "
            "interval: no sample"
        )
    if absent:
        parts.append(f"no in-job iostat on {fold_nodes(absent)} (not started)")
    parts += [f"{p.node}: {p.error}" for p in failed]
    return "; ".join(parts)


def _store(policy: Policy, job_id: str, probes: list[NodeProbe], log: HookLog) -> frozenset[str]:
    """Store the in-job iostat as a run, open an episode per outlier; the outliers."""
    from screener.store import open_store
    from screener.store.slurm_records import SlurmRecords

    url = database_url(policy)
    now = datetime.now(UTC)
    with open_store(url, upgrade=url.startswith("sqlite")) as store:
        nodes = [p.node for p in probes]
        run_id = store.start_run(
            Trigger.JOB, nodes, policy.to_dict(), job_id, fold_nodes(nodes), now
        )
        for p in probes:
            store.record_probe(run_id, p, 1)
        figures = {p.node: f for p in probes if (f := summarize(p.node, p.iostat)) is not None}
        slow = outliers(
            figures,
            policy.prolog.job_r_await_factor,
            policy.prolog.job_min_r_await_ms,
            policy.ingest.min_iostat_samples,
        )
        records = SlurmRecords(store)
        for node, reason in sorted(slow.items()):
            records.open_episode(node, Trigger.JOB, now, reason, run_id, job_id)
            log(f"{node}: in-job slow episode: {reason}")
        store.finish_run(run_id, datetime.now(UTC), "done")
        judged = compared(figures, policy.ingest.min_iostat_samples)
        found = (
            f"{len(slow)} outlier(s)"
            if judged >= MIN_COMPARED
            else f"too few nodes to compare: {judged} read in >= "
            f"{policy.ingest.min_iostat_samples} intervals, {MIN_COMPARED} needed"
        )
        log(
            f"job {job_id}: in-job iostat stored as run {run_id} "
            f"({sum(len(p.iostat) for p in probes)} samples, {found})"
        )
    return frozenset(slow)
