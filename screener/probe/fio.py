"""fio recipe and parser: build the one fio command a node runs, read its JSON+ back.

Pure: nothing here starts a process. The argv goes to the transport; its stdout comes back
to :func:`parse_fio`, which turns it into a :class:`~screener.probe_data.FioRun`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from screener.errors import ConfigError, ProbeError
from screener.policy import ProbePolicy, target_problem
from screener.probe.private import in_private_dir, private_dir
from screener.probe.stalls import bin_at_rank, stall_mode
from screener.probe_data import FioJobResult, FioRun

JOBS = ("seq_write", "seq_read", "rand_read")
PROBE_FILE = "probe"  # the probe file's name inside screener's private directory
LEGACY_PROBE_FILE = ".screener-probe"  # where it was before (in the target itself)
SLOW_NS = 100e6  # an I/O completing in >= 100 ms is a "slow op" (seed 001)

_BS_RE = re.compile(r"^[1-9][0-9]*[kKmM]?$")
_ENGINES = ("libaio", "io_uring")


def probe_file(policy: ProbePolicy) -> str:
    """Path of the region fio writes then reads back on the node (for humans: commands use
    the name relative to the private directory they entered, screener.probe.private)."""
    return f"{private_dir(policy.target)}/{PROBE_FILE}"


def in_probe_dir(policy: ProbePolicy, argv: list[str]) -> list[str]:
    """``argv`` run inside the target's private directory (screener.probe.private): the
    probe file is then ``PROBE_FILE`` there, a name no other user can plant or replace."""
    return in_private_dir(private_dir(policy.target), argv)


def cleanup_argv(policy: ProbePolicy) -> list[str]:
    """Remove the probe file: run after the last round when ``[probe] keep_file`` is false."""
    _check_policy(policy)
    # -f: a missing file is not an error; "--": the name can never be read as an option.
    return in_probe_dir(policy, ["rm", "-f", "--", PROBE_FILE])


def recipe_fingerprint(policy: ProbePolicy) -> str:
    """16 hex digits naming everything in the recipe that changes the figures.

    Stored with each probe and verdict so that history compares like with like: a new
    region size, block size, queue depth, runtime, target or engine is another test.
    """
    recipe = {
        "target": policy.target,
        "size_mib": policy.size_mib,
        "runtime_s": float(policy.runtime_s),
        "ramp_s": float(policy.ramp_s),
        "iodepth": policy.iodepth,
        "ioengine": policy.ioengine,
        "seq_bs": policy.seq_bs.lower(),
        "rand_bs": policy.rand_bs.lower(),
        "rand_read": policy.rand_read,
    }
    if not policy.seq_write:  # only then: the fingerprints of write+read recipes stay as they were
        recipe["seq_write"] = False
    if seq_iodepth(policy) != policy.iodepth:  # likewise: recipes without it keep their name
        recipe["seq_iodepth"] = seq_iodepth(policy)
    if rand_ramp_s(policy) != policy.ramp_s:  # likewise
        recipe["rand_ramp_s"] = float(rand_ramp_s(policy))
    text = json.dumps(recipe, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def layout_timeout_s(policy: ProbePolicy, slack_s: float) -> float:
    """Timeout of the one-off layout write: ``slack_s`` plus the region at the slowest
    write rate the policy still wants a figure from (``layout_min_mb_s``)."""
    return slack_s + policy.size_mib * 1.048576 / policy.layout_min_mb_s


def policy_jobs(policy: ProbePolicy) -> tuple[str, ...]:
    """The jobs a probe runs under ``policy`` (seq_write and rand_read can be switched off)."""
    on = {"seq_write": policy.seq_write, "rand_read": policy.rand_read}
    return tuple(j for j in JOBS if on.get(j, True))


def fio_argv(policy: ProbePolicy, jobs: Sequence[str] = JOBS, fio: str = "fio") -> list[str]:
    """One fio invocation running ``jobs`` one after the other on the probe file, inside
    the private directory (:func:`in_probe_dir`).

    seq_write preconditions the region (see ``--overwrite``), so it comes first. The pipeline
    runs the recipe's jobs in the first round; a confirmation re-probe may name a subset
    (``jobs``, verdict.confirm.confirm_jobs), which reads what an earlier seq_write left
    behind. Should that file be
    gone, fio lays it out again before any read job starts, so reads never hit never-written
    blocks; the layout time is then extra to :func:`probe_duration_s`.
    """
    _check_policy(policy)
    jobs = _check_jobs(jobs)
    if not fio or fio.startswith("-") or any(c in fio for c in "\0\n"):
        raise ConfigError(f"invalid fio command {fio!r}")
    argv = [
        fio,
        # Machine-readable result; json+ adds the completion-latency bins from which the
        # fraction of I/Os >= 100 ms is counted exactly instead of guessed from percentiles.
        "--output-format=json+",
        # No progress lines: if the transport ever allocates a tty, ETA lines would otherwise
        # be interleaved with the JSON on stdout.
        "--eta=never",
        # The kernel's clock, not the CPU's TSC: fio then skips its TSC calibration at
        # start, ~70 ms of every invocation (2.16-2.17 s -> 2.09-2.11 s for the triage's two
        # 0.75 s jobs, 8 runs each, 2026-11-26); a vDSO clock read per I/O costs nothing
        # the figures show.
        "--clocksource=clock_gettime",
        # One file in the target filesystem, by a constant name relative to the private
        # directory the command entered: no user-plantable path, and nothing of the
        # target reaches fio's option syntax (it cuts values at ';', '#' and ':').
        f"--filename={PROBE_FILE}",
        # Region size in bytes (no suffix, so fio's kb_base cannot change its meaning).
        f"--size={policy.size_mib * 1024 * 1024}",
        # O_DIRECT: measure the device, not the page cache that absorbs writes and serves
        # re-reads (seeds 000/004: buffered figures made writes look 3x faster than reads).
        "--direct=1",
        # Drop any cached pages of the file before each job (fio's layout writes are
        # buffered); with direct=1 this keeps stale cache out of the first reads too.
        "--invalidate=1",
        # Asynchronous engine so iodepth really keeps that many I/Os in flight (the sync
        # engines silently cap the queue depth at 1, seed 000).
        f"--ioengine={policy.ioengine}",
        # Queue depth that fills an NVMe queue; QD1 under-reports NVMe badly (seed 000).
        f"--iodepth={policy.iodepth}",
        # Fixed wall time per job whatever the device speed, so a slow node stretches the
        # probe only by the drain of its in-flight I/O (measured: a 1 s job whose reads
        # took 2-3 s each ended after 2.9 s); sequential jobs wrap around the region.
        "--time_based",
        # Warm-up discarded from the figures (queue fill, first-touch effects).
        f"--ramp_time={_ms(policy.ramp_s)}",
        f"--runtime={_ms(policy.runtime_s)}",
        # Fresh random offsets each run: a re-probe is an independent sample, not a replay
        # of offsets the drive may still hold in its internal read cache.
        "--randrepeat=0",
        # Do not track which blocks were already read: time-based random reads need no
        # full coverage, and the map costs memory and CPU for large regions.
        "--norandommap",
        # Only the percentiles the verdict uses (plus 90/99.99 for humans reading raw JSON).
        "--percentile_list=50:90:99:99.9:99.99",
        # No --group_reporting: each stonewalled job is its own group anyway, and keeping
        # per-job reports makes the job name the key the parser looks up.
    ]
    for i, job in enumerate(jobs):
        argv.append(f"--name={job}")
        if i > 0:
            # Wait for the previous job to finish: jobs must not overlap, or reads would be
            # measured while writes compete for the same device.
            argv.append("--stonewall")
        argv.extend(_JOB_OPTIONS[job](policy))
    return in_probe_dir(policy, argv)


def layout_argv(policy: ProbePolicy, fio: str = "fio") -> list[str]:
    """Write the probe region once, outside the measured run (first probe on a node).

    Kept separate so the timed run and the iostat window beside it cover only the jobs:
    fio's layout is buffered and fsynced, and took 9 s for 1 GiB on the loop-backed VM.
    """
    # Only seq_write carries --overwrite=1, the option that makes the layout write real data.
    # --create_only: run fio's setup phase (the layout) and no job.
    # fio has no file-mode option: the layout creates the probe file, and every command in
    # the private directory runs under umask 077 (mode 0600), in a directory of mode 0700.
    return [*fio_argv(policy, ("seq_write",), fio), "--create_only=1"]


def seq_iodepth(policy: ProbePolicy) -> int:
    """The sequential jobs' queue depth: ``seq_iodepth``, else the probe's ``iodepth``."""
    return policy.seq_iodepth or policy.iodepth


def _seq_depth(policy: ProbePolicy) -> list[str]:
    """The job's own --iodepth when the sequential jobs have theirs (fewer queued reads for
    a slow reader to drain after a short job); parse_fio reads a job's option first."""
    depth = seq_iodepth(policy)
    return [] if depth == policy.iodepth else [f"--iodepth={depth}"]


