"""In-job iostat: start a detached, self-bounded ``iostat`` on each node (prolog), stop it
and collect its samples (epilog), and find the nodes whose reads were outliers in the job.

The node-side commands are constant ``sh -c`` scripts; every variable part (interval,
bound, file paths built from a validated job id and node name) is a positional argument.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from screener.model import IostatSample
from screener.nodes import validate_node
from screener.probe.iostat import iostat_argv
from screener.slurm.model import check_job_id

# $1 pid file, $2 output file, $3 bound in seconds, then the iostat argv. setsid -f (in the
# caller) detaches it from the SSH session; `timeout` ends it if no epilog ever comes;
# stdbuf -oL flushes each line so a stopped iostat leaves every complete interval behind.
START_SCRIPT = r"""
p="$1"; o="$2"; b="$3"; shift 3
echo $$ > "$p"
exec timeout "$b" stdbuf -oL "$@" > "$o" 2>/dev/null < /dev/null
"""
# $1 pid file, $2 output file: stop our iostat (only if the pid still is one), wait for it,
# print what it wrote, remove both files. Exit 3 when no in-job iostat was started.
STOP_SCRIPT = r"""
p="$1"; o="$2"
[ -f "$p" ] || exit 3
pid=$(cat "$p")
case "$pid" in ''|*[!0-9]*) exit 4 ;; esac
if grep -q iostat "/proc/$pid/cmdline" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    n=0
    while kill -0 "$pid" 2>/dev/null && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
fi
cat "$o" 2>/dev/null
rm -f "$p" "$o"
"""


def _paths(job_id: str, node: str, directory: str = "/tmp") -> tuple[str, str]:
    """Per job and node (emulated nodes share /tmp), from validated parts only."""
    base = f"{directory}/screener-iostat-{check_job_id(job_id)}-{validate_node(node)}"
    return f"{base}.pid", f"{base}.json"


def start_argv(
    job_id: str, node: str, interval_s: int, bound_s: int, devices: Sequence[str]
) -> list[str]:
    """Detached in-job iostat on ``node`` for at most ``bound_s`` seconds."""
    pid, out = _paths(job_id, node)
    count = max(1, bound_s // interval_s)
    return [
        "setsid",
        "-f",  # fork into a new session: survives the SSH channel closing
        "sh",
        "-c",
        START_SCRIPT,
        "screener-iostat",  # $0
        pid,
        out,
        str(bound_s),
        *iostat_argv(interval_s, count, devices),
    ]


def stop_argv(job_id: str, node: str) -> list[str]:
    """Stop the in-job iostat on ``node`` and print its JSON."""
    pid, out = _paths(job_id, node)
    return ["sh", "-c", STOP_SCRIPT, "screener-iostat-stop", pid, out]


@dataclass(frozen=True)
class NodeJobIo:
    """One node's read figures over the job."""

    node: str
    r_await_ms: float  # median over the samples that read anything
    rkb_s: float  # median read throughput over those samples
    util_pct: float
    samples: int


def summarize(node: str, samples: Sequence[IostatSample]) -> NodeJobIo | None:
    """Median figures over the intervals in which the node read; None when it never read."""
    reading = [s for s in samples if s.r_s > 0]
    if not reading:
        return None
    return NodeJobIo(
        node=node,
        r_await_ms=statistics.median(s.r_await_ms for s in reading),
        rkb_s=statistics.median(s.rkb_s for s in reading),
        util_pct=statistics.median(s.util_pct for s in reading),
        samples=len(reading),
    )


def outliers(figures: Mapping[str, NodeJobIo], factor: float, floor_ms: float) -> dict[str, str]:
    """Nodes whose read latency was ``factor`` x the job's median (and above ``floor_ms``):
    node -> reason. Needs at least 3 nodes with reads (no median of two)."""
    if len(figures) < 3:
        return {}
    median = statistics.median(f.r_await_ms for f in figures.values())
    limit = max(floor_ms, factor * median)
    return {
        n: f"in-job r_await {f.r_await_ms:.0f}ms vs job median {median:.1f}ms"
        f" (util {f.util_pct:.0f}%)"
        for n, f in figures.items()
        if f.r_await_ms > limit
    }
