"""Plain data passed between the probe parsers, the verdict logic, the pipeline and the store.

Everything here is immutable and free of I/O so that decisions can be tested directly.
Units are in the field names: bytes/s, ns, kB/s, ms, percent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Trigger(enum.StrEnum):
    """Why a run happened."""

    PROLOG = "prolog"
    SWEEP = "sweep"
    MANUAL = "manual"
    JOB = "job"  # what a screened job itself showed (in-job iostat, ingested results)
    ROLLING = "rolling"  # the rolling sweep: a few idle nodes at a time (sweep --rolling)


class Status(enum.StrEnum):
    """Per-node outcome of a screen. Only SLOW_* may ever lead to a drain."""

    OK = "OK"
    SLOW_READ = "SLOW_READ"
    SLOW_WRITE = "SLOW_WRITE"
    DEGRADED = "DEGRADED"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class FioJobResult:
    """One fio job's figures for its main direction (read for read jobs, write for write jobs)."""

    name: str
    rw: str  # fio's rw= value: "write", "read", "randread", ...
    bw_bytes: float  # bytes per second
    iops: float
    total_ios: int
    runtime_ms: float
    lat_mean_ns: float  # completion latency
    lat_p50_ns: float
    lat_p99_ns: float
    lat_p999_ns: float
    slow_fraction: float  # fraction of I/Os with completion latency >= 100 ms (from the bins)
    error: int = 0  # fio's per-job error code
    iodepth: int = 0  # the job's queue depth as fio reported it (0: not reported)
    stall_ios: int = 0  # I/Os in a stall mode of the latency histogram (probe/stalls.py)
    stall_ns: float = 0.0  # that mode's median completion latency (0: no stall mode)

    @property
    def mb_s(self) -> float:
        """Bandwidth in MB/s (10^6 bytes), as admins read it off fio and iostat."""
        return self.bw_bytes / 1e6


@dataclass(frozen=True)
class FioRun:
    """A parsed fio JSON document: its version and jobs in output order."""

    fio_version: str
    jobs: tuple[FioJobResult, ...]

    def job(self, name: str) -> FioJobResult | None:
        """The job called ``name``, or None."""
        return next((j for j in self.jobs if j.name == name), None)


@dataclass(frozen=True)
class IostatSample:
    """One device line of one ``iostat -x -d`` interval."""

    device: str
    timestamp: str  # as iostat printed it (may be empty)
    r_s: float
    rkb_s: float
    w_s: float
    wkb_s: float
    r_await_ms: float
    w_await_ms: float
    aqu_sz: float
    util_pct: float


@dataclass(frozen=True)
class SmartLog:
    """The few NVMe SMART fields that explain slowness (``nvme smart-log -o json``)."""

    critical_warning: int
    temperature_c: float
    media_errors: int
    percentage_used: int


@dataclass(frozen=True)
class MdStatus:
    """Software RAID state from /proc/mdstat."""

    arrays: tuple[str, ...] = ()
    degraded: tuple[str, ...] = ()  # arrays with a missing member, e.g. [U_]
    rebuilding: tuple[str, ...] = ()  # arrays in recovery/resync/reshape


@dataclass(frozen=True)
class NodeFacts:
    """Configuration and health facts that can explain a slow node (seeds 000 and 003).

    Any field may be None when the node does not expose it (loop device, no NVMe, no md).
    """

    device: str | None = None  # block device backing the probe target, e.g. "nvme0n1"
    pcie_speed: str | None = None  # current link speed, e.g. "16.0 GT/s PCIe"
    pcie_max_speed: str | None = None
    pcie_width: int | None = None
    pcie_max_width: int | None = None
    scheduler: str | None = None  # the selected one, e.g. "none"
    read_ahead_kb: int | None = None
    nr_requests: int | None = None
    write_cache: str | None = None  # "write back" / "write through"
    smart: SmartLog | None = None
    md: MdStatus | None = None

    @property
    def pcie_downgraded(self) -> bool:
        """True when the link trained below its maximum speed or width."""
        speed = (
            self.pcie_speed is not None
            and self.pcie_max_speed is not None
            and _gts(self.pcie_speed) < _gts(self.pcie_max_speed)
        )
        width = (
            self.pcie_width is not None
            and self.pcie_max_width is not None
            and self.pcie_width < self.pcie_max_width
        )
        return speed or width


def _gts(speed: str) -> float:
    """'8.0 GT/s PCIe' -> 8.0; unparsable -> 0.0."""
    try:
        return float(speed.split()[0])
    except (ValueError, IndexError):
        return 0.0