def _seq_write(policy: ProbePolicy) -> list[str]:
    return [
        "--rw=write",
        f"--bs={policy.seq_bs}",
        *_seq_depth(policy),
        # Lay the whole file out with real data before the job starts (and make later
        # writes true overwrites): reads that follow then read written blocks, never the
        # unwritten extents an SSD or ext4 answers without touching flash.
        "--overwrite=1",
    ]


def _seq_read(policy: ProbePolicy) -> list[str]:
    return ["--rw=read", f"--bs={policy.seq_bs}", *_seq_depth(policy)]


def rand_ramp_s(policy: ProbePolicy) -> float:
    """The random read's warm-up: ``rand_ramp_s``, else the probe's ``ramp_s``."""
    return policy.rand_ramp_s if policy.rand_ramp_s >= 0 else policy.ramp_s


def _rand_read(policy: ProbePolicy) -> list[str]:
    ramp = rand_ramp_s(policy)
    own = [] if ramp == policy.ramp_s else [f"--ramp_time={_ms(ramp)}"]  # the job's own
    return ["--rw=randread", f"--bs={policy.rand_bs}", *own]


_JOB_OPTIONS = {"seq_write": _seq_write, "seq_read": _seq_read, "rand_read": _rand_read}


def probe_duration_s(policy: ProbePolicy, jobs: Sequence[str] = JOBS) -> float:
    """Expected wall seconds of :func:`fio_argv`'s run: ramp + runtime for each job.

    Excludes fio's one-off file layout (a first probe writes ``size_mib`` buffered and
    fsyncs it before starting: about size / write bandwidth on NVMe, but 9-30 s for 1 GiB
    on the loop-backed test VM where the fsync lands on the VM disk) and the drain of
    in-flight I/O at the end, so give timeouts generous slack.
    """
    ramps = [rand_ramp_s(policy) if j == "rand_read" else policy.ramp_s for j in _check_jobs(jobs)]
    return sum(ramps) + len(ramps) * policy.runtime_s


