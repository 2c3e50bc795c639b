"""`screener sweep`: the nightly sweep, run inside a Slurm job that holds the idle nodes.

Nodes the job holds are probed by a Slurm step on each of them (``srun screener probe
--local --json``: Slurm is the fan-out); idle nodes that screener drained (they cannot run a
job) are probed over SSH. All results are judged once, suspects re-probed the same way.
Slow held nodes are drained (guarded); a screener-drained node is resumed after
``sweep.resume_after`` consecutive passing sweeps, if its reason is still screener's.

Results are written through the spool (screener.spool), like a screen's: a database that
does not answer still gets every figure later (`screener spool replay`), but then nobody is
drained or resumed, and drained nodes are not probed (which ones are screener's is in the
database). Remote processes carry the run tag, so a killed sweep's leftovers are found.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from screener import spool
from screener.app import make_transport, new_run_tag, recorded_run
from screener.errors import ConfigError, ScreenerError
from screener.hooks import actions
from screener.hooks.logging import HookLog
from screener.hooks.probe_json import parse_node_lines
from screener.model import NodeProbe, RunSummary, Status, Trigger
from screener.nodes import expand_nodeset, fold_nodes
from screener.pipeline import judge_round2, past_figures, probe_all
from screener.policy import Policy
from screener.runner import run_command
from screener.slurm import SlurmClient, SlurmNode, select_client
from screener.store import Store
from screener.store.locks import NodeLocks, probe_locks
from screener.store.slurm_records import SlurmRecords
from screener.transport.base import RUN_TAG, Transport
from screener.verdict import confirm, evaluate, references, suspects

STEP_SLACK_S = 120.0  # on top of the expected probe time, for srun to start its tasks


def srun_probe_argv(nodes: Sequence[str], deep: bool) -> list[str]:
    """One Slurm step over ``nodes``: one task per node, each probing its own node."""
    return [
        "srun",
        f"--nodes={len(nodes)}",  # exactly these nodes ...
        f"--nodelist={fold_nodes(nodes)}",  # ... (validated names, folded)
        "--ntasks-per-node=1",  # one probe per node: two would compete for the device
        "--kill-on-bad-exit=0",  # one node's failure must not kill the others' probes
        sys.executable,  # the same screener installation as this process
        "-m",
        "screener.cli",
        "probe",
        "--local",
        "--json",
        *(["--deep"] if deep else []),
    ]


def step_results(stdout: str, nodes: Sequence[str]) -> dict[str, list[NodeProbe]]:
    """Per node, its rounds from the step's output; a node that printed nothing is UNKNOWN."""
    out = {n: rounds for n, (rounds, _) in parse_node_lines(stdout).items() if n in nodes}
    for n in nodes:
        if n not in out or not out[n]:
            out[n] = [
                NodeProbe(node=n, error=f"{n}: no result from the Slurm step", error_kind="probe")
            ]
    return out


