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

from screener.errors import ConfigError

DEFAULT_CONFIG_PATH = Path("/etc/screener/screener.toml")


@dataclass(frozen=True)
class ProbePolicy:
    """How the fio probes run on each node."""

    target: str = "/scratch"  # directory on the local NVMe filesystem
    size_mib: int = 1024  # region written then read back; must fit the free space
    runtime_s: float = 3.0  # measured seconds per job (after ramp)
    ramp_s: float = 1.0  # discarded warm-up seconds per job
    iodepth: int = 32  # fills an NVMe queue (seed 000: QD1 under-reports)
    ioengine: str = "libaio"  # libaio | io_uring
    seq_bs: str = "1M"
    rand_bs: str = "4k"
    rand_read: bool = True  # run the 4 KiB random-read job too
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
    drain_read_timeout: bool = False  # fio timed out reading after a normal write: SLOW_READ


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


@dataclass(frozen=True)
class SlurmPolicy:
    """How screener talks to Slurm and how far it may go (docs/slurm.md)."""

    backend: str = "auto"  # auto | cli | pyslurm; auto = pyslurm when it matches, else cli
    command_timeout_s: float = 20.0  # per sinfo/squeue/scontrol call
    tag: str = "screener:"  # every drain reason starts with this; resume checks the whole reason
    dry_run: bool = False  # decide and record, but never drain or resume
    max_drain_fraction: float = 0.34  # of one allocation/sweep; beyond it nobody is drained
    partition_max_drain_fraction: float = 0.2  # of a partition's nodes within the window
    partition_window_s: float = 3600.0


@dataclass(frozen=True)
class PrologPolicy:
    """Which jobs the PrologSlurmctld hook screens, and its budget (docs/slurm.md)."""

    partitions: tuple[str, ...] = ()  # empty = every partition
    job_name_regex: str = ""  # e.g. "ior|benchfs"; a job is selected by name OR comment
    comment_token: str = "screener=on"  # a whitespace/comma separated token in the comment
    budget_s: float = 60.0  # decide with what is done by then; keep well under the timeout
    fresh_s: float = 3600.0  # a node that passed this recently is not probed again ...
    flaky_window_s: float = 86400.0  # ... unless it had a slow episode within this window
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
}