def _strerror(code: int) -> str:
    """errno's text; a code no C int holds (a corrupt report: fuzzing found 2**31) is named
    as such instead of raising OverflowError."""
    try:
        return os.strerror(code)
    except (OverflowError, ValueError):
        return "not an errno"


def _check_jobs(jobs: Sequence[str]) -> tuple[str, ...]:
    names = tuple(jobs)
    if isinstance(jobs, str) or not names:
        raise ConfigError("fio jobs must be a non-empty list of job names")
    unknown = [j for j in names if j not in JOBS]
    if unknown:
        raise ConfigError(f"unknown fio job {unknown[0]!r} (known: {', '.join(JOBS)})")
    if len(set(names)) != len(names):
        raise ConfigError("fio jobs must not repeat")
    return names


def _check_policy(p: ProbePolicy) -> None:
    """Reject values that would make a wrong or unsafe fio command line."""
    if p.ioengine not in _ENGINES:
        raise ConfigError(f"probe.ioengine must be one of {', '.join(_ENGINES)}")
    for key, bs in (("seq_bs", p.seq_bs), ("rand_bs", p.rand_bs)):
        if not _BS_RE.match(bs):
            raise ConfigError(f"probe.{key} {bs!r} is not a block size like 4k or 1M")
    bad = target_problem(p.target)
    if bad:
        raise ConfigError(f"probe.target {bad}")
    if p.size_mib <= 0 or p.iodepth < 1 or p.seq_iodepth < 0 or p.runtime_s <= 0 or p.ramp_s < 0:
        raise ConfigError("probe size, iodepth and runtime must be positive, ramp >= 0")


