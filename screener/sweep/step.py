"""How the sweep job probes: the nodes it holds by one Slurm step (``srun screener probe
--local --json`` on each: Slurm is the fan-out), and nothing else: the job runs on a compute
node, which holds no SSH key (screener-drained nodes are probed by the submitting host,
sweep/drained.py). A pipeline.Prober, so the sweep runs the screen's own loop
(judging, confirmation, keep_file, SIGTERM handling in app.run_screen)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Collection, Sequence

from screener.errors import ScreenerError
from screener.hostlist import fold_nodes
from screener.pipeline import Rounds
from screener.policy import Policy
from screener.probe.fio import layout_timeout_s, policy_jobs, probe_duration_s, recipe_fingerprint
from screener.probe.lines import parse_node_lines
from screener.probe_data import NodeProbe
from screener.transport.local import LocalTransport

STEP_SLACK_S = 120.0  # on top of the probe time bound, for srun to start its tasks


def srun_probe_argv(
    nodes: Sequence[str],
    deep: bool,
    config: str | None = None,
    remove_file: bool = False,
    triage: int = 0,
) -> list[str]:
    """One Slurm step over ``nodes``: one task per node, each probing its own node with the
    sweep's own policy file (given explicitly: no task reads it from its environment);
    ``triage``: that many short reads of the triage's recipe instead (sweep/learn.py)."""
    return [
        "srun",
        f"--nodes={len(nodes)}",  # exactly these nodes ...
        f"--nodelist={fold_nodes(nodes)}",  # ... (validated names, folded)
        "--ntasks-per-node=1",  # one probe per node: two would compete for the device
        "--kill-on-bad-exit=0",  # one node's failure must not kill the others' probes
        sys.executable,  # the same screener installation as this process
        "-m",
        "screener.cli",
        *(["--config", config] if config else []),  # the policy the sweep itself runs with
        "probe",
        "--local",
        "--json",
        *(["--remove-file"] if remove_file else []),  # keep_file = false, after the last round
        *(["--deep"] if deep else []),
        *(["--triage", str(triage)] if triage else []),  # the learning reads, one after another
    ]


def step_timeout_s(policy: Policy, deep: bool, rounds: int = 1) -> float:
    """Bound on one step: per round the fio run plus a command timeout each for preflight
    and fio (as probe_node's own timeouts), deep_max_rounds rounds in deep mode (else
    ``rounds``), the one-off layout, and srun's start-up."""
    pp, slack = policy.probe, policy.transport.command_timeout_s
    per_round = probe_duration_s(pp, policy_jobs(pp)) + 2 * slack
    rounds = policy.sweep.deep_max_rounds if deep else rounds
    return rounds * per_round + layout_timeout_s(pp, slack) + STEP_SLACK_S


def step_results(stdout: str, nodes: Sequence[str], recipe: str | None = None) -> dict[str, Rounds]:
    """Per node, its rounds from the step's output; a node that printed nothing is UNKNOWN."""
    parsed = parse_node_lines(stdout)
    out: dict[str, Rounds] = {}
    for n in nodes:
        rounds, steady = parsed.get(n, ([], None))
        if not rounds:
            error = f"{n}: no result from the Slurm step"
            rounds = [NodeProbe(node=n, error=error, error_kind="probe", recipe=recipe)]
        out[n] = Rounds(tuple(rounds), steady)
    return out


NOT_HELD = "not held by the sweep job: a compute node reaches other nodes only through Slurm"


def not_held(nodes: Sequence[str], held: Collection[str], recipe: str) -> dict[str, Rounds]:
    """Per node outside ``held``, one UNKNOWN round saying why it was not probed. Pure."""
    return {
        n: Rounds((NodeProbe(node=n, error=f"{n}: {NOT_HELD}", error_kind="probe", recipe=recipe),))
        for n in nodes
        if n not in held
    }


class StepProber:
    """Held nodes by a Slurm step; any other node is refused (UNKNOWN), never reached over
    SSH: the job's host must not need the key that reaches every node.

    Not a pipeline.TransportProber over an srun transport: that one runs each probe command
    (preflight, facts, layout, fio, iostat) per node, with its own timeout, lock and deadline;
    a step runs the whole probe of every held node in one srun (one Slurm step per round,
    not one per command and node) and gets lines back (probe.lines). What they share is the
    probe itself: each step task runs pipeline.probe_node on its node (run.local)."""

    def __init__(
        self,
        held: Sequence[str],
        policy: Policy,
        deep: bool,
        config: str | None,
        log: Callable[[str], None],
    ) -> None:
        self.held = set(held)
        self.policy = policy
        self.deep = deep
        self.config = config
        self.log = log
        self.local = LocalTransport()  # srun runs here, cancellable, with the run tag

    async def probe(
        self,
        nodes: Sequence[str],
        round_no: int,
        stop_at: float | None,
        jobs: Sequence[str] | None = None,
    ) -> dict[str, Rounds]:
        """The step runs the whole recipe on held nodes (``jobs`` is ignored): the sweep
        confirms in full, as it probes in full."""
        held = [n for n in nodes if n in self.held]
        refused = not_held(nodes, self.held, recipe_fingerprint(self.policy.probe))
        if refused:
            self.log(f"{fold_nodes(list(refused))}: not held by this job, not probed (no SSH here)")
        return {**refused, **await self._step(held)}

    async def _step(self, nodes: Sequence[str]) -> dict[str, Rounds]:
        recipe = recipe_fingerprint(self.policy.probe)
        if not nodes:
            return {}
        argv = srun_probe_argv(nodes, self.deep, self.config)
        try:
            res = await self.local.run(
                socket.gethostname(), argv, timeout=step_timeout_s(self.policy, self.deep)
            )
        except ScreenerError as exc:
            self.log(f"Slurm step failed: {exc}")
            return step_results("", nodes, recipe)
        if res.exit_status != 0:
            self.log(f"Slurm step exited {res.exit_status}: {res.stderr.strip()[-300:]}")
        return step_results(res.stdout, nodes, recipe)

    async def cleanup(self, nodes: Sequence[str]) -> None:
        """``[probe] keep_file = false``: one more step removes the held nodes' probe files."""
        held = [n for n in nodes if n in self.held]
        if held:
            argv = srun_probe_argv(held, False, self.config, remove_file=True)
            slack = self.policy.transport.command_timeout_s + STEP_SLACK_S
            try:
                await self.local.run(socket.gethostname(), argv, timeout=slack)
            except ScreenerError as exc:  # best effort: the verdicts are already made
                self.log(f"probe files not removed on {fold_nodes(held)}: {exc}")