@dataclass(frozen=True)
class NodeProbe:
    """Everything one node produced in one probe round, or why it produced nothing.

    ``error`` set means the node's status can only be UNKNOWN.
    """

    node: str
    seq_write: FioJobResult | None = None
    seq_read: FioJobResult | None = None
    rand_read: FioJobResult | None = None
    fio_version: str | None = None
    iostat: tuple[IostatSample, ...] = ()
    facts: NodeFacts | None = None
    error: str | None = None  # one line
    error_kind: str | None = None  # TransportError kind, "probe", "preflight"
    duration_s: float = 0.0
    raw_fio: str = ""  # the fio JSON as received, kept for the store
    raw_iostat: str = ""
    recipe: str | None = None  # fingerprint of the probe recipe (history compares like with like)
    notes: tuple[str, ...] = ()  # one line each: planted names moved aside (not stored)

    @classmethod
    def from_fio(
        cls,
        node: str,
        run: FioRun,
        raw_fio: str,
        *,
        iostat: tuple[IostatSample, ...],
        raw_iostat: str,
        facts: NodeFacts | None,
        duration_s: float,
        recipe: str | None,
        notes: tuple[str, ...],
    ) -> NodeProbe:
        """A measured probe: its figures are ``run``'s three jobs (None for one the recipe
        did not run), its raw fio output kept for the store. The one place a probe's
        figures are taken from a fio run: on the node (pipeline.probe_node, from the
        commands' output) and on the sweep's side (probe.lines, re-parsing the raw output
        a Slurm step sent, with what else it sent)."""
        return cls(
            node=node,
            seq_write=run.job("seq_write"),
            seq_read=run.job("seq_read"),
            rand_read=run.job("rand_read"),
            fio_version=run.fio_version,
            iostat=iostat,
            facts=facts,
            duration_s=duration_s,
            raw_fio=raw_fio,
            raw_iostat=raw_iostat,
            recipe=recipe,
            notes=notes,
        )

    @property
    def usable(self) -> bool:
        """True when the node produced figures to judge (not to be confused with Status.OK,
        a verdict, nor a command's exit status 0). The write is optional: a read-only
        probe (the prolog's triage) is judged on its reads; the pipeline refuses a run
        that lacks a job its recipe ran."""
        return self.error is None and self.seq_read is not None

    @property
    def write_read_ratio(self) -> float | None:
        """Sequential write bandwidth over read bandwidth (seed 001 flagged W/R > 5)."""
        if self.seq_read is None or self.seq_write is None:
            return None
        if self.seq_read.bw_bytes <= 0:
            return float("inf")
        return self.seq_write.bw_bytes / self.seq_read.bw_bytes

    @property
    def target_iostat(self) -> tuple[IostatSample, ...]:
        """iostat samples of the probe target's device only.

        Without a known device there is no way to tell the target from the system disk, so
        nothing is used (an unrelated busy disk must never speak for the target).
        """
        device = self.facts.device if self.facts is not None else None
        if not device:
            return ()
        return tuple(s for s in self.iostat if s.device == device)

    @property
    def read_r_await_ms(self) -> float | None:
        """Highest r_await of the target's device during the probe, or None."""
        vals = [s.r_await_ms for s in self.target_iostat if s.r_s > 0]
        return max(vals) if vals else None


@dataclass(frozen=True)
class Verdict:
    """The decision for one node in one run, with a one-line reason an admin can act on."""

    node: str
    status: Status
    reason: str
    read_mb_s: float | None = None
    write_mb_s: float | None = None
    rand_read_iops: float | None = None
    ratio: float | None = None  # write/read
    read_p99_ms: float | None = None
    z_read: float | None = None  # robust z of seq read bandwidth vs peers
    z_rand: float | None = None
    confirmed: bool = False  # True when a re-probe agreed with a first SLOW finding
    signals: tuple[str, ...] = field(default_factory=tuple)  # which rules fired
    read_p999_ms: float | None = None  # seq read completion latency tail
    rand_read_p99_ms: float | None = None
    recipe: str | None = None  # the probe recipe these figures were measured with
    # True when these figures may serve as the node's own history: OK, or absolved by a
    # shared cause (so a fleet-wide shift is learned, not frozen out of history forever).
    baseline: bool = False
    # The peer seq-read median (MB/s) this verdict was judged against, in its own round
    # (round 2's for a re-probed node), so a drain reason compares figures of one round.
    peer_read_mb_s: float | None = None
    # Likewise the peer 4k random-read median (IOPS): a drain decided on random reads names
    # that figure, not a sequential ratio that says the node is fine.
    peer_rand_iops: float | None = None
    # Its seq read against its own usual, over the round's typical such ratio
    # (rules.own_place): 1.0 = where it usually reads among its peers. None without enough
    # own history or when too few of the round have any (no yardstick for the round).
    # Not stored: the prolog asks it of a screen's verdicts (is a low reading usual for it?).
    own_place: float | None = None

    @property
    def read_place(self) -> float | None:
        """Its seq read / the peer median it was judged against; None without either."""
        if self.read_mb_s is None or not self.peer_read_mb_s:
            return None
        return self.read_mb_s / self.peer_read_mb_s


@dataclass(frozen=True)
class RunSummary:
    """Run-level outcome: per-node verdicts plus fleet-level flags."""

    verdicts: tuple[Verdict, ...]
    shared_cause: bool = False
    shared_cause_reason: str = ""
    peer_read_median_mb_s: float | None = None
    peer_rand_median_iops: float | None = None


@dataclass(frozen=True)
class FleetFigure:
    """A recent baseline result of a node outside the run (same recipe), read from the store.

    A small allocation has too few peers of its own; these stand in as extra peers.
    """

    node: str
    read_bw: float  # bytes/s
    write_bw: float | None = None
    rand_iops: float | None = None