def _ms(seconds: float) -> str:
    """fio time value in whole milliseconds ('1500ms'); fio accepts the ms suffix."""
    return f"{round(seconds * 1000)}ms"


# --------------------------------------------------------------------------- parsing

_READ_RW = {"read", "randread"}
_WRITE_RW = {"write", "randwrite", "trimwrite"}


def parse_fio(text: str, node: str) -> FioRun:
    """Parse fio JSON/JSON+ output (fio 2.x and 3.x) into a :class:`FioRun`.

    Lines fio prints before or after the document ("fio: ...", "note: ...") are skipped.
    Anything unusable raises :class:`ProbeError` naming ``node``.
    """
    doc = _find_document(text, node)
    jobs = doc.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise ProbeError(node, "fio output has no jobs", text)
    version = doc.get("fio version")
    globals_ = doc.get("global options")
    gopts = globals_ if isinstance(globals_, dict) else {}
    results = tuple(_parse_job(job, gopts, node) for job in jobs)
    return FioRun(fio_version=version if isinstance(version, str) else "unknown", jobs=results)


def _find_document(text: str, node: str) -> dict[str, Any]:
    """fio's report: the first object opening at column 0 with "jobs" in it.

    Nested objects of fio's pretty-printed JSON are indented, so only column-0 braces are
    candidates; warning lines before and after the document are skipped.
    """
    decoder = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"^\{", text, re.MULTILINE)]
    if not starts:
        raise ProbeError(node, "no JSON document in fio output", text)
    first: dict[str, Any] | None = None
    for start in starts:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            if "jobs" in obj:
                return obj
            first = obj if first is None else first
    if first is not None:
        return first  # some JSON object, but no fio report: parse_fio says what is missing
    raise ProbeError(node, "fio output is not valid JSON (truncated?)", text[starts[0] :])


def _parse_job(job: Any, gopts: Mapping[str, Any], node: str) -> FioJobResult:
    if not isinstance(job, dict) or not isinstance(job.get("jobname"), str):
        raise ProbeError(node, "fio job without a jobname", json.dumps(job)[:200])
    name: str = job["jobname"]
    rw = _job_rw(job, gopts)
    side_name = _direction(rw, job)
    side = job.get(side_name)
    if not isinstance(side, dict):
        raise ProbeError(node, f"fio job {name} has no {side_name} section")
    error = _int(job.get("error", 0), node, f"job {name} error")
    runtime_ms = _num(_need(side, "runtime", node, name), node, f"job {name} runtime")
    iops = _num(_need(side, "iops", node, name), node, f"job {name} iops")
    bw = _bandwidth(side, node, name)
    clat, scale = _clat(side, node, name)
    total = side.get("total_ios", clat.get("N"))
    if total is None:
        raise ProbeError(node, f"fio job {name} has neither total_ios nor clat N")
    total_ios = _int(total, node, f"job {name} total_ios")
    if total_ios == 0 and (runtime_ms <= 0 or error):
        # Failed, not slow: no figures at all (a stuck device still has runtime, error 0).
        why = f"error {error}: {_strerror(error)}" if error else "no runtime, no I/O"
        verb = "did not run" if runtime_ms <= 0 else "failed"
        raise ProbeError(node, f"fio job {name} {verb} ({why})")
    bins = _bins(clat.get("bins"), scale, node, name)
    pct = _percentiles(clat.get("percentile"), scale, node, name)
    if total_ios == 0:
        # Nothing completed within the run: every I/O in flight took longer than the run.
        stuck = runtime_ms * 1e6
        lat = {50.0: stuck, 99.0: stuck, 99.9: stuck}
        mean = stuck
        slow = 1.0 if stuck >= SLOW_NS else 0.0
    else:
        lat = {p: _quantile(p, pct, bins, node, name) for p in (50.0, 99.0, 99.9)}
        mean = _num(clat.get("mean", 0.0), node, f"job {name} clat mean") * scale
        slow = _slow_fraction(bins) if bins else _slow_from_percentiles(pct)
    depth = _iodepth(job, gopts)
    stall = stall_mode(bins, depth) if total_ios else None
    return FioJobResult(
        name=name,
        rw=rw,
        bw_bytes=bw,
        iops=iops,
        total_ios=total_ios,
        runtime_ms=runtime_ms,
        lat_mean_ns=mean,
        lat_p50_ns=lat[50.0],
        lat_p99_ns=lat[99.0],
        lat_p999_ns=lat[99.9],
        slow_fraction=slow,
        error=error,
        iodepth=depth,
        stall_ios=stall.ios if stall else 0,
        stall_ns=stall.median_ns if stall else 0.0,
    )


