"""What a prolog does, decided over plain data: no store, no SSH, no Slurm, no clock.

execute.py runs each step this returns and feeds the result back; in the order it asks:

1. ``opening``: which nodes take the fast path, whose sentinels read (before anything when
   every node is fresh, else beside the screen of the others), which are to be probed;
   fresh references join a triage of too few nodes.
2. ``after_sentinels`` (every node was fresh): a node whose sentinel passed stays on the
   fast path, its reading as the note; the others are probed, beside references from those
   that read most as usual, with what they read as a first window (``earlier``).
3. ``first_screen``: the triage (``triage.plan``) or the full probe at once.
4. ``after_screen``: the nodes left in doubt, with references, for a full probe after it:
   a triage's ambiguous and held-back nodes, or the failed beside-sentinels;
   ``after_beside``: what the sentinels that read beside it said.
5. ``second_look``: a triage's passed nodes that read unusually low are read again with
   its short recipe beside their references (a second, not a full probe); ``after_screen``
   of that look keeps in doubt only those still low, with the rest of the doubt.
6. ``escalation``: that full probe, or "no budget left".
7. ``exit_code``: a drain by any screen requeues the job.

Every value is frozen and carries the log lines that say why (``lines``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING

from screener.hostlist import fold_nodes
from screener.policy import Policy, ProbePolicy
from screener.probe.short import triage_policy
from screener.probe_data import Status
from screener.prolog import triage
from screener.prolog.rules import fast_path

if TYPE_CHECKING:
    from screener.probe.sentinel import SentinelResult
    from screener.probe_data import RunSummary

EXIT_REQUEUE = 1  # non-zero from PrologSlurmctld: Slurm requeues the batch job
# Seconds kept back from the budget for deciding, draining and recording.
DECIDE_RESERVE_S = 2.0


@dataclass(frozen=True)
class Deadline:
    """The prolog's budget (``[prolog] budget_s``), counted from the hook's start
    (``time.monotonic()``), with ``reserve_s`` kept back for deciding, draining and
    recording."""

    start: float
    budget_s: float
    reserve_s: float = DECIDE_RESERVE_S

    def left(self, now: float) -> float:
        """Seconds a screen may still take at ``now`` (negative once overdrawn)."""
        return self.budget_s - (now - self.start) - self.reserve_s


@dataclass(frozen=True)
class Known:
    """What the store says of the job's nodes: each one's last pass (an OK verdict of any
    recipe), its latest full-probe status (with triage on, a triage's own verdicts are
    not counted: its doubt is re-triaged), the flaky ones (a slow episode lately), read at
    ``at``. ``stored`` is False without a database: then nothing is known."""

    last_pass: Mapping[str, datetime]
    statuses: Mapping[str, str]
    flaky: frozenset[str]
    at: datetime
    stored: bool = True

    @classmethod
    def nothing(cls, at: datetime) -> Known:
        """No database: every node is probed in full."""
        return cls(MappingProxyType({}), MappingProxyType({}), frozenset(), at, stored=False)

    @classmethod
    def from_store(
        cls,
        every: Mapping[str, tuple[str, datetime]],
        latest: Mapping[str, tuple[str, datetime]],
        flaky: Set[str],
        at: datetime,
    ) -> Known:
        """From ``SlurmRecords.latest_verdicts_apart`` (``every``: each node's latest verdict,
        ``latest``: its latest full-probe one) and ``flaky_since``."""
        passes = {n: when for n, (status, when) in every.items() if status == Status.OK}
        statuses = {n: status for n, (status, _) in latest.items()}
        return cls(MappingProxyType(passes), MappingProxyType(statuses), frozenset(flaky), at)


@dataclass(frozen=True)
class FastPath:
    """Nodes let into the job unprobed, each with its last pass (in this order) and what its
    sentinel read (``notes``, by node), and the line that says so."""

    passed: Mapping[str, datetime]
    notes: Mapping[str, str]
    line: str


@dataclass(frozen=True)
class Opening:
    """The first step: ``fast`` joins at once (no sentinel); ``sentinels`` read before
    anything (``beside`` False: every node is fresh) or beside the screen of ``probe``;
    ``probe`` is screened (``first_screen`` says how)."""

    fast: FastPath | None
    sentinels: tuple[str, ...]
    beside: bool
    probe: tuple[str, ...]
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Checked:
    """What a round of sentinels decided: ``fast`` joins (their readings as notes), ``probe``
    is screened (the failed and, every node fresh, references), ``earlier``: what each
    failed sentinel read against its usual. ``said``: one line per failed node, logged
    before its dd readings are stored; ``lines`` after. ``failed``: the nodes whose
    sentinel failed (fresh, but no longer references: first_screen's ``failed``)."""

    fast: FastPath | None
    probe: tuple[str, ...]
    earlier: Mapping[str, float]
    said: tuple[str, ...]
    lines: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Screen:
    """One screen to run: ``nodes`` under ``policy`` (the triage's or the full probe's);
    ``stage`` "triage", "second_look", "escalated" or "" (the full probe at once), stored
    with the run; ``held``: a triage's nodes for the full probe only, after it;
    ``history_also``: the recipes a node without history of this one is compared with;
    ``looks_at``: a second look's doubt (its ``look`` nodes are read again, the rest wait
    for the full probe)."""

    nodes: tuple[str, ...]
    policy: Policy
    stage: str
    held: tuple[str, ...] = ()
    history_also: tuple[ProbePolicy, ...] = ()
    lines: tuple[str, ...] = ()
    looks_at: Doubt | None = None
    # a triage's nodes that passed within fresh_s (its fresh references): not escalated for
    # a short read's finding at their usual place (triage.short_as_usual)
    fresh: tuple[str, ...] = ()

    @property
    def run_info(self) -> dict[str, object] | None:
        """What the run stores of the prolog's stage (`screener show RUN` says it)."""
        return {"prolog_probe": self.stage} if self.stage else None


@dataclass(frozen=True)
class Doubt:
    """Nodes a screen left for the full probe after it, and their references; ``look``:
    those of them a second short read may settle first (triage.second_looks)."""

    nodes: tuple[str, ...]
    references: tuple[str, ...]
    # why each node is in doubt ("node07: triage read 0.66x peers (< 0.71)"), for the line
    why: tuple[str, ...] = ()
    look: tuple[str, ...] = ()


@dataclass(frozen=True)
class Escalation:
    """The full probe of a screen's doubt (``screen``), or None: no budget left for it (they
    keep their verdict, or held back, none: never drained)."""

    screen: Screen | None
    lines: tuple[str, ...]


def opening(nodes: Sequence[str], known: Known, policy: Policy) -> Opening:
    """The fast path (rules.fast_path) and, with some nodes to probe, enough of the freshest
    as references of a triage of too few nodes; then the sentinels of the fast-path nodes:
    before anything when every node is fresh (``beside`` False), else beside the others'
    screen (issue 22: they read while the others are probed, on other nodes)."""
    pp = policy.prolog
    skip, probe = fast_path(nodes, known.last_pass, known.flaky, known.at, pp.fresh_s)
    lines: tuple[str, ...] = ()
    if skip and probe:  # a triage of a few nodes gets references: the freshest passes
        freshest = sorted(skip, key=lambda n: known.last_pass[n], reverse=True)
        skip, probe, lines = _with_references(freshest, probe, len(nodes), policy)
    if skip and known.stored and pp.sentinel:
        return Opening(None, tuple(skip), bool(probe), tuple(probe), lines)
    fast = _fast_path(skip, known, {}, policy) if skip else None
    return Opening(fast, (), False, tuple(probe), lines)


def after_sentinels(
    results: Sequence[SentinelResult], known: Known, allocated: int, policy: Policy
) -> Checked:
    """Every node was fresh and read its sentinel first (issue 28): those that read as usual
    stay on the fast path; the others are probed, beside (with triage on, when too few to
    triage) the nodes that read closest to their usual."""
    said, passed, failed, notes = _outcome(results)
    skip, probe = passed, failed
    lines: tuple[str, ...] = ()
    if failed:  # a triage of too few nodes gets references: the steadiest passes
        skip, probe, lines = _with_references(steadiest(results), failed, allocated, policy)
    fast = _fast_path(skip, known, notes, policy) if skip else None
    return Checked(fast, tuple(probe), sentinel_ratios(results), said, lines, tuple(failed))


def after_beside(results: Sequence[SentinelResult], known: Known, policy: Policy) -> Checked:
    """The sentinels that read beside the screen: the passed ones take the fast path (their
    readings as notes, "beside the screen"); the failed ones were in after_screen's doubt."""
    said, passed, failed, notes = _outcome(results)
    fast = _fast_path(passed, known, notes, policy, beside=True) if passed else None
    return Checked(fast, tuple(failed), sentinel_ratios(results), said)


def first_screen(
    probe: Sequence[str],
    known: Known,
    allocated: int,
    policy: Policy,
    left_s: float,
    failed: Sequence[str] = (),
) -> Screen:
    """The triage of ``probe`` (triage.plan: some held back for the full probe after it), or
    the full probe at once; ``left_s``: the budget left now. With a store, a node it holds
    no full verdict of gets the full probe first. The triage's fresh nodes (``fresh``: its
    fresh references) are those that passed within ``fresh_s``, less those whose sentinel
    just ``failed``: a failed sentinel is a first window, never a yardstick's noise."""
    unseen = {n for n in probe if n not in known.statuses} if known.stored else set()
    tri, held, why = triage.plan(
        probe, allocated, known.statuses, known.flaky, policy, left_s, unseen
    )
    lines: tuple[str, ...] = ()
    if policy.prolog.triage and not tri:
        lines = (f"triage skipped ({why}): full probe",)
    elif tri and held:
        lines = (f"triage of {fold_nodes(tri)}; {why}: full probe after it",)
    elif tri and why:
        lines = (f"triage of {fold_nodes(tri)}; {why}",)
    if not tri:
        return Screen(tuple(probe), policy, "", lines=lines)
    # a triage compares a node it has no history of with the full probe's seq reads
    also = (policy.probe,)
    fresh: list[str] = []
    if known.stored:
        passed, _ = fast_path(tri, known.last_pass, known.flaky, known.at, policy.prolog.fresh_s)
        fresh = [n for n in passed if n not in failed]
    return Screen(
        tuple(tri),
        triage_policy(policy),
        "triage",
        tuple(held),
        also,
        lines,
        fresh=tuple(fresh),
    )


def after_screen(
    summary: RunSummary,
    reprobed: Sequence[str],
    screen: Screen,
    failed_beside: Sequence[str],
    policy: Policy,
) -> Doubt | None:
    """The nodes a stored, drain-free screen leaves for the full probe, with references
    from its healthy nodes: after a triage, those it left ambiguous (``reprobed``: its
    suspects), the nodes held back from it and the failed beside-sentinels; after a second
    look, its looked-at nodes still in doubt and the rest of its doubt; else those
    sentinels alone. None: nothing in doubt."""
    said: dict[str, str] = {}
    look: list[str] = []
    if screen.stage == "second_look" and screen.looks_at is not None:
        return _after_look(summary, reprobed, screen.looks_at, policy)
    if screen.stage == "triage":
        held = list(screen.held)
        also = [*held, *(n for n in failed_beside if n not in held)]
        said = triage.ambiguity(summary, policy, reprobed)  # once: the nodes and their why
        for n in triage.short_as_usual(summary, screen.fresh, policy, reprobed):
            said.pop(n, None)  # a fresh reference reading as usual: not escalated
        doubt, refs = triage.with_references(summary, policy, triage.in_doubt(list(said), also))
        look = triage.second_looks(summary, list(said))
        said.update({n: "held back from the triage" for n in held if n not in said})
    else:
        doubt, refs = triage.with_references(summary, policy, failed_beside)
    for n in failed_beside:
        said.setdefault(n, "its sentinel failed beside the screen")
    why = tuple(f"{n}: {said[n]}" for n in doubt if n in said)
    return (
        Doubt(tuple(doubt), tuple(refs), why, tuple(n for n in doubt if n in look))
        if doubt
        else None
    )


def spare(screen: Screen, policy: Policy) -> Callable[[RunSummary], list[str]] | None:
    """What a triage settles without its re-probe (pipeline.ScreenRequest.spare), from its
    round 1: its fresh references whose finding is a short read's at their usual place
    join the job as such (triage.short_as_usual), so a second window only delays the job:
    1.1-1.3 s of a 4.0 s prolog on the mixed fleet (bench/time_to_start.py, 2026-12-05).
    And once round 1 decided a node (``decided_in_round_1``), every DEGRADED node: the job
    is requeued after the drain, and where it lands is screened again; a paced healthy
    node's 0.5 s tail cost a 1/20 reader's job a 2.5 s re-probe, 5.9 s of a 10.1 s start
    (2026-12-05). A SLOW suspect is still confirmed (verdict.confirm.unspared). None
    outside a triage."""
    if screen.stage != "triage":
        return None
    fresh = screen.fresh

    def spared(summary: RunSummary) -> list[str]:
        out = list(triage.short_as_usual(summary, fresh, policy)) if fresh else []
        if decided_in_round_1(summary):
            out += [v.node for v in summary.verdicts if v.status == Status.DEGRADED]
        return out

    return spared


def decided_in_round_1(summary: RunSummary, reprobed: Sequence[str] = ()) -> list[str]:
    """The nodes round 1 decided slow (verdict.confirm.decided: confirmed with no re-probe;
    after the screen, those confirmed that were not re-probed, ``reprobed``)."""
    slow = (Status.SLOW_READ, Status.SLOW_WRITE)
    return [
        v.node
        for v in summary.verdicts
        if v.confirmed and v.status in slow and v.node not in reprobed
    ]


def unreprobed_lines(summary: RunSummary, reprobed: Sequence[str]) -> list[str]:
    """After a screen that drained (or, a dry run, would have) what round 1 decided: the
    DEGRADED nodes it did not re-probe nor escalate, and why (``spare``)."""
    sure = decided_in_round_1(summary, reprobed)
    left = [
        v.node for v in summary.verdicts if v.status == Status.DEGRADED and v.node not in reprobed
    ]
    if not sure or not left:
        return []
    return [
        f"{fold_nodes(left)}: not re-probed nor escalated: {fold_nodes(sure)} decided in round"
        " 1 and the job is requeued; they are screened again where it lands"
    ]


def _after_look(
    summary: RunSummary, reprobed: Sequence[str], doubt: Doubt, policy: Policy
) -> Doubt | None:
    """After a second look at ``doubt.look``: those still in doubt (in its words), then the
    rest of ``doubt`` (with their why), beside ``doubt``'s references (healthy in the triage,
    enough for all of it); None when the look settled every node and nothing else waits."""
    still = triage.settled(summary, doubt.look, policy, reprobed)
    looked = [n for n in doubt.look if n in still]
    rest = [n for n in doubt.nodes if n not in doubt.look]
    if not looked and not rest:
        return None
    why = [f"{n}: {still[n]}" for n in looked]
    why += [w for w in doubt.why if w.split(":", 1)[0] in rest]
    return Doubt((*looked, *rest), doubt.references, tuple(why))


def usual_lines(
    summary: RunSummary, screen: Screen, policy: Policy, reprobed: Sequence[str] = ()
) -> list[str]:
    """After a triage or a second look: a line per node that read low but as usual for it
    (triage.as_usual), so the log says why it was not escalated."""
    if screen.stage not in ("triage", "second_look"):
        return []
    lines = triage.as_usual(summary, policy, _STAGE_WORDS[screen.stage])
    if screen.stage == "triage":
        lines += triage.short_as_usual(summary, screen.fresh, policy, reprobed).values()
    return lines


# How a log line names each screen of a prolog.
_STAGE_WORDS = {"triage": "triage", "second_look": "second look", "escalated": "full probe"}


def second_look(doubt: Doubt, first: Screen, policy: Policy, left_s: float) -> Escalation | None:
    """A second short read of ``doubt.look`` (a triage's passed nodes reading unusually low)
    with the triage's recipe, beside ``doubt``'s references, when ``left_s`` holds it and the
    full probe after it (issue 44: a healthy node reading 0.65x in one 0.5 s window paid 16-18 s
    of full probe in most jobs on a mixed fleet); the rest of the doubt waits for the full
    probe. None: straight to the escalation (nothing to look at, or no budget for both)."""
    if not doubt.look or first.stage != "triage":
        return None
    if not triage.full_probe_fits(policy, left_s - triage.triage_cost(policy)):
        return None
    why = [w for w in doubt.why if w.split(":", 1)[0] in doubt.look]
    line = (
        f"second look at {fold_nodes(doubt.look)} with the triage's recipe,"
        f" beside {fold_nodes(doubt.references)} ({'; '.join(why)})"
    )
    rest = tuple(n for n in doubt.nodes if n not in doubt.look)
    nodes = (*doubt.look, *doubt.references)
    screen = Screen(nodes, first.policy, "second_look", rest, first.history_also, looks_at=doubt)
    return Escalation(screen, (line,))


def escalation(doubt: Doubt, first: Screen, policy: Policy, left_s: float) -> Escalation:
    """The full probe of ``doubt`` beside its references after ``first``, when ``left_s`` (the
    budget left now) still holds both its rounds (triage.full_probe_fits)."""
    after = _STAGE_WORDS.get(first.stage, "screen")
    if not triage.full_probe_fits(policy, left_s):
        line = f"{fold_nodes(doubt.nodes)}: no budget left for the full probe after the {after}"
        return Escalation(None, (line,))
    line = (
        f"full probe of {fold_nodes(doubt.nodes)} after the {after},"
        f" beside {fold_nodes(doubt.references)}"
    )
    if doubt.why:  # what put each node there, with the figure and the yardstick
        line += f" ({'; '.join(doubt.why)})"
    return Escalation(Screen((*doubt.nodes, *doubt.references), policy, "escalated"), (line,))


def exit_code(codes: Sequence[int]) -> int:
    """The hook's exit code from each screen's: a drain by any screen (EXIT_REQUEUE) requeues
    the job."""
    return max(codes, default=0)


def steadiest(results: Sequence[SentinelResult]) -> list[str]:
    """The nodes whose sentinel passed, the read closest to their usual first."""
    ok = [r for r in results if r.passed]

    def off(r: SentinelResult) -> float:
        if r.read_bw is None or not r.usual_bw:
            return float("inf")
        return abs(math.log(max(r.read_bw, 1.0) / r.usual_bw))

    return [r.node for r in sorted(ok, key=lambda r: (off(r), r.node))]


def sentinel_ratios(results: Sequence[SentinelResult]) -> dict[str, float]:
    """What each failed sentinel read against its node's usual (the ones that measured):
    a window before the screen, so round 1 can decide a node as slow again
    (verdict.confirm.decisive)."""
    return {r.node: r.ratio for r in results if not r.passed and r.ratio is not None}


def _outcome(
    results: Sequence[SentinelResult],
) -> tuple[tuple[str, ...], list[str], list[str], dict[str, str]]:
    """(a line per failed node: it goes to the full probe, passed, failed, what each read)."""
    said = tuple(f"{r.node}: {r.reason}: full probe" for r in results if not r.passed)
    passed = [r.node for r in results if r.passed]
    failed = [r.node for r in results if not r.passed]
    return said, passed, failed, {r.node: r.reason for r in results}


def _with_references(
    fresh: Sequence[str], probe: Sequence[str], allocated: int, policy: Policy
) -> tuple[list[str], list[str], tuple[str, ...]]:
    """(fast, probe, lines): with triage on, enough of the ``fresh`` nodes (best first) join
    a triage of too few nodes as its references (triage.fresh_references)."""
    refs = triage.fresh_references(probe, fresh, allocated, policy)
    lines: tuple[str, ...] = ()
    if refs:
        lines = (
            f"{fold_nodes(refs)}: fresh, triaged beside {fold_nodes(probe)} as references"
            f" (a triage is judged by {policy.verdict.min_peers} peers of its own recipe)",
        )
    return [n for n in fresh if n not in refs], [*probe, *refs], lines


def _readers(passed: Sequence[str], notes: Mapping[str, str]) -> str:
    """Which reader each passed node's sentinel used, counted ('dd 6, fio 2'): a node reads
    with fio until it holds its dd readings (prolog/sentinel.py), slower by fio's start,
    so a fast path that took longer than usual says why (issue 44)."""
    read = [notes[n] for n in passed if n in notes]
    dd = sum(1 for note in read if note.startswith("dd "))
    return ", ".join(
        f"{what} {count}" for what, count in (("dd", dd), ("fio", len(read) - dd)) if count
    )


def _fast_path(
    passed: Sequence[str],
    known: Known,
    notes: Mapping[str, str],
    policy: Policy,
    beside: bool = False,
) -> FastPath:
    """The fast path of ``passed`` (every one fresh in ``known``), with what their sentinels
    read (``notes``; none: the sentinel is off)."""
    fresh_s = policy.prolog.fresh_s
    said = "; ".join(
        x for x in ("beside the screen" if beside else "", _readers(passed, notes)) if x
    )
    checked = f", sentinel as usual{f' ({said})' if said else ''}" if notes else ""
    line = f"fast path: {fold_nodes(passed)} passed within {fresh_s:g}s{checked}, not probed"
    passes = {n: known.last_pass[n] for n in passed}
    return FastPath(MappingProxyType(passes), MappingProxyType(dict(notes)), line)
