"""Policy: every tunable of probing, deciding and connecting, loaded from TOML.

Defaults live here and are documented in docs/configuration.md. Unknown keys are errors,
so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from screener.errors import ConfigError, ScreenerError

DEFAULT_CONFIG_PATH = Path("/etc/screener/screener.toml")


@dataclass(frozen=True)
class ProbePolicy:
    """How the fio probes run on each node."""

    target: str = "/scratch"  # directory on the local NVMe filesystem
    size_mib: int = 1024  # region written then read back; must fit the free space
    runtime_s: float = 3.0  # measured seconds per job (after ramp)
    ramp_s: float = 1.0  # discarded warm-up seconds per job
    iodepth: int = 32  # fills an NVMe queue (seed 000: QD1 under-reports)
    # The sequential jobs' queue depth (0 = iodepth). Set by the prolog's short reads
    # ([prolog] seq_iodepth): a slow reader drains fewer queued 1 MiB reads after each job.
    seq_iodepth: int = 0
    ioengine: str = "libaio"  # libaio | io_uring
    seq_bs: str = "1M"
    rand_bs: str = "4k"
    rand_read: bool = True  # run the 4 KiB random-read job too
    # The random read's own warm-up (-1 = ramp_s). It runs after the sequential read has
    # drained (stonewall), and a 4 KiB queue fills in microseconds ([prolog]
    # triage_rand_ramp_s sets it for the triage).
    rand_ramp_s: float = -1.0
    # Run the sequential write job (first). Off = a read-only probe: the write rules and the
    # write/read ratio have nothing to judge (the prolog's triage, [prolog] triage_write).
    seq_write: bool = True
    min_free_mib: int = 64  # headroom kept free beyond size_mib
    # The one-off layout write must finish at this rate (MB/s) or the node is UNKNOWN;
    # its timeout is command_timeout_s + size / this. A writer that slow is a finding too.
    layout_min_mb_s: float = 2.0
    iostat_interval_s: int = 1
    facts: bool = True  # collect PCIe/SMART/queue facts
    keep_file: bool = True  # keep the probe file (mode 0600) for the next run: no re-layout


@dataclass(frozen=True)
class VerdictPolicy:
    """Thresholds for deciding per node; see docs/detection.md for the why of each."""

    min_read_mb_s: float = 0.0  # absolute floor for sequential read (0 = off)
    min_write_mb_s: float = 0.0  # absolute floor for sequential write (0 = off)
    min_rand_read_iops: float = 0.0  # absolute floor for 4 KiB random read (0 = off)
    max_write_read_ratio: float = 5.0  # seed 001: slow nodes had W/R 8x..83x, healthy < 1.5
    max_slow_fraction: float = 0.05  # fraction of reads >= 100 ms
    max_r_await_ms: float = 0.0  # iostat r_await ceiling during the probe (0 = off)
    z_threshold: float = 3.5  # robust z (log scale) below -this vs peers (Iglewicz-Hoaglin)
    mad_floor_fraction: float = 0.05  # log-MAD never below log(1.05): quiet fleets
    min_peers: int = 4  # below this many usable peers, no peer comparison
    min_peer_drop: float = 0.5  # peer rule also needs value < this * median (a real gap)
    # The 4 KiB random read's gap: its IOPS in short windows on a loaded host spread more
    # (a healthy node read 0.34x, z=-5.2, beside 3 references: issue 44); a random-read
    # fault reads 0.04x. Below this x the peer median, and out of the noise: peer_rand.
    rand_peer_drop: float = 0.25
    shared_cause_fraction: float = 0.5  # this share of nodes slow together = shared cause
    history_runs: int = 5  # how many of the node's own past OK runs to compare with
    history_drop: float = 0.25  # below this fraction of own history median is suspect
    history_max_age_days: float = 30.0  # older history is another hardware era (0 = no limit)
    fleet_window_h: float = 24.0  # small runs borrow peers' recent figures (0 = never)
    fleet_max: int = 64  # at most this many borrowed fleet figures
    shared_outlier_factor: float = 10.0  # under a shared cause, this much below peers is slow
    tail_min_factor: float = 4.0  # latency tail must exceed this x the peers' median tail
    tail_floor_ms: float = 50.0  # and be at least this long to matter
    confirm: bool = True  # re-probe suspects before a final SLOW
    confirm_references: int = 3  # healthy nodes re-probed beside the suspects (at least)
    # The re-probe runs only the jobs that can confirm a suspect's finding (a slow seq read:
    # the seq read alone; verdict.confirm.confirm_jobs); true = every job of the recipe.
    confirm_every_job: bool = False
    # A suspect whose seq read and 4 KiB random read (two windows, one after the other)
    # both read at or below this fraction of the round's peer medians, among >= min_peers
    # nodes and no shared cause, is decided in round 1: no re-probe (verdict.confirm
    # .decisive). 0 = off: every suspect is re-probed. A healthy node never read below
    # 0.72x in 540 prolog verdicts; a 1/20 reader reads 0.05x in both.
    decisive_ratio: float = 0.1
    drain_read_timeout: bool = False  # fio timed out reading after a normal write: SLOW_READ
    # Not a config key (INTERNAL_KEYS): set by the prolog's triage (prolog.triage_policy).
    # A short read's peer-relative finding on a node that reads at its usual place is a
    # doubt for the full probe, never a drain (verdict.judge.usual_doubt; issue 44).
    short_read: bool = False
    # Rules in shadow mode (names as RULE_NAMES): evaluated and stored with the verdict
    # ("would have drained"), but they never make a node SLOW (screener/verdict/shadow.py).
    shadow: tuple[str, ...] = ()


# Fields set by the code for one screen, never read from a config file.
INTERNAL_KEYS = frozenset({"verdict.short_read"})


# The verdict rules by the signal name each gives a verdict (docs/detection.md): what
# [verdict] shadow may name. tests/test_shadow.py checks it against the rules' code.
RULE_NAMES = (
    *("peer_read", "abs_read", "ratio", "peer_tail", "slow_ios", "r_await"),
    *("peer_rand", "abs_rand", "history", "peer_write", "abs_write", "read_timeout"),
    *("stalls", "close_call"),
)


@dataclass(frozen=True)
class TransportPolicy:
    """How screener reaches nodes."""

    kind: str = "asyncssh"  # asyncssh | fabric | local
    concurrency: int = 256  # commands in flight at once; a probing node holds two
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 120.0
    username: str | None = None
    ssh_config: str | None = None  # path; ~/.ssh/config when None
    known_hosts: str | None = None  # path; ~/.ssh/known_hosts when None (strict either way)
    client_keys: tuple[str, ...] = ()  # private key paths; ssh defaults when empty


@dataclass(frozen=True)
class StorePolicy:
    """Where results go. SCREENER_DATABASE_URL overrides ``url``."""

    url: str = "sqlite:////var/lib/screener/screener.db"
    spool_dir: str = "/var/lib/screener/spool"  # results kept here while the DB is down
    # PostgreSQL waits (screener/store/pg_connect.py, docs/configuration.md "Database")
    connect_timeout_s: float = 5.0  # one host's connect attempt
    connect_wait_s: float = 10.0  # retry "too many clients" / no primary yet, this long
    pool_size: int = 4  # connections one process keeps
    pool_timeout_s: float = 10.0  # a thread's wait for one of them


@dataclass(frozen=True)
class SlurmPolicy:
    """How screener talks to Slurm and how far it may go (docs/slurm.md)."""

    backend: str = "auto"  # auto | cli | pyslurm | rest; auto = pyslurm when it matches, else cli
    command_timeout_s: float = 20.0  # per sinfo/squeue/scontrol call (and slurmrestd request)
    # slurmrestd (docs/slurm.md, "The slurmrestd backend"): "unix:/path/to/socket" or
    # "http://127.0.0.1:6820"; "" = none. auto uses it when set and its ping answers.
    rest_url: str = ""
    # A JWT as `scontrol token` prints it (SLURM_JWT=...; or the bare token), re-read for
    # every client; "" = the SLURM_JWT environment variable, else none (rest_auth/local).
    rest_token_file: str = ""
    rest_user: str = ""  # X-SLURM-USER-NAME with the token; "" = the token's own user
    tag: str = "screener:"  # every drain reason starts with this; resume checks the whole reason
    dry_run: bool = False  # decide and record, but never drain or resume
    max_drain_fraction: float = 0.34  # of one allocation/sweep; beyond it nobody is drained
    partition_max_drain_fraction: float = 0.2  # of a partition's nodes within the window
    partition_window_s: float = 3600.0
    # Small allocations (issue 27): the allocation-fraction guard speaks only for allocations
    # of at least this many nodes; below, the partition's recent figures decide (hooks/
    # fleet_guard.py): other nodes probed within fleet_window_s, at least fleet_min_nodes.
    guard_min_allocation: int = 3
    fleet_window_s: float = 900.0
    fleet_min_nodes: int = 3
    fleet_wait_s: float = 10.0  # for concurrent runs' first rounds (bursts), within the budget


@dataclass(frozen=True)
class PrologPolicy:
    """Which jobs the PrologSlurmctld hook screens, and its budget (docs/slurm.md)."""

    partitions: tuple[str, ...] = ()  # empty = every partition
    job_name_regex: str = ""  # e.g. "ior|benchfs"; a job is selected by name OR comment
    comment_token: str = "screener=on"  # a whitespace/comma separated token in the comment
    budget_s: float = 60.0  # decide with what is done by then; keep well under the timeout
    fresh_s: float = 3600.0  # a node that passed this recently is not probed again ...
    flaky_window_s: float = 86400.0  # ... unless it had a slow episode within this window
    # ... and unless its sentinel fails: a short O_DIRECT read of the kept probe file (dd),
    # below sentinel_drop x the node's usual seq read, sends it to the full probe (issue 28).
    sentinel: bool = True
    sentinel_s: float = 0.1
    sentinel_drop: float = 0.5
    # What reads: "dd" (no fio start cost: ~0.1 s per round instead of ~0.5 s here), judged
    # against the node's own dd readings, which a fio sentinel that read as usual records
    # (until a node has 2, its sentinel is fio's); "fio": always fio (issue 22).
    sentinel_reader: str = "dd"
    # Triage (issue 22): nodes to probe first get a short probe of the read jobs (this
    # ramp + runtime each; the write too with triage_write); only the nodes it leaves
    # ambiguous, and nodes whose latest verdict was not OK, get the full [probe].
    # Allocations below verdict.min_peers do not. On by default since 2026-11-26 (issue 22):
    # its prolog matrix matched the full probe's; write rules and light stallers are left
    # to the sweeps' full probe (the rolling sweep keeps idle nodes' full verdicts fresh).
    triage: bool = True
    triage_runtime_s: float = 0.5
    triage_ramp_s: float = 0.25
    # The triage's random read warm-up (-1 = triage_ramp_s). 0 saves 0.25 s per triage
    # round, but the first queue of 32 reads then counts, and on the emulated cluster it
    # waited ~60 ms on healthy nodes: 'stalls', re-probes, escalations (docs/performance.md).
    triage_rand_ramp_s: float = -1.0
    # The triage's sequential block size ("" = probe.seq_bs). 256k x QD32 keeps 8 MiB in
    # flight, which a slow reader drains 4x sooner than 1M (4 s less per slow-node prolog
    # here), but it missed close pairs on the emulated fleet: docs/performance.md.
    triage_seq_bs: str = ""
    # The queue depth of the prolog's short sequential reads, the sentinel's and the
    # triage's (0 = probe.iodepth). After a time-based fio job every queued read must
    # complete: 32 x 1 MiB take a 15 MB/s reader ~2 s, 8 x 1 MiB ~0.5 s. 8 since
    # 2026-11-26 (issue 22): the prolog matrix matched QD32's (docs/performance.md).
    seq_iodepth: int = 8
    # The triage's jobs: the reads always; the sequential write only with this on. The
    # write costs each round ~1 s here (0.25 + 0.5 s + fio's ~0.3 s per job) and tells a
    # slow reader from its peers nothing the read does not; the full probe keeps it.
    triage_write: bool = False
    # ... and the 4 KiB random read (with probe.rand_read): off, the triage is the
    # sequential read alone, one fio job (docs/performance.md, "Time to start").
    triage_rand_read: bool = True
    fail_closed: bool = False  # on an internal error: False = let the job run, True = requeue
    release_requeued: bool = True  # after a drain, make the requeued job eligible at once
    iostat: bool = True  # start in-job iostat on the screened nodes (stopped by the epilog)
    iostat_interval_s: int = 5
    iostat_max_s: int = 86400  # in-job iostat stops by itself after this (no epilog came)
    job_r_await_factor: float = 4.0  # in-job: r_await above this x the job's median = slow
    job_min_r_await_ms: float = 50.0  # ... and above this absolute floor
    log_file: str = ""  # hook log lines are appended here too (slurmctld drops hook output)


@dataclass(frozen=True)
class SweepPolicy:
    """The nightly sweep: which nodes, how often a drained node must pass, deep mode."""

    resume_after: int = 2  # consecutive passing sweeps before a screener drain is resumed
    partition: str = ""  # restrict the sweep to one partition ("" = all)
    deep_max_rounds: int = 25  # deep mode: cap on rounds per node (seed 002)
    deep_window: int = 5  # steady state over the last this many rounds ...
    deep_max_excursion: float = 0.2  # ... max-min within this fraction of their mean ...
    deep_max_slope: float = 0.1  # ... and |best-fit slope| x window within this fraction
    # A node without a sweep verdict this many hours (sweeps running that long) is soft-
    # drained by the sweep, probed once idle, resumed at once if it passes (0 = off).
    max_age_h: float = 0.0
    # The rolling sweep (`sweep --submit --rolling`, issue 22): a small low-priority job over
    # the idle nodes whose last pass is older than rolling_age_s (or that never passed), so
    # the prolog finds them fresh (prolog.fresh_s) and takes its fast path.
    rolling_nodes: int = 4  # at most this many nodes per rolling job
    rolling_age_s: float = 1800.0  # re-probe an idle node this long after its last pass
    rolling_nice: int = 10000  # sbatch --nice: every user job waiting for a node goes first
    # The nightly sweep's short reads of the prolog's triage recipe (issue 44), after its full
    # probe, of the nodes it passed: their usual place and tail under the triage's recipe,
    # so a slower drive model is not escalated to the full probe on its first jobs. As many
    # as the nodes lack of rules.MIN_HISTORY, at least one, at most this many (0 = off).
    triage_reads: int = 3


@dataclass(frozen=True)
class IngestPolicy:
    """After the job: the epilog ingests its outputs, optionally drains in-job outliers
    (docs/ingest.md)."""

    epilog: bool = True  # the epilog ingests a job's IOR/fio outputs when it knows where
    comment_key: str = "screener_out"  # comment token KEY=/abs/dir names the output directory
    dir_pattern: str = ""  # else, for screened jobs: e.g. "/shared/ior/{user}" ({user} {job_id})
    drain: bool = False  # drain an in-job read outlier (same guard, resume rule as the prolog)
    drain_tag: str = "screener-job:"  # its own drain-reason tag (1-16 printable chars)
    # Evidence that survives noise (docs/ingest.md): a phase is judged only when it lasted
    # min_phase_s (its slowest node) and the job's median node moved min_phase_mib; a node
    # is slow in a phase when an outlier in most judged iterations, or in one at <= this ratio.
    min_phase_s: float = 0.5
    min_phase_mib: float = 16.0
    decisive_ratio: float = 0.1
    min_iostat_samples: int = 3  # epilog's in-job iostat: judge nodes that read this often


@dataclass(frozen=True)
class TrendPolicy:
    """Early warning (issue 46, `screener trend`): a node's sweep figures over its round's
    peer median, a Theil-Sen fit; DECLINING (a warning, never a drain) when even the slowest
    fall its band allows crosses the slow line (verdict.min_peer_drop, rand_peer_drop)
    within horizon_days (docs/detection.md, "Early warning")."""

    horizon_days: float = 14.0  # warn when the line is crossed within this (sweep cadence)
    min_sweeps: int = 6  # fewer sweeps of the current recipe: no forecast, said so
    window: int = 12  # fit the newest this many sweeps
    confidence: float = 0.9  # two-sided band of the slope (Kendall/Sen)
    since_days: float = 90.0  # read sweeps this far back


@dataclass(frozen=True)
class Policy:
    """The whole configuration."""

    probe: ProbePolicy = field(default_factory=ProbePolicy)
    verdict: VerdictPolicy = field(default_factory=VerdictPolicy)
    transport: TransportPolicy = field(default_factory=TransportPolicy)
    store: StorePolicy = field(default_factory=StorePolicy)
    slurm: SlurmPolicy = field(default_factory=SlurmPolicy)
    prolog: PrologPolicy = field(default_factory=PrologPolicy)
    sweep: SweepPolicy = field(default_factory=SweepPolicy)
    ingest: IngestPolicy = field(default_factory=IngestPolicy)
    trend: TrendPolicy = field(default_factory=TrendPolicy)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (stored with each run so a verdict can be explained later).

        The store URL is kept without its password: run records are readable by every admin.
        """
        d = dataclasses.asdict(self)
        d["store"]["url"] = redact_url(self.store.url)
        return d