class Sweep:
    """One sweep: the held nodes, the drained nodes, their probes, and what was done."""

    def __init__(
        self,
        policy: Policy,
        held: Sequence[str],
        job_id: str | None,
        client: SlurmClient,
        log: HookLog,
        deep: bool = False,
    ) -> None:
        self.policy = policy
        self.held = list(held)
        self.job_id = job_id
        self.client = client
        self.log = log
        self.deep = deep

    def _step(self, nodes: Sequence[str]) -> dict[str, list[NodeProbe]]:
        if not nodes:
            return {}
        pp = self.policy.probe
        per_round = 3 * (pp.runtime_s + pp.ramp_s) + pp.size_mib / 50
        rounds = self.policy.sweep.deep_max_rounds if self.deep else 1
        timeout = per_round * rounds + STEP_SLACK_S
        try:
            res = run_command(srun_probe_argv(nodes, self.deep), timeout=timeout)
        except ScreenerError as exc:
            self.log(f"Slurm step failed: {exc}")
            return step_results("", nodes)
        if res.exit_status != 0:
            self.log(f"Slurm step exited {res.exit_status}: {res.stderr.strip()[-300:]}")
        return step_results(res.stdout, nodes)

    async def _round(
        self,
        transport: Transport,
        held: Sequence[str],
        drained: Sequence[str],
        rnd: int,
        locks: NodeLocks | None = None,
    ) -> dict[str, list[NodeProbe]]:
        # Held nodes are Slurm's to keep exclusive; drained ones (SSH) take node locks, so a
        # second sweep or a manual screen never probes them at the same time.
        step = asyncio.to_thread(self._step, held)
        ssh = probe_all(transport, drained, self.policy, rnd, locks=locks)
        by_step, by_ssh = await asyncio.gather(step, ssh)
        return {**by_step, **{p.node: [p] for p in by_ssh}}

    async def run(self, store: spool.SpoolingStore, tag: str = "") -> RunSummary:
        """Probe, judge and record through ``store``; act only when the DB holds the run."""
        policy, log = self.policy, self.log
        if tag:
            RUN_TAG.set(tag)  # the SSH probes of drained nodes carry it
        db = store.store
        records = SlurmRecords(db) if isinstance(db, Store) else None
        now = datetime.now(UTC)
        every = {n.name: n for n in self.client.nodes()}
        if records is not None:  # a killed run's drain intents first: they decide "ours"
            actions.finish_pending(self.client, records, now, log, current=every)
        drained = (
            []
            if records is None
            else [n for n in every.values() if n.name not in self.held and _ours(n, records)]
        )
        drained_names = [n.name for n in drained]
        if drained_names:
            log(f"screener-drained idle nodes probed over SSH: {fold_nodes(drained_names)}")
        nodes = self.held + drained_names
        history, fleet = past_figures(store, nodes, policy, now)
        run_id = store.start_run(
            Trigger.SWEEP, nodes, policy.to_dict(), self.job_id, fold_nodes(nodes), now
        )
        transport = make_transport(policy.transport)
        held_locks = contextlib.ExitStack()
        locks = held_locks.enter_context(probe_locks(db))
        if locks is not None:
            locks.holder = f"run {store.run_id}"
        try:
            first = await self._round(transport, self.held, drained_names, 1, locks)
            self._record(store, run_id, first, 1)
            final = {n: rounds[-1] for n, rounds in first.items()}
            summary = evaluate(list(final.values()), history, policy.verdict, fleet)
            again = suspects(summary) if policy.verdict.confirm else []
            if again:
                # Same confirmation as a screen: suspects beside healthy reference nodes,
                # round 2 judged on round-2 figures (pipeline.judge_round2).
                refs = references(summary, policy.verdict.confirm_references)
                log(f"re-probing suspects {fold_nodes(again)} beside {len(refs)} references")
                wanted = [*again, *refs]
                held2 = [n for n in wanted if n in self.held]
                second = await self._round(
                    transport, held2, [n for n in wanted if n not in held2], 2, locks
                )
                self._record(store, run_id, second, 1 + max(len(r) for r in first.values()))
                last = [rounds[-1] for rounds in second.values()]
                round2 = judge_round2(list(final.values()), last, refs, history, fleet, policy)
                final.update({n: rounds[-1] for n, rounds in second.items() if n in again})
                summary = confirm(summary, round2, refs)
        except BaseException:
            store.finish_run(run_id, datetime.now(UTC), "failed")
            raise
        finally:
            await transport.close()
            held_locks.close()
        store.record_verdicts(run_id, summary)
        store.finish_run(run_id, datetime.now(UTC), "done")
        for v in summary.verdicts:
            log(f"{v.node}: {v.status.value} {v.reason}")
        if records is None or store.spooled or store.lost is not None or store.run_id is None:
            where = store.path if store.spooled else "nowhere (the spool failed too)"
            log(f"database unavailable ({store.reason}): results in {where}; nobody drained")
            log("nor resumed this sweep")
            return summary
        self._act(records, store.run_id, summary, every, drained)
        return summary

    def _record(
        self,
        store: spool.SpoolingStore,
        run_id: int,
        probes: Mapping[str, list[NodeProbe]],
        first_round: int,
    ) -> None:
        """Every round of every node (deep mode: one row per steady-state round)."""
        for rounds in probes.values():
            for i, p in enumerate(rounds):
                store.record_probe(run_id, p, first_round + i)

    def _act(
        self,
        records: SlurmRecords,
        run_id: int,
        summary: RunSummary,
        every: Mapping[str, SlurmNode],
        drained: Sequence[SlurmNode],
    ) -> None:
        policy, now = self.policy, datetime.now(UTC)
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
        with actions.acting(records):  # the guard counts concurrent runs' drains
            plan = actions.decide_drains(
                held_summary, run_id, len(self.held), partition, records, policy, now
            )
            actions.apply_drains(
                plan,
                self.client,
                records,
                run_id,
                Trigger.SWEEP,
                self.job_id,
                now,
                policy.slurm.dry_run,
                self.log,
            )
        for v in summary.verdicts:
            if v.node in drained_names:
                self._maybe_resume(records, run_id, v.node, v.status, every)

    def _maybe_resume(
        self,
        records: SlurmRecords,
        run_id: int,
        node: str,
        status: Status,
        every: Mapping[str, SlurmNode],
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
        if current:
            actions.resume_node(
                current[0],
                self.client,
                records,
                datetime.now(UTC),
                run_id,
                f"passed {passes} consecutive sweeps",
                self.policy.slurm.dry_run,
                self.log,
            )


def _ours(node: SlurmNode, records: SlurmRecords) -> bool:
    """Idle, drained, and drained by screener with the reason it still carries."""
    return node.idle_drained and records.screener_reason(node.name) == node.reason


def run_sweep(policy: Policy, env: Mapping[str, str], log: HookLog, deep: bool = False) -> int:
    """Inside the sweep job: probe, judge, drain, resume. 0 done, 1 error."""
    nodelist = env.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        raise ConfigError(
            "screener sweep runs inside a Slurm job (jobs/sweep.sbatch); "
            "use `screener sweep --submit` to start one"
        )
    held = expand_nodeset(nodelist)
    client, why = select_client(policy.slurm)
    log(f"sweep job {env.get('SLURM_JOB_ID', '?')} holds {fold_nodes(held)}; slurm backend {why}")
    with recorded_run(held, policy, new_run_tag()) as recorder:
        assert recorder is not None  # enabled: a recorder, on the DB or the spool
        if recorder.store is None:
            log(f"database unavailable ({recorder.reason}): probing the held nodes, results")
            log("to the spool")
        sweep = Sweep(policy, held, env.get("SLURM_JOB_ID"), client, log, deep)
        asyncio.run(sweep.run(recorder, recorder.uid))
    return 0


def submit_argv(nodes: Sequence[str], script: str, wait: bool) -> list[str]:
    """sbatch the sweep script on exactly ``nodes``, held exclusively."""
    return [
        "sbatch",
        "--parsable",  # print only the job id
        "--exclusive",  # no user job shares a node while it is probed
        f"--nodes={len(nodes)}",
        f"--nodelist={fold_nodes(nodes)}",  # the nodes that were idle just now
        "--job-name=screener-sweep",
        *(["--wait"] if wait else []),  # block until the sweep ended (tests, cron)
        script,  # a path given by the admin, passed as one argv word
    ]


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


def submit_sweep(policy: Policy, script: str, wait: bool, log: HookLog) -> int:
    """Submit jobs/sweep.sbatch over the idle nodes (exit status of sbatch)."""
    client, why = select_client(policy.slurm)
    nodes = idle_nodes(client.nodes(), policy.sweep.partition)
    if not nodes:
        log("no idle node to hold: nothing submitted")
        return 0
    argv = submit_argv(nodes, script, wait)
    log(f"submitting the sweep over {fold_nodes(nodes)} ({why})")
    per_node = 3 * (policy.probe.runtime_s + policy.probe.ramp_s) * 2 + STEP_SLACK_S
    res = run_command(argv, timeout=(per_node * 4 if wait else 60.0) + 600.0)
    if res.exit_status != 0:
        log(f"sbatch failed: {res.stderr.strip()}")
    else:
        log(f"sweep job {res.stdout.strip()} {'finished' if wait else 'submitted'}")
    return res.exit_status
