"""`screener sweep`: the nightly sweep, run inside a Slurm job that holds the idle nodes.

Nodes the job holds are probed by a Slurm step on each of them (``srun screener probe
--local --json``: Slurm is the fan-out); idle nodes that screener drained (they cannot run a
job) are probed over SSH. The probing, judging and confirmation are the screen's own loop
(app.run_screen with the sweep's prober, hooks.sweep_step): run tag, SIGTERM handling, spool,
keep_file. Slow held nodes are drained (guarded); a screener-drained node is resumed after
``sweep.resume_after`` consecutive passing sweeps, if its reason is still screener's.
A dry run drains and resumes nobody and stores ``would_drain`` / ``would_resume`` events.

A database that does not answer still gets every figure later (`screener spool replay`),
but then nobody is drained or resumed, and drained nodes are not probed (which ones are
screener's is in the database).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from screener import app
from screener.errors import ConfigError, StoreError
from screener.hooks import actions
from screener.hooks.decide import may_resume
from screener.hooks.hooklog import HookLog
from screener.hooks.sweep_due import drain_due, is_due, make_slow
from screener.hooks.sweep_step import StepProber, srun_probe_argv, step_results
from screener.hooks.sweep_submit import SweepMode, idle_nodes, submit_argv, submit_sweep
from screener.hostlist import expand_nodeset, fold_nodes
from screener.pipeline import ProbeLocks, ScreenResult
from screener.policy import Policy, database_url
from screener.probe_data import RunSummary, Status, Trigger, Verdict
from screener.slurm import SlurmClient, SlurmNode, select_client
from screener.store import Store, open_store
from screener.store.slurm_records import SlurmRecords
from screener.transport.base import Transport

__all__ = [
    "SweepMode",
    "idle_nodes",
    "run_sweep",
    "srun_probe_argv",
    "step_results",
    "submit_argv",
    "submit_sweep",
]


def run_sweep(policy: Policy, env: Mapping[str, str], log: HookLog, mode: SweepMode) -> int:
    """Inside the sweep job: probe, judge, drain, resume (``mode``: dry run, deep). 0 done."""
    nodelist = env.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        raise ConfigError(
            "screener sweep runs inside a Slurm job (jobs/sweep.sbatch); "
            "use `screener sweep --submit` to start one"
        )
    held = expand_nodeset(nodelist)
    job_id = env.get("SLURM_JOB_ID")
    log(f"sweep job {job_id or '?'} holds {fold_nodes(held)}: {mode.describe(policy)}")
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


class Sweep:
    """One sweep: the held nodes, the drained ones, and what is done once they are judged."""

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
        """Pick the nodes, screen them with the screen's loop, then act (after the verdicts,
        inside the run: a SIGTERM then still stops cleanly)."""
        records = SlurmRecords(store) if store is not None else None
        every = {n.name: n for n in self.client.nodes()}
        if records is not None and not self.mode.dry_run:  # killed runs' intents decide "ours"
            actions.finish_pending(self.client, records, datetime.now(UTC), self.log, current=every)
        drained = (
            []
            if records is None or self.mode.rolling  # the nightly sweep's to probe, resume
            else [n for n in every.values() if n.name not in self.held and _ours(n, records)]
        )
        if drained:
            names = fold_nodes([n.name for n in drained])
            self.log(f"screener-drained idle nodes probed over SSH: {names}")

        def prober(transport: Transport, locks: ProbeLocks | None) -> StepProber:
            return StepProber(
                self.held, transport, self.policy, locks, self.mode.deep, self.mode.config, self.log
            )

        async def after(_transport: Transport, result: ScreenResult) -> None:
            self._act(records, result, every, drained)

        return app.run_screen(
            self.held + [n.name for n in drained],
            self.policy,
            trigger=self.trigger,
            job_id=self.job_id,
            store=store,
            db_unavailable=unavailable,
            after=after,
            prober=prober,
            run_info={"sweep_mode": self.mode.as_dict()},
        )

    def _act(
        self,
        records: SlurmRecords | None,
        result: ScreenResult,
        every: Mapping[str, SlurmNode],
        drained: Sequence[SlurmNode],
    ) -> None:
        summary, log = result.summary, self.log
        for v in summary.verdicts:
            log(f"{v.node}: {v.status.value} {v.reason}")
        if records is None or result.store_error or result.run_id is None:
            log(f"{result.store_error or 'no database'}: nobody drained nor resumed this sweep")
            return
        policy, now, run_id = self.policy, datetime.now(UTC), result.run_id
        drained_names = {n.name for n in drained}
        held_summary = RunSummary(
            tuple(v for v in summary.verdicts if v.node not in drained_names),
            summary.shared_cause,
            summary.shared_cause_reason,
            summary.peer_read_median_mb_s,
            summary.peer_rand_median_iops,
        )
        actions.close_passing(held_summary, records, now, run_id)
        partition = [
            n.name
            for n in every.values()
            if not policy.sweep.partition or policy.sweep.partition in n.partitions
        ]
        dry_run = policy.slurm.dry_run or self.mode.dry_run
        with actions.acting(records):  # the guard counts concurrent runs' drains
            plan = actions.decide_drains(
                held_summary, run_id, len(self.held), partition, records, policy, now
            )
            actions.apply_drains(
                plan, self.client, records, run_id, self.trigger, self.job_id, now, dry_run, log
            )
        if dry_run and plan.guard is None:
            for node, reason in plan.drain:  # what a live sweep would have done, on record
                records.store.record_event(node, "would_drain", "dry run", now, run_id, reason)
        for v in summary.verdicts:
            if v.node in drained_names and not self._checked(records, run_id, v, summary, dry_run):
                self._maybe_resume(records, run_id, v.node, v.status, dry_run)
        if (
            policy.sweep.max_age_h > 0 and not self.mode.rolling
        ):  # busy nodes no sweep reached for that long
            unheld = [n for n in partition if n not in self.held and n not in drained_names]
            drain_due(
                policy, self.client, records, every, partition, unheld, run_id, now, dry_run, log
            )

    def _checked(
        self, records: SlurmRecords, run_id: int, v: Verdict, summary: RunSummary, dry: bool
    ) -> bool:
        """A node soft-drained for its check (hooks/sweep_due.py), probed now: resumed at
        once if it passed, an ordinary slow drain if slow. False for any other drain."""
        if not is_due(records.screener_reason(v.node), self.policy.slurm.tag):
            return False
        now = datetime.now(UTC)
        if v.status == Status.OK:
            current = self.client.nodes([v.node])  # the reason *now*, not at sweep start
            if current:
                why = "passed the check it was due"
                actions.resume_node(
                    current[0], self.client, records, now, run_id, why, dry, self.log
                )
        elif v.status in (Status.SLOW_READ, Status.SLOW_WRITE) and not dry:
            peers = summary.peer_read_median_mb_s
            make_slow(self.policy, self.client, records, v, peers, run_id, now, self.log)
        else:
            self.log(f"{v.node}: stays drained for its check ({v.status.value})")
        return True

    def _maybe_resume(
        self, records: SlurmRecords, run_id: int, node: str, status: Status, dry_run: bool
    ) -> None:
        k = self.policy.sweep.resume_after
        if status != Status.OK:
            if status in (Status.SLOW_READ, Status.SLOW_WRITE):
                records.open_episode(node, Trigger.SWEEP, datetime.now(UTC), "still slow", run_id)
            self.log(f"{node}: stays drained ({status.value})")
            return
        passes = records.sweep_passes(node)
        if passes < k:
            self.log(f"{node}: passed {passes} of {k} sweeps; stays drained")
            return
        current = self.client.nodes([node])  # the reason *now*, not at sweep start
        if not current:
            return
        why = f"passed {passes} consecutive sweeps"
        now = datetime.now(UTC)
        actions.resume_node(current[0], self.client, records, now, run_id, why, dry_run, self.log)
        recorded = records.screener_reason(node)
        if dry_run and may_resume(current[0], recorded)[0]:
            records.store.record_event(node, "would_resume", why, now, run_id, recorded)


def _ours(node: SlurmNode, records: SlurmRecords) -> bool:
    """Idle, drained, and drained by screener with the reason it still carries."""
    return node.idle_drained and records.screener_reason(node.name) == node.reason