_ALLOWED = {
    "probe.ioengine": ("libaio", "io_uring"),
    "transport.kind": ("asyncssh", "fabric", "local"),
    "slurm.backend": ("auto", "cli", "pyslurm"),
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
        if key not in fields:
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
        return f"must be an absolute path, got {_short(target)!r}"
    if len(target) > _TARGET_MAX:
        return f"is longer than {_TARGET_MAX} characters"
    if not _TARGET_RE.fullmatch(target):
        bad = "".join(sorted({c for c in target if not _TARGET_RE.fullmatch("/" + c)}))
        return (
            f"{_short(target)!r} is not a plain absolute path, it contains {bad!r}: use "
            "letters, digits and ._+@%=/:- only (fio cuts option values at ';' and '#')"
        )
    return None


def _short(text: object, limit: int = 80) -> str:
    """At most ``limit`` characters of ``text`` for an error line (a 5,000-char name is noise)."""
    s = str(text)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def validate(p: Policy) -> Policy:
    """Range checks that types alone cannot express (every key named in its message)."""
    pp, v, t = p.probe, p.verdict, p.transport
    bad_target = target_problem(pp.target)
    checks = [
        (bad_target is None, f"probe.target {bad_target}"),
        (0 < pp.size_mib <= _MAX_SIZE_MIB, f"probe.size_mib must be within 1..{_MAX_SIZE_MIB}"),
        (0 < pp.runtime_s <= _MAX_SECONDS, "probe.runtime_s must be > 0 and <= 86400"),
        (0 <= pp.ramp_s <= _MAX_SECONDS, "probe.ramp_s must be >= 0 and <= 86400"),
        (pp.runtime_s * 1000 >= 1, "probe.runtime_s must be at least 0.001"),
        (1 <= pp.iodepth <= 1024, "probe.iodepth must be within 1..1024"),
        (bool(_BS_RE.fullmatch(pp.seq_bs)), "probe.seq_bs must be a block size like 1M or 4k"),
        (bool(_BS_RE.fullmatch(pp.rand_bs)), "probe.rand_bs must be a block size like 4k"),
        (0 <= pp.min_free_mib <= _MAX_SIZE_MIB, "probe.min_free_mib must be >= 0"),
        (1 <= pp.iostat_interval_s <= 3600, "probe.iostat_interval_s must be within 1..3600"),
        (v.min_read_mb_s >= 0, "verdict.min_read_mb_s must be >= 0"),
        (v.min_write_mb_s >= 0, "verdict.min_write_mb_s must be >= 0"),
        (v.min_rand_read_iops >= 0, "verdict.min_rand_read_iops must be >= 0"),
        (v.max_write_read_ratio > 1, "verdict.max_write_read_ratio must be > 1"),
        (0 < v.max_slow_fraction <= 1, "verdict.max_slow_fraction must be in (0, 1]"),
        (v.max_r_await_ms >= 0, "verdict.max_r_await_ms must be >= 0"),
        (v.z_threshold > 0, "verdict.z_threshold must be > 0"),
        (0 <= v.mad_floor_fraction <= 1, "verdict.mad_floor_fraction must be in [0, 1]"),
        (v.min_peers >= 2, "verdict.min_peers must be >= 2"),
        (0 < v.min_peer_drop <= 1, "verdict.min_peer_drop must be in (0, 1]"),
        (0 < v.shared_cause_fraction <= 1, "verdict.shared_cause_fraction in (0, 1]"),
        (0 <= v.history_runs <= 1000, "verdict.history_runs must be within 0..1000"),
        (0 <= v.history_drop <= 1, "verdict.history_drop must be in [0, 1]"),
        (1 <= t.concurrency <= 65536, "transport.concurrency must be within 1..65536"),
        (0 < t.connect_timeout_s <= 3600, "transport.connect_timeout_s must be in (0, 3600]"),
        (
            0 < t.command_timeout_s <= _MAX_SECONDS,
            "transport.command_timeout_s must be > 0 and <= 86400",
        ),
        (bool(p.store.url), "store.url must not be empty"),
        (p.store.spool_dir.startswith("/"), "store.spool_dir must be an absolute path"),
        (pp.layout_min_mb_s > 0, "probe.layout_min_mb_s must be > 0"),
        (v.history_max_age_days >= 0, "verdict.history_max_age_days must be >= 0"),
        (v.fleet_window_h >= 0, "verdict.fleet_window_h must be >= 0"),
        (v.fleet_max >= 0, "verdict.fleet_max must be >= 0"),
        (v.shared_outlier_factor > 1, "verdict.shared_outlier_factor must be > 1"),
        (v.tail_min_factor > 1, "verdict.tail_min_factor must be > 1"),
        (v.tail_floor_ms >= 0, "verdict.tail_floor_ms must be >= 0"),
        (v.confirm_references >= 0, "verdict.confirm_references must be >= 0"),
        *_slurm_checks(p),
    ]
    sections = (pp, v, t, p.store, p.slurm, p.prolog, p.sweep, p.ingest)
    for section in sections:  # NaN/inf pass every comparison above or below
        for f in dataclasses.fields(section):
            value = getattr(section, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"config key {_section_name(section)}.{f.name} must be finite")
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    return p


def _slurm_checks(p: Policy) -> list[tuple[bool, str]]:
    """Range checks of the [slurm], [prolog] and [sweep] sections."""
    import re

    try:
        re.compile(p.prolog.job_name_regex)
        regex_ok = True
    except re.error:
        regex_ok = False
    tag = p.slurm.tag
    job_tag = p.ingest.drain_tag
    return [
        (0 < len(job_tag) <= 16 and job_tag.isprintable(), "ingest.drain_tag: 1-16 chars"),
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
        (0 <= p.ingest.min_phase_s <= 86400, "ingest.min_phase_s must be within 0..86400"),
        (0 <= p.ingest.min_phase_mib <= 1 << 30, "ingest.min_phase_mib must be within 0..2^30"),
        (0 < p.ingest.decisive_ratio < 1, "ingest.decisive_ratio must be in (0, 1)"),
        (
            1 <= p.ingest.min_iostat_samples <= 100000,
            "ingest.min_iostat_samples must be within 1..100000",
        ),
        (p.slurm.command_timeout_s > 0, "slurm.command_timeout_s must be > 0"),
        (0 < len(tag) <= 16 and tag.isprintable(), "slurm.tag must be 1-16 printable chars"),
        (0 < p.slurm.max_drain_fraction <= 1, "slurm.max_drain_fraction in (0, 1]"),
        (0 < p.slurm.partition_max_drain_fraction <= 1, "slurm.partition_max_drain_fraction"),
        (p.slurm.partition_window_s >= 0, "slurm.partition_window_s must be >= 0"),
        (regex_ok, f"prolog.job_name_regex is not a valid regex: {p.prolog.job_name_regex!r}"),
        (p.prolog.budget_s > 0, "prolog.budget_s must be > 0"),
        (p.prolog.fresh_s >= 0, "prolog.fresh_s must be >= 0"),
        (p.prolog.flaky_window_s >= 0, "prolog.flaky_window_s must be >= 0"),
        (p.prolog.iostat_interval_s >= 1, "prolog.iostat_interval_s must be >= 1"),
        (p.prolog.iostat_max_s >= 1, "prolog.iostat_max_s must be >= 1"),
        (p.prolog.job_r_await_factor > 1, "prolog.job_r_await_factor must be > 1"),
        (p.sweep.resume_after >= 1, "sweep.resume_after must be >= 1"),
        (p.sweep.deep_window >= 2, "sweep.deep_window must be >= 2"),
        (p.sweep.deep_max_rounds >= p.sweep.deep_window, "sweep.deep_max_rounds >= deep_window"),
    ]


def _pattern_ok(pattern: str) -> bool:
    """'' or an absolute directory pattern whose placeholders are {user} and {job_id} only."""
    if not pattern:
        return True
    bare = pattern.replace("{user}", "u").replace("{job_id}", "1")
    return bool(re.fullmatch(r"/[A-Za-z0-9_.+/-]{0,1000}", bare)) and ".." not in bare.split("/")


def _section_name(obj: object) -> str:
    return next(name for name, cls in _SECTIONS.items() if isinstance(obj, cls))


def load_policy(path: str | os.PathLike[str] | None = None) -> Policy:
    """Load the policy: ``path`` (--config), else $SCREENER_CONFIG, else the default path if
    it exists, else built-in defaults. The same rule for every command and hook, so a site
    points a Slurm hook at its file through the environment without editing the hook."""
    if path is None:
        path = os.environ.get("SCREENER_CONFIG") or None
    if path is None:
        if not DEFAULT_CONFIG_PATH.exists():
            return Policy()
        path = DEFAULT_CONFIG_PATH
    if not os.fspath(path):
        raise ConfigError("config path is empty (give a file, or leave --config out)")
    shown = _short(os.fspath(path), 200)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
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
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or type(exc).__name__
        raise ConfigError(f"cannot read config file {shown}: {why}") from None
    return policy_from_dict(data)


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
