"""The fast path's sentinel (issue 28): a fraction of a second of QD32 O_DIRECT reads of the
kept probe file, compared with the node's own usual seq read. A node that passed within
``prolog.fresh_s`` skips the full probe only while its sentinel still reads like it did.

Pure: the argv to run and the judgement of its figure. A sentinel that cannot run or be
parsed (no kept file, fio missing, unreachable) is no evidence either way: the node gets the
full probe, which says UNKNOWN if the node really cannot be probed. Never a drain.
"""

from __future__ import annotations

import hashlib
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from screener.errors import ProbeError
from screener.policy import ProbePolicy
from screener.probe.fio import (
    LEGACY_PROBE_FILE,
    PROBE_FILE,
    _check_policy,
    _ms,
    fio_argv,
    in_probe_dir,
    seq_iodepth,
)

SENTINEL_JOB = "seq_read"  # parse_fio's job name: the figure is a seq read like the probe's


def sentinel_argv(policy: ProbePolicy, runtime_s: float, fio: str = "fio") -> list[str]:
    """One short sequential read of the kept probe file, never a write, inside the private
    directory (screener.probe.private).

    The options it shares with the probe (size, engine, queue depth, block size) come
    from :func:`fio_argv`'s checks, so the figure is the probe's seq read, only shorter.
    """
    fio_argv(policy, (SENTINEL_JOB,), fio)  # the same policy and fio checks as the probe
    return in_probe_dir(
        policy,
        [
            fio,
            "--output-format=json+",  # parse_fio reads it, like the probe's
            "--eta=never",  # no progress lines mixed into the JSON
            "--clocksource=clock_gettime",  # no TSC calibration at start (~70 ms), as the probe
            # Open the file read-only and refuse to extend or lay it out: a missing or short
            # file is an error (-> full probe), never a buffered write on the fast path.
            "--readonly",
            f"--filename={PROBE_FILE}",  # relative to the private directory it entered
            f"--size={policy.size_mib * 1024 * 1024}",
            # The device, not the page cache (the kept file may still be cached).
            "--direct=1",
            f"--ioengine={policy.ioengine}",
            # The probe's sequential queue depth ([prolog] seq_iodepth): a slow reader shows
            # within a few dozen 1 MiB reads, and every queued read must complete before fio
            # exits (32 take a 15 MB/s reader ~2 s, 8 ~0.5 s).
            f"--iodepth={seq_iodepth(policy)}",
            "--rw=read",
            f"--bs={policy.seq_bs}",
            # A fixed, short wall time whatever the device speed.
            "--time_based",
            f"--runtime={_ms(runtime_s)}",
            # The job as a thread, not a forked process, and no disk-utilisation thread: fio
            # otherwise spends ~0.1 s polling the fork at start and a tick at exit (measured
            # 0.57 -> 0.45 s wall for a 0.1 s read on the loaded test VM).
            "--thread",
            "--disk_util=0",
            "--percentile_list=50:99",
            f"--name={SENTINEL_JOB}",
        ],
    )


@dataclass(frozen=True)
class SentinelResult:
    """One fast-path node's sentinel: passed (stays on the fast path) or not, and why."""

    node: str
    passed: bool
    reason: str
    read_bw: float | None = None  # bytes/s the sentinel read, when it ran
    usual_bw: float | None = None  # the node's usual seq read it was compared with
    dd_reading: float | None = None  # a dd figure taken beside a fio sentinel, to record
    # each dd figure taken beside it and not kept, why, one log line each ("node03: ...")
    dd_dropped: tuple[str, ...] = ()

    @property
    def ratio(self) -> float | None:
        """What it read / its usual, when both are known."""
        return None if self.read_bw is None or not self.usual_bw else self.read_bw / self.usual_bw


def judge_sentinel(
    node: str,
    read_bw: float | None,
    error: str | None,
    usual: Sequence[float],
    drop: float,
    reader: str = "",
) -> SentinelResult:
    """Passed when the sentinel read at least ``drop`` x the median of ``usual`` (the node's
    own baseline seq reads, same recipe; for ``reader`` "dd", its own dd readings). No
    figure, or nothing to compare it with: not passed (the full probe decides), said as
    such."""
    name = f"{reader} sentinel" if reader else "sentinel"
    level = statistics.median(usual) if usual else None
    if error is not None or read_bw is None:
        return SentinelResult(node, False, f"{name} failed ({error or 'no figure'})")
    if level is None or level <= 0:
        return SentinelResult(
            node, False, "no usual read to compare the sentinel with", read_bw=read_bw
        )
    ratio = read_bw / level
    said = f"{name} read {read_bw / 1e6:,.0f} MB/s = {ratio:.2f}x its usual {level / 1e6:,.0f} MB/s"
    if ratio < drop:
        return SentinelResult(node, False, f"{said} (< {drop:g})", read_bw, level)
    return SentinelResult(node, True, said, read_bw, level)