def _iodepth(job: Mapping[str, Any], gopts: Mapping[str, Any]) -> int:
    """fio's iodepth= for the job (its own option, else the global one), 0 when absent."""
    opts = job.get("job options")
    for source in (opts if isinstance(opts, dict) else {}, gopts):
        raw = source.get("iodepth")
        if isinstance(raw, str) and raw.isdigit():
            return int(raw)
    return 0


def _job_rw(job: Mapping[str, Any], gopts: Mapping[str, Any]) -> str:
    """fio's rw= for the job: its own option, else the global one, else ''."""
    opts = job.get("job options")
    for source in (opts if isinstance(opts, dict) else {}, gopts):
        rw = source.get("rw", source.get("readwrite"))
        if isinstance(rw, str) and rw:
            return rw
    return ""


def _direction(rw: str, job: Mapping[str, Any]) -> str:
    """'read' or 'write': the side matching rw; mixed or unknown rw -> side with more I/O."""
    if rw in _READ_RW:
        return "read"
    if rw in _WRITE_RW:
        return "write"

    def ios(side: str) -> float:
        d = job.get(side)
        if not isinstance(d, dict):
            return -1.0
        v = d.get("total_ios", d.get("io_bytes", 0))
        return float(v) if isinstance(v, int | float) else 0.0

    return "read" if ios("read") >= ios("write") else "write"


def _bandwidth(side: Mapping[str, Any], node: str, name: str) -> float:
    """Bytes/s: fio 3 ``bw_bytes``, else fio 2's ``bw`` (KiB/s)."""
    if "bw_bytes" in side:
        return _num(side["bw_bytes"], node, f"job {name} bw_bytes")
    if "bw" in side:
        return _num(side["bw"], node, f"job {name} bw") * 1024.0
    raise ProbeError(node, f"fio job {name} has no bandwidth (bw_bytes/bw)")


def _clat(side: Mapping[str, Any], node: str, name: str) -> tuple[dict[str, Any], float]:
    """Completion-latency block and its factor to ns (fio 3 ``clat_ns``; fio 2 ``clat`` us)."""
    for key, scale in (("clat_ns", 1.0), ("clat", 1000.0)):
        block = side.get(key)
        if isinstance(block, dict):
            return block, scale
    raise ProbeError(node, f"fio job {name} has no completion latency (clat_ns/clat)")


