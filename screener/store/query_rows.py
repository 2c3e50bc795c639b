"""What the Store's read methods return: small frozen dataclasses (never ORM objects), and
the pure counting behind the "flaky nodes" view."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from screener.probe_data import Status, Trigger
from screener.units import label, unit


@dataclass(frozen=True)
class RunRow:
    """One run as listed by ``latest_runs``, with its verdicts counted by outcome."""

    id: int
    trigger: Trigger
    job_id: str | None = field(metadata=label("job"))
    nodeset: str = field(metadata=label("nodes"))
    node_count: int
    started_at: datetime = field(metadata=label("started"))
    finished_at: datetime | None
    status: str  # running | done | failed
    shared_cause: bool
    shared_cause_reason: str
    screener_version: str
    n_ok: int = field(default=0, metadata=label("ok"))
    n_slow: int = field(default=0, metadata=label("slow"))  # SLOW_READ + SLOW_WRITE
    n_degraded: int = field(default=0, metadata=label("degraded"))
    n_unknown: int = field(default=0, metadata=label("unknown"))


@dataclass(frozen=True)
class NodeHistoryRow:
    """One run's verdict for one node, as listed by ``node_history`` (newest first)."""

    run_id: int = field(metadata=label("run"))
    started_at: datetime = field(metadata=label("started"))
    trigger: Trigger
    job_id: str | None
    status: Status
    reason: str
    read_mb_s: float | None = field(metadata=unit("MB/s", "read"))
    write_mb_s: float | None = field(metadata=unit("MB/s", "write"))
    ratio: float | None = field(metadata=unit("ratio", "w/r"))
    confirmed: bool
    read_p99_ms: float | None = field(default=None, metadata=unit("ms", "read p99"))
    signals: tuple[str, ...] = ()


@dataclass(frozen=True)
class EventRow:
    """A drain/resume/flaky-episode event for a node."""

    node: str
    at: datetime
    action: str
    reason: str
    run_id: int | None
    slurm_reason: str | None


@dataclass(frozen=True)
class NodeRow:
    """One node as ``screener nodes`` lists it: latest verdict, figures, probe age, drains."""

    node: str
    status: Status | None  # None: never judged (only events so far)
    reason: str
    run_id: int | None
    read_mb_s: float | None = field(metadata=unit("MB/s", "read"))
    write_mb_s: float | None = field(metadata=unit("MB/s", "write"))
    ratio: float | None = field(metadata=unit("ratio", "w/r"))
    read_p99_ms: float | None = field(metadata=unit("ms", "read p99"))
    last_probe_at: datetime | None
    age_s: float | None = field(metadata=unit("s", "age"))  # since last_probe_at
    drained_by_screener: bool = field(metadata=label("drained"))  # last drain/resume: a drain
    drained_at: datetime | None
    drain_reason: str | None  # the reason screener set in Slurm
    # Slurm's view, filled by `screener nodes --slurm` (report/slurm_view.py), else None/"".
    slurm_state: str | None = field(default=None, metadata=label("slurm state"))  # IDLE+DRAIN
    slurm_reason: str | None = field(default=None, metadata=label("slurm reason", wrap=True))
    note: str = field(default="", metadata=label("note", wrap=True))  # never probed, ...
    # Early warning (issue 46), filled by `screener nodes`: a DECLINING node's words as
    # `screener trend` gives them ("seq read 0.78x peers, falling 0.03x per sweep; crosses
    # 0.5x in ~9 sweeps (~2026-12-08)") and when, from now, it is forecast to cross the slow
    # line first ("~9d", "<1d": short for 80 columns). A warning: never its status, no drain.
    declining: str | None = field(default=None, metadata=label("declining", wrap=True))
    slow_in: str | None = field(default=None, metadata=label("slow in"))


@dataclass(frozen=True)
class FlakyNodeRow:
    """A node with repeated slow episodes in a window (``screener flaky``), worst first."""

    node: str
    episodes: int
    prolog: int  # episodes by the trigger that opened them
    sweep: int
    job: int
    manual: int
    first_seen: datetime
    last_seen: datetime = field(metadata=label("last seen"))
    open: bool  # the latest episode has not ended
    ttr_median_s: float | None = field(
        metadata=unit("s", "ttr median")
    )  # time to recovery, closed episodes
    ttr_max_s: float | None = field(metadata=unit("s", "ttr max"))
    resumes: int  # screener resumes of this node in the window


@dataclass(frozen=True)
class RunNodeRow:
    """One node of one run (``screener show RUN``): verdict, figures, what screener did."""

    node: str
    status: Status
    read_mb_s: float | None = field(metadata=unit("MB/s", "read"))
    write_mb_s: float | None = field(metadata=unit("MB/s", "write"))
    ratio: float | None = field(metadata=unit("ratio", "w/r"))
    read_p99_ms: float | None = field(metadata=unit("ms", "read p99"))
    z_read: float | None
    confirmed: bool
    signals: tuple[str, ...]
    reason: str
    actions: tuple[str, ...]  # drain / resume / guard_trip / ... in this run
    slurm_reason: str | None


@dataclass(frozen=True)
class RunDetail:
    """Everything ``screener show RUN`` prints: the run, its peer medians, and its nodes."""

    run: RunRow
    guard_reason: str | None
    peer_read_median_mb_s: float | None = field(metadata=unit("MB/s", "peer read median"))
    nodes: tuple[RunNodeRow, ...]
    mode: str | None = None  # a sweep's mode ("dry run, deep, config /etc/x.toml"), a triage's
    rollout: str | None = None  # dry run and shadow rules in force: rollout(policy) below


def is_slow(status: Status) -> bool:
    """SLOW_READ or SLOW_WRITE: the statuses that may drain a node."""
    return status in (Status.SLOW_READ, Status.SLOW_WRITE)
