"""The prolog's triage (issue 22): a short probe first, the full probe only where needed.

A node reading at 1/20 of its peers is obvious after half a second of QD32 reads, and so
is a healthy one; only the ambiguous nodes need the full probe's evidence. With
``[prolog] triage`` on, the nodes a prolog must probe get the read jobs (sequential, then
4 KiB random; the write only with ``triage_write``) at ``triage_ramp_s +
triage_runtime_s`` (its own recipe, so its own history and fleet figures), judged and
confirmed as usual; a node it leaves DEGRADED on a performance signal (a close call, a
stall mode, a borderline re-probe) then gets the full probe beside healthy references. A
node it passed reading low gets that only when the low reading is unusual for that node
(its own usual place among its peers, from its history), and a second short read beside
its references comes first: most such doubts are one noisy 0.5 s window (issue 44).
Pure decisions here; the prolog runs the screens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from screener.policy import Policy
from screener.probe.fio import policy_jobs, probe_duration_s
from screener.probe.short import triage_policy
from screener.probe_data import RunSummary, Status, Verdict
from screener.verdict.confirm import NOT_SUSPECT_TAGS, USUAL_PLACE_TAG, references
from screener.verdict.rules import borderline_level
from screener.verdict.usual import RELATIVE_TAGS


def plan(
    nodes: Sequence[str],
    allocated: int,
    latest: Mapping[str, str],
    flaky: Set[str],
    policy: Policy,
    left_s: float | None = None,
    unseen: Set[str] = frozenset(),
) -> tuple[list[str], list[str], str]:
    """(nodes to triage, nodes for the full probe only, why) over ``nodes``, those the
    prolog must probe. The full probe is for allocations of fewer than ``min_peers`` nodes
    (``allocated``; a larger job's few unfresh nodes borrow the fleet's recent triage
    figures as peers), and for nodes whose latest full-probe verdict (``latest``: status
    by node; a triage's own doubt is triaged again) was neither OK nor UNKNOWN or with a
    recent slow episode (``flaky``): they have shown an ambiguity a short probe could miss
    (stalls seconds apart); and for nodes with no full-probe verdict at all (``unseen``):
    a read-only triage of nodes without history cannot tell an allocation-wide slowdown
    from the fleet's level (they are each other's only peers), which the full probe's
    write/read ratio shows, and their first full probe leaves the history the next triage
    compares with. Those join the triage's escalation, beside its references;
    when fewer than ``min_peers`` nodes would be triaged, every node gets the full probe
    at once (one screen instead of two). When ``left_s`` (the budget left) cannot hold the
    triage and then their full probe, they are triaged with the others: a short probe
    beats joining the job unprobed."""
    if not policy.prolog.triage:
        return [], list(nodes), "triage off"
    if allocated < policy.verdict.min_peers:
        why = f"{allocated} nodes < verdict.min_peers {policy.verdict.min_peers}"
        return [], list(nodes), why
    ok = (Status.OK.value, Status.UNKNOWN.value)
    lately = [n for n in nodes if n in flaky or latest.get(n, Status.OK.value) not in ok]
    new = [n for n in nodes if n in unseen and n not in lately]
    doubt = [n for n in nodes if n in lately or n in new]
    named = "; ".join(
        f"{', '.join(some[:3])}{' ...' if len(some) > 3 else ''}: {what}"
        for some, what in ((lately, "not OK lately"), (new, "never fully probed"))
        if some
    )
    tri = [n for n in nodes if n not in doubt]
    if doubt and len(tri) < policy.verdict.min_peers:
        return [], list(nodes), named
    if doubt and left_s is not None and not full_probe_fits(policy, left_s - triage_cost(policy)):
        return list(nodes), [], f"{named}, no budget for a full probe after the triage: triaged"
    return tri, doubt, named if doubt else ""


def fresh_references(
    probe: Sequence[str], fresh: Sequence[str], allocated: int, policy: Policy
) -> list[str]:
    """Fresh nodes (``fresh``, best first) to triage beside ``probe`` when ``probe`` alone is
    under ``min_peers``: a triage is judged against peers of its own recipe, and the fleet
    may hold none of those (a fleet kept fresh by the rolling sweep holds the full probe's
    figures only): a node whose sentinel read 0.05x its usual, triaged alone, passed on
    the floors alone (bench/time_to_start.py +rolling, 2026-11-26). As many as
    escalation's references: ``min_peers``, and twice the probed plus one (the probed
    under a third of the round); [] when triage is off or the job is small (then every
    node gets the full probe)."""
    vp = policy.verdict
    if not policy.prolog.triage or allocated < vp.min_peers or not probe:
        return []
    if len(probe) >= vp.min_peers:
        return []
    want = max(vp.min_peers, 2 * len(probe) + 1)
    return [n for n in fresh if n not in probe][:want]


def triage_cost(policy: Policy) -> float:
    """Seconds of budget a triage is counted at (the same margin as the full probe's)."""
    return _budgeted_s(triage_policy(policy))


def _budgeted_s(policy: Policy) -> float:
    """Both rounds of ``policy``'s probe when confirming, with half as much again for SSH,
    layout and a loaded node."""
    rounds = 2 if policy.verdict.confirm else 1
    return 1.5 * rounds * probe_duration_s(policy.probe, policy_jobs(policy.probe))


def ambiguous(summary: RunSummary, policy: Policy, reprobed: Sequence[str] = ()) -> list[str]:
    """Nodes the triage left undecided: DEGRADED on a figure between healthy and slow (a
    close call, a borderline re-probe), and OK nodes reading below ``borderline_level``
    (0.71) x the peer median: a short probe's peer spread can hide a real gap (two nodes
    at 0.43x of the healthy level passed 5 of 6 triages as OK at 0.52-0.62x; the lowest
    healthy node in 294 triage verdicts read 0.72x: bench/results/repeatability_triage.json).
    And a suspect whose re-probe passed (``reprobed``, now OK: "transient"): a node that
    stalls now and then passes a 0.5 s re-probe (3 of 6 stalling nodes did, in the prolog
    matrix: bench/results/repeatability_prolog_triage.json). Confirmed SLOW is decided;
    UNKNOWN (an error, a shared cause) is not made clearer by more I/O; a lone stall mode
    stays DEGRADED (never drained, probed again next time)."""
    return list(ambiguity(summary, policy, reprobed))


def ambiguity(
    summary: RunSummary,
    policy: Policy,
    reprobed: Sequence[str] = (),
    label: str = "triage",
) -> dict[str, str]:
    """``ambiguous``'s nodes, each with why, in the words of the escalation line (issue 44:
    `full probe of fleet07 after the triage` said nothing of what the triage saw). An OK
    node reading low is in doubt only when that is unusual for it (``usual``); ``label``
    names the screen ("triage", "second look")."""
    level = borderline_level(policy.verdict)
    out: dict[str, str] = {}
    # A DEGRADED node with only the signals confirmation does not re-probe either
    # (NOT_SUSPECT_TAGS: facts, a read timeout, a stall mode) is not ambiguous: facts are not
    # figures, and a stall mode in a 0.5 s window is one event (on the emulated cluster a CPU
    # hiccup made one on a healthy node in 2 of 3 triages); stalls seconds apart are the full
    # probe's to find (the sweep), after which the node skips the triage (plan).
    for v in summary.verdicts:
        doubt = sorted(set(v.signals) - NOT_SUSPECT_TAGS)
        place = _place(v)
        if v.status == Status.DEGRADED and doubt:
            out[v.node] = f"{label} DEGRADED ({', '.join(doubt)})"
        elif v.status == Status.OK and place is not None and place < level and not usual(v, level):
            was = f"its usual {place / v.own_place:.2f}x, " if v.own_place else ""
            out[v.node] = f"{label} read {place:.2f}x peers ({was}< {level:.2f})"
        if v.node not in out and v.status == Status.OK and v.node in reprobed:
            out[v.node] = f"slow on the {label}, passed its re-probe: transient?"
    return out


def usual(v: Verdict, level: float) -> bool:
    """An OK node reading below ``level`` x its peers that reads as it usually does among
    them (its ``own_place`` at or above ``level``): a node of a slower drive model, not a
    doubt (issue 44: a healthy node that always reads 0.65x of its peers paid the full probe
    on every job). One that dropped from its usual place is still in doubt."""
    return v.own_place is not None and v.own_place >= level


def as_usual(summary: RunSummary, policy: Policy, label: str = "triage") -> list[str]:
    """A line per OK node that read low but as usual for it (``usual``): why it is not in
    doubt, with the figure and the yardstick."""
    level = borderline_level(policy.verdict)
    return [
        f"{v.node}: {label} read {place:.2f}x peers, its usual"
        f" {place / v.own_place:.2f}x: not in doubt"
        for v in summary.verdicts
        if v.status == Status.OK
        and (place := _place(v)) is not None
        and place < level
        and usual(v, level)
        and v.own_place
    ]


def short_as_usual(
    summary: RunSummary, fresh: Sequence[str], policy: Policy, reprobed: Sequence[str] = ()
) -> dict[str, str]:
    """The triage's nodes whose only finding is a short read's, at their usual place among
    their peers (``usual_place`` at or above the borderline level), each with the line that
    says why it is not escalated: a fresh reference (``fresh``: passed within ``fresh_s``,
    triaged only as a yardstick), or a node found so in both rounds (``reprobed``: round 2
    re-read it beside references and found it at its place again). Off the triage a fresh
    one would have taken the fast path; issue 44: a slower model triaged as a reference of
    one new node, beside four faster ones, read 0.30x in the round (1.05x its usual place)
    and paid an 18.8 s full probe, 23 s of a 28-30 s start (bench/time_to_start.py, mixed
    fleet, 2026-12-03); unfresh, found at 0.22x twice (1.03x its place) it paid a 13.3 s
    full probe that passed it (17.4 s of a 22.7 s start, 2026-12-05), where the same node
    at the same place passes the triage as OK when the peer rule's z does not fire. One
    below its usual place, with any other finding, or found so once and unfresh, is
    escalated as any node."""
    level = borderline_level(policy.verdict)
    allowed = RELATIVE_TAGS | {USUAL_PLACE_TAG}
    out: dict[str, str] = {}
    for v in summary.verdicts:
        if v.status != Status.DEGRADED or USUAL_PLACE_TAG not in v.signals:
            continue
        if v.node not in fresh and v.node not in reprobed:
            continue
        if not set(v.signals) <= allowed or not usual(v, level) or not v.own_place:
            continue
        place = _place(v)
        read = f"read {place:.2f}x peers, " if place is not None else ""
        fresh_one = v.node in fresh
        what = "fresh reference, triage" if fresh_one else "triage re-probe"
        why = (
            f"on a node that passed within {policy.prolog.fresh_s:g}s"
            if fresh_one
            else "at its usual place in both rounds"
        )
        out[v.node] = (
            f"{v.node}: {what} {read}its usual place {v.own_place:.2f}x (>= {level:.2f}):"
            f" a short read's finding {why}, not escalated"
        )
    return out


def second_looks(summary: RunSummary, doubt: Sequence[str]) -> list[str]:
    """The nodes of ``doubt`` a second short read can settle: those the screen passed (OK),
    reading unusually low or only after a re-probe (a tail or a stall in one 0.5 s window:
    on a loaded host a healthy node shows one in many triages and paid the full probe for
    it; issue 44). A DEGRADED node had its short re-probe already (the confirmation round):
    the full probe's stall and tail witnesses are for it."""
    passed = {v.node for v in summary.verdicts if v.status == Status.OK}
    return [n for n in doubt if n in passed]


def settled(
    summary: RunSummary, looked: Sequence[str], policy: Policy, reprobed: Sequence[str]
) -> dict[str, str]:
    """Of the nodes a second look read (``looked``), those still in doubt, each with why: not
    plainly OK on the look (any finding, a stall mode included: a node that stalls now and
    then is the full probe's to judge), passed only after a re-probe again, or reading
    unusually low again (``ambiguity``, in the look's words)."""
    said = ambiguity(summary, policy, reprobed, label="second look")
    verdicts = {v.node: v for v in summary.verdicts}
    out: dict[str, str] = {}
    for n in looked:
        v = verdicts.get(n)
        if n in said:
            out[n] = said[n]
        elif v is None or v.status != Status.OK:
            status = v.status.value if v is not None else "not read"
            tags = f" ({', '.join(v.signals)})" if v is not None and v.signals else ""
            out[n] = f"second look {status}{tags}"
    return out


def _place(v: Verdict) -> float | None:
    """Its seq read / the peer median it was judged against (Verdict.read_place); a read
    missing beside a known median counts as 0: in doubt, not passed over."""
    if v.read_mb_s is None and v.peer_read_mb_s:
        return 0.0
    return v.read_place


def escalation(
    summary: RunSummary,
    policy: Policy,
    also: Sequence[str] = (),
    reprobed: Sequence[str] = (),
) -> tuple[list[str], list[str]]:
    """(nodes for the full probe, references) after a triage: the nodes it left ambiguous
    (``reprobed``: its suspects) and ``also`` (plan's nodes for the full probe only), then
    healthy references (closest to the triage's peer median): at least
    ``confirm_references`` and ``min_peers``, and twice the doubtful plus one, so that the
    doubtful are under a third of the screen (two nodes at 0.43x beside three references
    widened the peer spread until both passed); ([], []) if none."""
    return with_references(
        summary, policy, in_doubt(list(ambiguity(summary, policy, reprobed)), also)
    )


def in_doubt(unsure: Sequence[str], also: Sequence[str]) -> list[str]:
    """The nodes for the full probe: the triage's ambiguous ones, then ``also`` (once each)."""
    return [*unsure, *(n for n in also if n not in unsure)]


def with_references(
    summary: RunSummary, policy: Policy, doubt: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(``doubt``, references for their full probe from ``summary``'s healthy nodes):
    escalation's sizing, also for fresh nodes whose sentinel failed beside a screen."""
    if not doubt:
        return [], []
    vp = policy.verdict
    want = max(vp.confirm_references, vp.min_peers, 2 * len(doubt) + 1)
    refs = [n for n in references(summary, want + len(doubt)) if n not in doubt]
    return list(doubt), refs[:want]


def full_probe_fits(policy: Policy, left_s: float) -> bool:
    """Whether ``left_s`` seconds of the prolog's budget hold the full probe of an
    escalation: both rounds when confirming, with half as much again for SSH, layout and
    a loaded node (the screen's deadline still ends it in time: late nodes are UNKNOWN)."""
    return left_s >= _budgeted_s(policy)