_SECTIONS: dict[str, type[Any]] = {
    "probe": ProbePolicy,
    "verdict": VerdictPolicy,
    "transport": TransportPolicy,
    "store": StorePolicy,
    "slurm": SlurmPolicy,
    "prolog": PrologPolicy,
    "sweep": SweepPolicy,
    "ingest": IngestPolicy,
    "trend": TrendPolicy,
}

_ALLOWED = {
    "probe.ioengine": ("libaio", "io_uring"),
    "transport.kind": ("asyncssh", "fabric", "local"),
    "slurm.backend": ("auto", "cli", "pyslurm", "rest"),
    "prolog.sentinel_reader": ("dd", "fio"),
}


def policy_from_dict(data: dict[str, Any]) -> Policy:
    """Build a Policy from parsed TOML, rejecting unknown keys and wrong types."""
    parts: dict[str, Any] = {}
    for section, values in data.items():
        cls = _SECTIONS.get(section)
        if cls is None:
            raise ConfigError(f"unknown config section [{section}]")
        if not isinstance(values, dict):
            raise ConfigError(f"[{section}] must be a table")
        parts[section] = _section(section, cls, values)
    return validate(Policy(**parts))


def _section(name: str, cls: type[Any], values: dict[str, Any]) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in fields or f"{name}.{key}" in INTERNAL_KEYS:
            raise ConfigError(f"unknown config key {name}.{key}")
        default = getattr(cls(), key)
        kwargs[key] = _coerce(f"{name}.{key}", value, default)
    return cls(**kwargs)