def _bins(raw: Any, scale: float, node: str, name: str) -> list[tuple[float, int]]:
    """json+ latency histogram as sorted (latency ns, count) pairs.

    fio >= 3.0 keys each bin by its latency in ns. fio 2.x keyed bins by bucket index and
    added FIO_IO_U_PLAT_BITS/FIO_IO_U_PLAT_VAL; the index is mapped to the bucket's
    latency (us) with fio's own plat_idx_to_val. Plain keyed-by-value usec bins also work.
    """
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise ProbeError(node, f"fio job {name}: latency bins are not an object")
    indexed = "FIO_IO_U_PLAT_BITS" in raw
    bits = _int(raw.get("FIO_IO_U_PLAT_BITS", 6), node, "FIO_IO_U_PLAT_BITS")
    out: list[tuple[float, int]] = []
    for key, count in raw.items():
        if key.startswith("FIO_"):
            continue
        try:
            value = _plat_idx_to_val(int(key), bits) if indexed else float(key)
        except ValueError:
            raise ProbeError(node, f"fio job {name}: bad latency bin key {key!r}") from None
        n = _int(count, node, f"job {name} bin count")
        if n < 0:  # a count of I/Os: a negative one is a damaged document, not a figure
            raise ProbeError(node, f"fio job {name}: negative latency bin count {n}")
        if n:
            out.append((value * scale, n))
    return sorted(out)


def _plat_idx_to_val(idx: int, bits: int) -> float:
    """fio's stat.c plat_idx_to_val: the middle of histogram bucket ``idx``."""
    val = 1 << bits
    if idx < (val << 1):
        return float(idx)
    error_bits = (idx >> bits) - 1
    base = 1 << (error_bits + bits)
    k = idx % val
    return base + (k + 0.5) * (1 << error_bits)


def _percentiles(raw: Any, scale: float, node: str, name: str) -> dict[float, float]:
    """{percentile: latency ns} from fio's ``percentile`` object ('99.000000': value)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProbeError(node, f"fio job {name}: percentiles are not an object")
    out: dict[float, float] = {}
    for key, value in raw.items():
        try:
            p = float(key)
        except ValueError:
            raise ProbeError(node, f"fio job {name}: bad percentile key {key!r}") from None
        out[p] = _num(value, node, f"job {name} percentile {key}") * scale
    return out


def _quantile(
    p: float, pct: Mapping[float, float], bins: list[tuple[float, int]], node: str, name: str
) -> float:
    """Latency at percentile ``p``: fio's own figure, else computed from the bins."""
    for key, value in pct.items():
        if math.isclose(key, p, abs_tol=1e-6):
            return value
    if bins:
        return bin_at_rank(bins, math.ceil(sum(n for _, n in bins) * p / 100.0))
    raise ProbeError(node, f"fio job {name} has no p{p:g} latency (no percentiles, no bins)")


def _slow_fraction(bins: list[tuple[float, int]]) -> float:
    """Exact share of I/Os whose completion latency bucket is >= 100 ms.

    fio's buckets are ~1.6% wide (FIO_IO_U_PLAT_BITS=6), so the edge is that precise.
    """
    total = sum(n for _, n in bins)
    slow = sum(n for value, n in bins if value >= SLOW_NS)
    return slow / total if total else 0.0


def _slow_from_percentiles(pct: Mapping[float, float]) -> float:
    """Lower bound of the slow share when only percentiles exist (plain json output).

    If the p-th percentile is >= 100 ms then at least (100 - p)% of I/Os are that slow; the
    smallest such p gives the tightest bound. A lower bound never overstates slowness, so
    without bins a node can only look healthier than it is, never sicker.
    """
    slow_ps = [p for p, v in pct.items() if v >= SLOW_NS]
    return (100.0 - min(slow_ps)) / 100.0 if slow_ps else 0.0


def _need(side: Mapping[str, Any], key: str, node: str, name: str) -> Any:
    if key not in side:
        raise ProbeError(node, f"fio job {name} lacks {key!r}")
    return side[key]


def _num(value: Any, node: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProbeError(node, f"fio {what} is not a number", repr(value))
    return float(value)


def _int(value: Any, node: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProbeError(node, f"fio {what} is not a number", repr(value))
    if isinstance(value, float) and not math.isfinite(value):  # int() would raise
        raise ProbeError(node, f"fio {what} is not finite", repr(value))
    return int(value)
