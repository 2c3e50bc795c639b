"""`screener sweep`: the nightly sweep's batch side, run inside a Slurm job that holds the
idle nodes, on a compute node, which holds no SSH key.

The held nodes are probed by a Slurm step on each of them (``srun screener probe --local
--json``: Slurm is the fan-out) and nothing is reached over SSH: the job's screen runs with
the local transport, and screener-drained idle nodes (they cannot run a job step) are left
to the submitting host (`screener sweep --submit`, sweep/drained.py), which holds the
key; the job's log names them. The probing, judging and confirmation are the screen's own
loop (app.run_screen with the sweep's prober, sweep.step): run tag, SIGTERM handling,
spool, keep_file. Slow held nodes are drained (guarded); a dry run drains nobody and stores
``would_drain`` events.

A database that does not answer still gets every figure later (`screener spool replay`),
but then nobody is drained.

Once the run is stored (and its drains done), the early-warning marks of the held nodes are
fitted again and stored (store/trend_marks.py), so `screener nodes` and the exporter read
them instead of fitting: never at the sweep's cost (an error is one log line).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from screener import app
from screener.errors import ConfigError, StoreError
from screener.hooks import drains
from screener.hooks.log import HookLog, describe_error
from screener.hostlist import expand_nodeset, fold_nodes
from screener.pipeline import ProbeLocks, ScreenResult
from screener.policy import Policy, database_url
from screener.probe_data import Trigger
from screener.slurm import SlurmClient, SlurmNode, select_client
from screener.store import Store, open_store
from screener.store.slurm_records import SlurmRecords
from screener.store.trend_marks import refresh_marks
from screener.sweep.drained import drained_idle
from screener.sweep.due import drain_due
from screener.sweep.learn import Learning
from screener.sweep.mode import SweepMode, submit_argv
from screener.sweep.step import StepProber, srun_probe_argv, step_results
from screener.sweep.submit import idle_nodes, submit_sweep
from screener.transport.base import Transport
from screener.verdict.trend import TrendStatus

__all__ = [
    "SweepMode",
    "batch_policy",
    "idle_nodes",
    "refresh_trend_marks",
    "run_sweep",
    "srun_probe_argv",
    "step_results",
    "submit_argv",
    "submit_sweep",
]


def run_sweep(policy: Policy, env: Mapping[str, str], log: HookLog, mode: SweepMode) -> int:
    """Inside the sweep job: probe the held nodes, judge, drain (``mode``: dry run, deep).
    Nothing is reached over SSH (batch_policy). 0 done."""
    nodelist = env.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        raise ConfigError(
            "screener sweep runs inside a Slurm job (jobs/sweep.sbatch); "
            "use `screener sweep --submit` to start one"
        )
    held = expand_nodeset(nodelist)
    job_id = env.get("SLURM_JOB_ID")
    log(f"sweep job {job_id or '?'} holds {fold_nodes(held)}: {mode.describe(policy)}")
    policy = batch_policy(policy)
    client, why = select_client(policy.slurm)
    log(f"slurm backend {why}")
    url = database_url(policy)
    store: Store | None = None
    unavailable: str | None = None
    try:
        store = open_store(url, upgrade=url.startswith("sqlite"))
    except StoreError as exc:
        if url.startswith("sqlite"):  # a local file: a path/permission mistake, not an outage
            raise
        unavailable = str(exc)
        log(f"database unavailable ({exc}): probing the held nodes, results to the spool")
    try:
        sweep = Sweep(policy, held, job_id, client, log, mode)
        sweep.run(store, unavailable)
    finally:
        if store is not None:
            store.close()
    return 0


def batch_policy(policy: Policy) -> Policy:
    """The policy the sweep job screens with: the local transport and no client key, so
    nothing in the job (probe, recovery of killed runs, SIGTERM cleanup) opens SSH."""
    local = dataclasses.replace(policy.transport, kind="local", client_keys=())
    return dataclasses.replace(policy, transport=local)


class Sweep:
    """One sweep job: the held nodes, and what is done once they are judged."""

    def __init__(
        self,
        policy: Policy,
        held: Sequence[str],
        job_id: str | None,
        client: SlurmClient,
        log: HookLog,
        mode: SweepMode,
    ) -> None:
        self.policy = policy
        self.held = list(held)
        self.job_id = job_id
        self.client = client
        self.log = log
        self.mode = mode
        # a rolling job's runs are its own: "did last night's sweep finish" is not its answer
        self.trigger = Trigger.ROLLING if mode.rolling else Trigger.SWEEP

    def run(self, store: Store | None, unavailable: str | None) -> ScreenResult:
        """Screen the held nodes with the screen's loop, then act (after the verdicts,
        inside the run: a SIGTERM then still stops cleanly)."""
        records = SlurmRecords(store) if store is not None else None
        every = {n.name: n for n in self.client.nodes()}
        if records is not None and not self.mode.dry_run:  # killed runs' intents decide "ours"
            drains.finish_pending(self.client, records, datetime.now(UTC), self.log, current=every)
        if records is not None and not self.mode.rolling:  # the nightly sweep's to probe
            drained = drained_idle(every, records, self.held)
            if drained:
                self.log(
                    f"drained nodes {fold_nodes(drained)} are probed by the submitting host "
                    "(screener sweep --submit), not by this job"
                )

        def prober(_transport: Transport, _locks: ProbeLocks | None) -> StepProber:
            return StepProber(self.held, self.policy, self.mode.deep, self.mode.config, self.log)

        async def after(_transport: Transport, result: ScreenResult) -> None:
            self._act(records, result, every)

        request = app.ScreenRequest(
            tuple(self.held),
            self.policy,
            trigger=self.trigger,
            job_id=self.job_id,
            store=store,
            db_unavailable=unavailable,
            after=after,
            prober=prober,
            run_info={"sweep_mode": self.mode.as_dict()},
        )
        result = app.run_screen(request)
        if store is not None:
            refresh_trend_marks(store, self.policy, result, self.held, self.log)
            self._learn(store, result)
        return result

    def _learn(self, store: Store, result: ScreenResult) -> None:
        """The nightly sweep's learning reads of the nodes it passed (sweep/learn.py): with the
        triage on, ``sweep.triage_reads`` above 0, and this run stored. Never fails the sweep:
        an error is one log line, and the triage compares with what it had."""
        sw, pp = self.policy.sweep, self.policy.prolog
        if self.mode.rolling or not sw.triage_reads or not pp.triage:
            return
        if result.run_id is None or result.store_error:
            self.log("learning reads not taken: this sweep's run is not in the database")
            return
        started = time.monotonic()
        try:
            Learning(self.policy, store, self.trigger, self.job_id, self.mode.config, self.log).run(
                result, self.held
            )
        except Exception as exc:  # history for the triage never fails the sweep
            self.log(f"learning reads stopped ({describe_error(exc)}): the triage keeps its own")
            return
        self.log(f"learning reads done in {time.monotonic() - started:.1f} s")

    def _act(
        self, records: SlurmRecords | None, result: ScreenResult, every: Mapping[str, SlurmNode]
    ) -> None:
        summary, log = result.summary, self.log
        for note in result.notes:  # planted names moved aside (screener.probe.private)
            log(note)
        for v in summary.verdicts:
            log(f"{v.node}: {v.status.value} {v.reason}")
        if records is None or result.store_error or result.run_id is None:
            log(f"{result.store_error or 'no database'}: nobody drained nor resumed this sweep")
            return
        policy, now, run_id = self.policy, datetime.now(UTC), result.run_id
        drains.close_passing(summary, records, now, run_id)
        partition = [
            n.name
            for n in every.values()
            if not policy.sweep.partition or policy.sweep.partition in n.partitions
        ]
        dry_run = policy.slurm.dry_run or self.mode.dry_run
        with drains.acting(records):  # the guard counts concurrent runs' drains
            plan = drains.decide_drains(
                summary, run_id, len(self.held), partition, records, policy, now
            )
            drains.apply_drains(
                plan,
                drains.DrainContext(
                    self.client, records, run_id, self.trigger, self.job_id, now, dry_run, log
                ),
            )
        if (
            policy.sweep.max_age_h > 0 and not self.mode.rolling
        ):  # busy nodes no sweep reached for that long (drained ones are skipped there)
            unheld = [n for n in partition if n not in self.held]
            drain_due(
                policy, self.client, records, every, partition, unheld, run_id, now, dry_run, log
            )


def refresh_trend_marks(
    store: Store,
    policy: Policy,
    result: ScreenResult,
    nodes: Sequence[str],
    log: Callable[[str], None],
) -> None:
    """After a sweep's run is stored: fit the early warning of the ``nodes`` it probed and
    store their marks (trend_marks.refresh_marks), then log how many are DECLINING and how
    long it took. Never raises: a failure is one log line, the sweep's exit is its own,
    and the readers keep the previous marks until the next sweep."""
    if result.run_id is None or result.store_error:
        log("trend marks not refreshed: this sweep's run is not in the database")
        return
    started = time.monotonic()
    try:
        fitted = refresh_marks(store, policy, datetime.now(UTC), nodes, result.run_id)
    except Exception as exc:  # a warning's bookkeeping never fails the sweep
        log(f"trend marks not refreshed ({describe_error(exc)}): the previous ones stay")
        return
    declining = sorted({v.node for v in fitted if v.status is TrendStatus.DECLINING})
    took = time.monotonic() - started
    named = f": {fold_nodes(declining)}" if declining else ""
    log(
        f"trend marks of {len(nodes)} nodes refreshed in {took:.1f} s: "
        f"{len(declining)} DECLINING{named}"
    )
