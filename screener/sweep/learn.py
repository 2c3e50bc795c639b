"""The nightly sweep's learning reads (issue 44): after its full probe, a few short reads of
the prolog's triage recipe of the nodes it passed, each stored with the full probe's
decision as that recipe's history.

The triage judges a node beside its own usual place and tail under its own recipe
(verdict/usual.py). A site's sweeps left only the full probe's history, so a slower drive
model's long triage tail (its throttle, 4-5x its peers' p99 in a 0.5 s window) was a doubt
on its first three jobs, each paying a 16-23 s full probe (bench/time_to_start.py, mixed
fleet, 2 of 3 healthy jobs on 2026-12-03). The sweep holds idle nodes and has just vouched
for them: their short reads there are what the triage will compare with.

Nothing here decides: a read far below where the full probe just put the node, or with
more than a peer-relative finding, is not kept (one log line says why)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from screener.errors import ScreenerError
from screener.hostlist import fold_nodes
from screener.pipeline import Rounds, ScreenResult
from screener.policy import Policy, VerdictPolicy
from screener.probe.fio import recipe_fingerprint
from screener.probe.short import triage_policy
from screener.probe_data import NodeProbe, RunSummary, Status, Trigger, Verdict
from screener.store import Store
from screener.store.history import history_window, past_figures, past_tails
from screener.sweep.step import StepProber, srun_probe_argv, step_results, step_timeout_s
from screener.transport.local import LocalTransport
from screener.verdict.confirm import USUAL_PLACE_TAG
from screener.verdict.judge import evaluate
from screener.verdict.rules import MIN_HISTORY
from screener.verdict.usual import RELATIVE_TAGS

# What a short read may find on a node the full probe just passed and still be its own: its
# place among the round, its tail (what is being learned), a close call.
LEARNABLE_TAGS = RELATIVE_TAGS | {USUAL_PLACE_TAG, "close_call"}
NAMED = 8  # reads not kept, named one line each per round; the rest are counted


def reads_wanted(have: Mapping[str, int], cap: int) -> int:
    """How many learning reads: as many as the node with the fewest lacks of MIN_HISTORY
    triage-recipe tails within the age window (``have``: by node), at most ``cap``
    (sweep.triage_reads); 0 when every node has them (the prolog's own triages keep them
    current), ``cap`` is 0 or there is no node."""
    if cap <= 0 or not have:
        return 0
    return max(0, min(cap, MIN_HISTORY - min(have.values())))


def vouched(main: Verdict, read: Verdict, policy: VerdictPolicy, label: str) -> Verdict | str:
    """A learning read (``read``, judged among the round's short reads) of a node whose full
    probe (``main``) was a baseline: the read's figures with the full probe's decision, to
    keep as history; else why not. Kept only when its place among the round is within the
    peer gap (``min_peer_drop``) of the full probe's and it found nothing but where the
    node reads (``LEARNABLE_TAGS``): a node that dropped between the two is not learned."""
    if not main.baseline:
        return f"its full probe was {main.status.value}, not a baseline"
    if read.status == Status.UNKNOWN or read.read_mb_s is None:
        return f"no figures ({read.reason})"
    place, was = read.read_place, main.read_place
    if place is None or was is None:
        return "no peer median to place it"
    if place < was * policy.min_peer_drop:
        return (
            f"read {place:.2f}x peers, below {policy.min_peer_drop:g} of its full probe's"
            f" {was:.2f}x"
        )
    if extra := sorted(set(read.signals) - LEARNABLE_TAGS):
        return f"{read.status.value} ({', '.join(extra)})"
    return replace(
        read,
        status=main.status,
        signals=main.signals,
        baseline=True,
        reason=(
            f"{label}: seq read {read.read_mb_s:,.0f} MB/s = {place:.2f}x peers (its full probe"
            f" {was:.2f}x, {main.status.value}): the triage recipe's history"
        ),
    )


class Learning:
    """One sweep's learning reads: the policy, the store, what the run is filed under."""

    def __init__(
        self,
        policy: Policy,
        store: Store,
        trigger: Trigger,
        job_id: str | None,
        config: str | None,
        log: Callable[[str], None],
    ) -> None:
        self.policy = policy
        self.short = triage_policy(policy)
        self.store = store
        self.trigger = trigger
        self.job_id = job_id
        self.config = config
        self.log = log

    def run(self, result: ScreenResult, held: Sequence[str]) -> None:
        """Read the nodes ``result`` passed (baseline verdicts) with the triage's recipe and
        store each read that ``vouched`` keeps, one run per read."""
        main = {v.node: v for v in result.summary.verdicts if v.baseline}
        nodes = [n for n in held if n in main]
        if not nodes:
            self.log("learning reads: no node passed the full probe, none taken")
            return
        recipe, since = history_window(self.short, datetime.now(UTC))
        tails = self.store.read_tails(nodes, MIN_HISTORY, recipe, since)
        count = reads_wanted(
            {n: len(tails.get(n, ())) for n in nodes}, self.policy.sweep.triage_reads
        )
        if not count:
            self.log(f"learning reads: {fold_nodes(nodes)} hold their triage history, none taken")
            return
        got = asyncio.run(self._step(nodes, count))
        if not any(p.usable for r in got.values() for p in r.probes):
            first = next(iter(got.values())).last.error if got else None
            self.log(f"learning reads: no node read ({first or 'no output'}), none kept")
            return
        for k in range(count):
            probes = [_nth(got[n], k, n, recipe) for n in nodes]
            self._keep(probes, main, f"the sweep's short read {k + 1} of {count}")

    async def _step(self, nodes: Sequence[str], count: int) -> dict[str, Rounds]:
        """The reads, in one Slurm step (``count`` rounds per node, one after another)."""
        recipe = recipe_fingerprint(self.short.probe)
        argv = srun_probe_argv(nodes, False, self.config, triage=count)
        local = LocalTransport()
        try:
            timeout = step_timeout_s(self.short, False, count)
            res = await local.run(socket.gethostname(), argv, timeout=timeout)
        except ScreenerError as exc:
            self.log(f"learning reads: Slurm step failed: {exc}")
            return step_results("", nodes, recipe)
        finally:
            if not self.policy.probe.keep_file:  # as the screen's last step: no file left
                await StepProber(nodes, self.policy, False, self.config, self.log).cleanup(nodes)
            await local.close()
        if res.exit_status != 0:
            said = " | ".join(line.strip() for line in res.stderr.splitlines() if line.strip())
            self.log(f"learning reads: Slurm step exited {res.exit_status}: {said[-300:]}")
        return step_results(res.stdout, nodes, recipe)

    def _keep(self, probes: Sequence[NodeProbe], main: Mapping[str, Verdict], label: str) -> None:
        """Judge one round of reads among themselves (as a triage would), store the kept."""
        now = datetime.now(UTC)
        nodes = [p.node for p in probes]
        history, fleet = past_figures(self.store, nodes, self.short, now, (self.policy.probe,))
        tails = past_tails(self.store, nodes, self.short, now)
        summary = evaluate(probes, history, self.short.verdict, fleet, tails=tails)
        kept: list[Verdict] = []
        left: list[str] = []
        for v in summary.verdicts:
            said = vouched(main[v.node], v, self.short.verdict, label)
            if isinstance(said, str):
                left.append(f"{v.node}: {label} not kept as history: {said}")
            else:
                kept.append(said)
        for line in left[:NAMED]:
            self.log(line)
        if len(left) > NAMED:  # a fleet-wide failure is one line, not one per node
            self.log(f"{label}: {len(left) - NAMED} more nodes not kept as history")
        if not kept:
            return
        info = {**self.short.to_dict(), "sweep_learning": label}
        names = [v.node for v in kept]
        run = self.store.start_run(self.trigger, names, info, self.job_id, fold_nodes(names), now)
        self.store.record_verdicts(run, RunSummary(verdicts=tuple(kept)))
        self.store.finish_run(run, datetime.now(UTC), "done")
        self.log(f"{label} (the triage's recipe) kept for {fold_nodes(names)} (run {run})")


def _nth(rounds: Rounds, k: int, node: str, recipe: str) -> NodeProbe:
    """The ``k``-th read of a node; an error probe when it has fewer (a failed task)."""
    if k < len(rounds.probes):
        return rounds.probes[k]
    last = rounds.last
    why = last.error or f"{node}: read {k + 1} missing from the Slurm step"
    return NodeProbe(node=node, error=why, error_kind="probe", recipe=recipe)