def _coerce(key: str, value: Any, default: Any) -> Any:
    """Check a TOML value against the default's type; ints are accepted for floats."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, tuple):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        value = tuple(value) if ok else value
    else:  # str or Optional[str]
        ok = isinstance(value, str)
    if not ok:
        raise ConfigError(f"config key {key} has the wrong type ({type(value).__name__})")
    allowed = _ALLOWED.get(key)
    if allowed is not None and value not in allowed:
        raise ConfigError(f"config key {key} must be one of {', '.join(allowed)}")
    return value


# Characters a probe target may contain. fio cuts every option value at ';' and '#' (its
# comment characters, even on the command line) and splits file names at ':', so a target
# such as '/tmp/x/victim;x' made fio write over /tmp/x/victim. Only plain path characters
# are accepted; ':' is escaped for fio.
_TARGET_RE = re.compile(r"/[A-Za-z0-9._+@%=/:-]*")
_TARGET_MAX = 1024
_BS_RE = re.compile(r"[1-9][0-9]{0,9}[kKmM]?")
_MAX_SECONDS = 86400.0  # any duration above a day is a typo (and 1e300 overflows fio's ms)
_MAX_SIZE_MIB = 16 * 1024 * 1024  # 16 TiB: beyond any local NVMe


def target_problem(target: str) -> str | None:
    """Why ``target`` cannot be given to fio and the node scripts, or None if it can."""
    if not isinstance(target, str) or not target.startswith("/"):
        return f"must be an absolute path, got {shorten(target)!r}"
    if len(target) > _TARGET_MAX:
        return f"is longer than {_TARGET_MAX} characters"
    if not _TARGET_RE.fullmatch(target):
        bad = "".join(sorted({c for c in target if not _TARGET_RE.fullmatch("/" + c)}))
        return (
            f"{shorten(target)!r} is not a plain absolute path, it contains {bad!r}: use "
            "letters, digits and ._+@%=/:- only (fio cuts option values at ';' and '#')"
        )
    return None


def shorten(text: object, limit: int = 80) -> str:
    """At most ``limit`` characters of ``text`` for an error line (a 5,000-char name is noise)."""
    s = str(text)
    return s if len(s) <= limit else s[: limit - 3] + "..."


# Bounds of every numeric key: (low, high, low is exclusive). Wide enough for any real site,
# narrow enough that nothing downstream overflows: datetime/timedelta arithmetic (about
# 10^14 s), asyncio/subprocess timeouts, SQLite's 64-bit integers (SQL LIMIT), fio's ms.
_DAY = 86400.0
_YEAR = 365 * _DAY
_RATE = 1e9  # MB/s, IOPS: far beyond any device
_FACTOR = 1e6  # ratios and factors: beyond any real threshold
_COUNT = 1_000_000
_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "probe.size_mib": (1, _MAX_SIZE_MIB, False),
    "probe.runtime_s": (0.001, _MAX_SECONDS, False),
    "probe.ramp_s": (0, _MAX_SECONDS, False),
    "probe.rand_ramp_s": (-1, _MAX_SECONDS, False),
    "probe.iodepth": (1, 1024, False),
    "probe.seq_iodepth": (0, 1024, False),
    "probe.min_free_mib": (0, _MAX_SIZE_MIB, False),
    "probe.layout_min_mb_s": (0.001, _RATE, False),  # the layout timeout divides by it
    "probe.iostat_interval_s": (1, 3600, False),
    "verdict.min_read_mb_s": (0, _RATE, False),
    "verdict.min_write_mb_s": (0, _RATE, False),
    "verdict.min_rand_read_iops": (0, _RATE, False),
    "verdict.max_write_read_ratio": (1, _FACTOR, True),
    "verdict.max_slow_fraction": (0, 1, True),
    "verdict.max_r_await_ms": (0, 1e9, False),
    "verdict.z_threshold": (0, _FACTOR, True),
    "verdict.mad_floor_fraction": (0.001, 1, False),  # 0: a zero MAD divides by zero
    "verdict.min_peers": (2, _COUNT, False),
    "verdict.min_peer_drop": (0, 1, True),
    "verdict.rand_peer_drop": (0, 1, True),
    "verdict.shared_cause_fraction": (0, 1, True),
    "verdict.history_runs": (0, 1000, False),
    "verdict.history_drop": (0, 1, False),
    "verdict.history_max_age_days": (0, 36500, False),
    "verdict.fleet_window_h": (0, 36500 * 24, False),
    "verdict.fleet_max": (0, 100_000, False),
    "verdict.shared_outlier_factor": (1, _FACTOR, True),
    "verdict.tail_min_factor": (1, _FACTOR, True),
    "verdict.tail_floor_ms": (0, 1e9, False),
    "verdict.confirm_references": (0, 10_000, False),
    "verdict.decisive_ratio": (0, 0.25, False),  # far below the peer rule's gap (0.5)
    "transport.concurrency": (1, 65536, False),
    "transport.connect_timeout_s": (0.1, 3600, False),
    "transport.command_timeout_s": (1, _MAX_SECONDS, False),
    "slurm.command_timeout_s": (1, 3600, False),
    "store.connect_timeout_s": (1, 3600, False),
    "store.connect_wait_s": (0, 3600, False),
    "store.pool_size": (1, 1000, False),
    "store.pool_timeout_s": (0, 3600, False),
    "slurm.max_drain_fraction": (0, 1, True),
    "slurm.partition_max_drain_fraction": (0, 1, True),
    "slurm.partition_window_s": (0, _YEAR, False),
    "slurm.guard_min_allocation": (1, _COUNT, False),
    "slurm.fleet_window_s": (1, _YEAR, False),
    "slurm.fleet_min_nodes": (1, _COUNT, False),
    "slurm.fleet_wait_s": (0, 3600, False),
    "prolog.budget_s": (1, _DAY, False),
    "prolog.fresh_s": (0, _YEAR, False),
    "prolog.flaky_window_s": (0, _YEAR, False),
    "prolog.sentinel_s": (0.05, 60, False),
    "prolog.sentinel_drop": (0, 1, True),
    "prolog.triage_runtime_s": (0.1, 60, False),
    "prolog.triage_ramp_s": (0, 60, False),
    "prolog.triage_rand_ramp_s": (-1, 60, False),
    "prolog.seq_iodepth": (0, 1024, False),
    "prolog.iostat_interval_s": (1, 3600, False),
    "prolog.iostat_max_s": (1, _YEAR, False),
    "prolog.job_r_await_factor": (1, _FACTOR, True),
    "prolog.job_min_r_await_ms": (0, 1e9, False),
    "sweep.resume_after": (1, 1000, False),
    "sweep.deep_max_rounds": (2, 10_000, False),
    "sweep.deep_window": (2, 1000, False),
    "sweep.max_age_h": (0, 36500 * 24, False),
    "sweep.rolling_nodes": (1, 100_000, False),
    "sweep.rolling_age_s": (0, _YEAR, False),
    "sweep.rolling_nice": (0, 2_147_483_645, False),
    "sweep.triage_reads": (0, 10, False),
    "sweep.deep_max_excursion": (0, 10, True),
    "sweep.deep_max_slope": (0, 10, True),
    "ingest.min_phase_s": (0, _DAY, False),
    "ingest.min_phase_mib": (0, 1 << 30, False),
    "ingest.decisive_ratio": (0, 0.99, True),  # 1 would call every node decisive
    "ingest.min_iostat_samples": (1, 100_000, False),
    "trend.horizon_days": (0, 36500, True),
    "trend.min_sweeps": (3, 1000, False),
    "trend.window": (3, 1000, False),
    "trend.confidence": (0, 0.999, True),  # 1 would be a band of every slope
    "trend.since_days": (0, 36500, True),
}
# A numeric key added without a line above still gets these (finite, and an integer that
# fits SQLite), so no new key can carry 1e300 or a 30-digit integer into the code.
_DEFAULT_BOUNDS = (-1e15, 1e15, False)


def _bounds_problem(key: str, value: float) -> str | None:
    """Why a numeric ``value`` is out of range for ``key``, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"config key {key} must be finite"
    low, high, open_low = _BOUNDS.get(key, _DEFAULT_BOUNDS)
    if (value > low if open_low else value >= low) and value <= high:
        return None
    return f"config key {key} must be {'>' if open_low else '>='} {low:g} and <= {high:g}, " + (
        f"got {shorten(format(value, 'g') if isinstance(value, float) else value, 24)}"
    )