# ---- the dd reader (issue 22): the same kept file, without fio's fixed start cost --------
# fio spends ~0.25 s of wall and ~0.08 s of CPU per invocation before and after its reads
# (clock calibration, a 100 ms wait while its job starts); dd starts in ~1 ms. Its figure
# is not fio's (one 1 MiB read at a time, split by the block layer), so a dd sentinel is
# judged only against the node's own earlier dd readings (prolog.sentinel_reader).
DD_STATS_RE = re.compile(r"^(\d+) bytes\b.*\bcopied, ([0-9.]+(?:e[-+]?\d+)?) s\b", re.M)
# dd exits 0 when it read its count; 137 when timeout killed it after the USR1 report.
DD_EXITS = (0, 124, 137)
# After USR1, before SIGKILL: dd reports once its read in flight returns (a 1 MiB direct
# read takes 83 ms at 12 MB/s; with 0.02 s a throttled node was killed before it printed).
DD_GRACE_S = 0.2
# dd reads this many sentinel times of the node's usual rate: shorter reads measured the
# emulated cluster's throttle, not the device (after idle, 8-16 MiB at 0.6-1.7 GB/s on a
# 300 MB/s pace, 27 MiB up to 4.9 GB/s; 64 MiB 294-318 MB/s).
DD_SPAN = 2.0


def block_bytes(bs: str) -> int:
    """A policy block size ('1M', '256k', '4096') in bytes, as fio reads it (base 1024)."""
    scale = {"k": 1024, "m": 1024 * 1024}.get(bs[-1:].lower(), 1)
    return int(bs[:-1] if scale != 1 else bs) * scale


def dd_recipe(policy: ProbePolicy, runtime_s: float) -> str:
    """What a dd reading is comparable with: the same file, region, block size and time
    bound (a new one starts a new history, as a new fio recipe does)."""
    # The file's old path stays in the key: moving it into the private directory changed
    # nothing dd reads, so the nodes keep the dd readings they learned.
    old = f"{policy.target.rstrip('/')}/{LEGACY_PROBE_FILE}"
    key = f"{old}|{policy.size_mib}|{block_bytes(policy.seq_bs)}|{_ms(runtime_s)}"
    return "dd-" + hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()[:16]


def dd_sentinel_argv(policy: ProbePolicy, runtime_s: float, expect_bw: float) -> list[str]:
    """Read the kept probe file with dd: DD_SPAN x ``runtime_s`` of a node reading
    ``expect_bw`` bytes/s (its usual), for at most 2.5 times that; then report.

    Run inside the private directory (screener.probe.private); then no shell: ``env``
    and ``timeout`` exec the next word, and dd reads the constant relative name.
    """
    _check_policy(policy)  # the probe's own checks of the target, sizes and block sizes
    bs = block_bytes(policy.seq_bs)
    region = policy.size_mib * 1024 * 1024
    span = DD_SPAN * runtime_s
    count = max(4, min(region // bs, math.ceil(expect_bw * span / bs)))
    return in_probe_dir(
        policy,
        [
            "env",
            "LC_ALL=C",  # dd's report in the C locale: "N bytes (...) copied, T s, R MB/s"
            "timeout",
            "-s",
            "USR1",  # at the bound dd reports what it read so far (SIGINT may be ignored) ...
            "-k",
            f"{DD_GRACE_S:g}",  # ... and is killed just after: a slow node costs the bound
            f"{2.5 * span:g}",  # a node at half its usual pace still finishes its count
            "dd",
            f"if={PROBE_FILE}",
            "of=/dev/null",
            f"bs={bs}",
            f"count={count}",  # what a healthy node reads in DD_SPAN x runtime_s
            "iflag=direct",  # the device, not the page cache (the kept file may be cached)
        ],
    )


def parse_dd(exit_status: int, stderr: str, node: str) -> float:
    """Bytes/s from dd's last report; ProbeError when it did not report or failed."""
    found = DD_STATS_RE.findall(stderr)
    if exit_status in DD_EXITS[1:] and not found:
        raise ProbeError(node, "dd did not read its count within its time bound (no report)")
    if exit_status not in DD_EXITS or not found:
        tail = " ".join(stderr.split())[-160:]
        raise ProbeError(node, f"dd exited {exit_status} without a report: {tail or 'no output'}")
    moved, seconds = int(found[-1][0]), float(found[-1][1])
    if seconds <= 0:
        raise ProbeError(node, f"dd reported {moved} bytes in {seconds} s")
    return moved / seconds
