"""The fast path's sentinel (issue 28): a fraction of a second of QD32 O_DIRECT reads of the
kept probe file, compared with the node's own usual seq read. A node that passed within
``prolog.fresh_s`` skips the full probe only while its sentinel still reads like it did.

Pure: the argv to run and the judgement of its figure. A sentinel that cannot run or be
parsed (no kept file, fio missing, unreachable) is no evidence either way: the node gets the
full probe, which says UNKNOWN if the node really cannot be probed. Never a drain.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from screener.policy import ProbePolicy
from screener.probe.fio import _fio_escape, _ms, fio_argv, probe_file, seq_iodepth

SENTINEL_JOB = "seq_read"  # parse_fio's job name: the figure is a seq read like the probe's


def sentinel_argv(policy: ProbePolicy, runtime_s: float, fio: str = "fio") -> list[str]:
    """One short sequential read of the kept probe file, never a write.

    The options it shares with the probe (target escaping, size, engine, queue depth, block
    size) come from :func:`fio_argv`'s checks, so the figure is the probe's seq read, only
    shorter.
    """
    fio_argv(policy, (SENTINEL_JOB,), fio)  # the same policy and fio checks as the probe
    return [
        fio,
        "--output-format=json+",  # parse_fio reads it, like the probe's
        "--eta=never",  # no progress lines mixed into the JSON
        "--clocksource=clock_gettime",  # no TSC calibration at start (~70 ms), as the probe
        # Open the file read-only and refuse to extend or lay it out: a missing or short
        # file is an error (-> full probe), never a buffered write on the fast path.
        "--readonly",
        f"--filename={_fio_escape(probe_file(policy))}",
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
    ]


@dataclass(frozen=True)
class SentinelResult:
    """One fast-path node's sentinel: passed (stays on the fast path) or not, and why."""

    node: str
    passed: bool
    reason: str
    read_bw: float | None = None  # bytes/s the sentinel read, when it ran
    usual_bw: float | None = None  # the node's usual seq read it was compared with

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
) -> SentinelResult:
    """Passed when the sentinel read at least ``drop`` x the median of ``usual`` (the node's
    own baseline seq reads, same recipe). No figure, or nothing to compare it with: not
    passed (the full probe decides), said as such."""
    level = statistics.median(usual) if usual else None
    if error is not None or read_bw is None:
        return SentinelResult(node, False, f"sentinel failed ({error or 'no figure'})")
    if level is None or level <= 0:
        return SentinelResult(
            node, False, "no usual read to compare the sentinel with", read_bw=read_bw
        )
    ratio = read_bw / level
    said = (
        f"sentinel read {read_bw / 1e6:,.0f} MB/s = {ratio:.2f}x its usual {level / 1e6:,.0f} MB/s"
    )
    if ratio < drop:
        return SentinelResult(node, False, f"{said} (< {drop:g})", read_bw, level)
    return SentinelResult(node, True, said, read_bw, level)