def validate(p: Policy) -> Policy:
    """Every value checked at load time, so no command meets it later (every key named in
    its one-line message): numeric ranges first, then what ranges cannot express."""
    for name in _SECTIONS:
        section = getattr(p, name)
        for f in dataclasses.fields(section):
            value = getattr(section, f.name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                problem = _bounds_problem(f"{name}.{f.name}", value)
                if problem is not None:
                    raise ConfigError(problem)
    pp = p.probe
    bad_target = target_problem(pp.target)
    checks = [
        (bad_target is None, f"probe.target {bad_target}"),
        (bool(_BS_RE.fullmatch(pp.seq_bs)), "probe.seq_bs must be a block size like 1M or 4k"),
        (bool(_BS_RE.fullmatch(pp.rand_bs)), "probe.rand_bs must be a block size like 4k"),
        (
            not p.prolog.triage_seq_bs or bool(_BS_RE.fullmatch(p.prolog.triage_seq_bs)),
            "prolog.triage_seq_bs must be empty (probe.seq_bs) or a block size like 256k",
        ),
        (bool(p.store.url), "store.url must not be empty"),
        (p.store.spool_dir.startswith("/"), "store.spool_dir must be an absolute path"),
        (not _unknown_rules(p.verdict.shadow), _unknown_rules(p.verdict.shadow)),
        *_slurm_checks(p),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    return p


def _unknown_rules(names: tuple[str, ...]) -> str:
    """The one-line error for [verdict] shadow names that are no rule's, or ""."""
    unknown = [n for n in names if n not in RULE_NAMES]
    if not unknown:
        return ""
    return (
        f"verdict.shadow: unknown rule {', '.join(repr(shorten(n, 40)) for n in unknown[:3])}"
        f" (rules: {', '.join(RULE_NAMES)})"
    )


def tag_problem(tag: str) -> str | None:
    """Why ``tag`` cannot start a drain reason, or None: 1-16 characters that Slurm's reason
    check (screener.slurm.client.check_reason) accepts, so no drain is refused later."""
    from screener.slurm.client import check_reason  # screener.slurm imports this module

    if not 0 < len(tag) <= 16:
        return "must be 1-16 characters"
    try:
        check_reason(tag)
    except ScreenerError:
        return f"{shorten(tag)!r}: Slurm reasons take only A-Za-z0-9, space and _.,:;+/()%<>@#-"
    return None


# slurm.rest_url: a unix socket path, or http(s) to a host name or address and a port.
_REST_UNIX_RE = re.compile(r"unix:(/[A-Za-z0-9._/-]{1,107})")
_REST_HTTP_RE = re.compile(
    r"(https?)://([A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:]{2,39}\]):([0-9]{1,5})/?"
)
_REST_USER_RE = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")


def rest_endpoint(url: str) -> tuple[str, str, int]:
    """slurm.rest_url as ("unix", socket path, 0) or ("http"|"https", host, port); a
    one-line ConfigError otherwise (nothing else ever reaches a connection or a header)."""
    m = _REST_UNIX_RE.fullmatch(url)
    if m and "/../" not in f"{m.group(1)}/":
        return "unix", m.group(1), 0
    m = _REST_HTTP_RE.fullmatch(url)
    if m and 0 < int(m.group(3)) < 65536:
        return m.group(1), m.group(2).strip("[]"), int(m.group(3))
    raise ConfigError(
        f"slurm.rest_url {shorten(url)!r} must be unix:/path/to/socket or "
        "http://HOST:PORT (e.g. http://127.0.0.1:6820)"
    )


def _rest_checks(s: SlurmPolicy) -> list[tuple[bool, str]]:
    """[slurm] rest_* settings: a usable URL, an absolute token file, a plain user name."""
    if s.rest_url:
        rest_endpoint(s.rest_url)  # raises its own one-line message
    return [
        (bool(s.rest_url) or s.backend != "rest", "slurm.backend = rest needs slurm.rest_url"),
        (
            not s.rest_token_file or os.path.isabs(s.rest_token_file),
            f"slurm.rest_token_file must be an absolute path, got {shorten(s.rest_token_file)!r}",
        ),
        (
            not s.rest_user or _REST_USER_RE.fullmatch(s.rest_user) is not None,
            f"slurm.rest_user {shorten(s.rest_user)!r} is not a user name",
        ),
    ]


def _slurm_checks(p: Policy) -> list[tuple[bool, str]]:
    """Checks of the [slurm], [prolog], [sweep] and [ingest] sections beyond ranges."""
    try:
        re.compile(p.prolog.job_name_regex)
        regex_ok = True
    except (re.error, RecursionError, OverflowError):
        regex_ok = False
    tag = p.slurm.tag
    job_tag = p.ingest.drain_tag
    return [
        (tag_problem(job_tag) is None, f"ingest.drain_tag {tag_problem(job_tag)}"),
        (job_tag != tag, "ingest.drain_tag must differ from slurm.tag (its own tag)"),
        (
            re.fullmatch(r"[A-Za-z0-9_]{1,32}", p.ingest.comment_key) is not None,
            "ingest.comment_key must be 1-32 letters, digits or '_'",
        ),
        (
            _pattern_ok(p.ingest.dir_pattern),
            "ingest.dir_pattern: an absolute path using "
            "only {user} and {job_id} placeholders, no '..'",
        ),
        (tag_problem(tag) is None, f"slurm.tag {tag_problem(tag)}"),
        *_rest_checks(p.slurm),
        (
            regex_ok,
            f"prolog.job_name_regex is not a valid regex: {shorten(p.prolog.job_name_regex)!r}",
        ),
        (
            p.sweep.deep_max_rounds >= p.sweep.deep_window,
            "sweep.deep_max_rounds must be >= sweep.deep_window",
        ),
    ]


def _pattern_ok(pattern: str) -> bool:
    """'' or an absolute directory pattern whose placeholders are {user} and {job_id} only."""
    if not pattern:
        return True
    bare = pattern.replace("{user}", "u").replace("{job_id}", "1")
    return bool(re.fullmatch(r"/[A-Za-z0-9_.+/-]{0,1000}", bare)) and ".." not in bare.split("/")


def config_path(path: str | os.PathLike[str] | None = None) -> str | os.PathLike[str] | None:
    """The config file in force: ``path`` (--config), else $SCREENER_CONFIG, else the
    default path if it exists; None = built-in defaults."""
    if path is None:
        path = os.environ.get("SCREENER_CONFIG") or None
    if path is None and DEFAULT_CONFIG_PATH.exists():
        path = DEFAULT_CONFIG_PATH
    return path


def load_policy(path: str | os.PathLike[str] | None = None) -> Policy:
    """Load the policy: ``path`` (--config), else $SCREENER_CONFIG, else the default path if
    it exists, else built-in defaults. The same rule for every command and hook, so a site
    points a Slurm hook at its file through the environment without editing the hook."""
    path = config_path(path)
    policy = Policy() if path is None else policy_from_dict(_read_toml(path))
    _LOADED[:] = [policy.store]
    return policy


_LOADED: list[StorePolicy] = []  # [store] of the policy load_policy returned last


def store_in_force() -> StorePolicy:
    """The ``[store]`` section of the policy this process loaded (every command and hook
    loads one, through load_policy), else the defaults: its limits bound every database
    engine the process makes (screener/store/engine.py)."""
    return _LOADED[0] if _LOADED else StorePolicy()


def _read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed file, or ConfigError with one line saying why not."""
    if not os.fspath(path):
        raise ConfigError("config path is empty (give a file, or leave --config out)")
    shown = shorten(os.fspath(path), 200)
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {shown} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {shown} is a directory, not a file") from None
    except PermissionError:
        raise ConfigError(f"config file {shown} is not readable (permission denied)") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {shown} is not UTF-8 text (binary?)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {shown} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses per nesting level: [[[[...]]]] 3,000 deep
        raise ConfigError(f"config file {shown} is nested too deeply") from None
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or type(exc).__name__
        raise ConfigError(f"cannot read config file {shown}: {why}") from None


def hook_log_file(path: str | os.PathLike[str] | None = None) -> str:
    """``[prolog] log_file`` of the config in force even when the rest of it is invalid,
    so a hook that cannot load its policy still logs where the admin looks ('' if unknown)."""
    try:
        found = config_path(path)
        value = _read_toml(found).get("prolog", {}).get("log_file", "") if found else ""
    except Exception:  # anything unreadable: stderr only
        return ""
    return value if isinstance(value, str) else ""


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (also when the URL does not parse).

    Everything from the first ':' after the user name up to the LAST '@' is hidden, so a
    password with an unencoded '@', '/' or ':' is never shown in part.
    """
    head, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    userinfo, _, hostpart = rest.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    return f"{head}://{user}{':***' if colon else ''}@{hostpart}"


def database_url(policy: Policy) -> str:
    """The DB URL in force: SCREENER_DATABASE_URL wins over the config file."""
    return os.environ.get("SCREENER_DATABASE_URL") or policy.store.url
