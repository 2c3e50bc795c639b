"""In-job iostat: start a detached, self-bounded ``iostat`` on each node (prolog), stop it
and collect its samples (epilog), and find the nodes whose reads were outliers in the job.

The node-side commands are constant ``sh -c`` scripts; every variable part (interval,
bound, the private directory named from a validated job id and node name) is a positional
argument.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from screener.hostlist import validate_node
from screener.probe.iostat import iostat_argv
from screener.probe.private import FUNCS, INJOB_PARENT
from screener.probe_data import IostatSample
from screener.slurm.client import check_job_id

# $1 the private parent (/tmp/.screener, claimed as screener.probe.private does: a planted
# name there is moved aside and named on stdout), $2 this job's and node's directory name
# in it, $3 bound in seconds, then the iostat argv. Inside the parent (0700, ours) nobody
# else can create a name, so the job's directory cannot be pre-empted; a stale one of an
# earlier attempt of the same job is ours and replaced. The directory is made before
# detaching (a failure is this command's exit status). The detached part enters it again
# by the parent's checked inode, with set -C creating pid and out exclusively.
# setsid -f detaches the monitor from the SSH session; `timeout` ends it if no epilog ever
# comes; stdbuf -oL flushes each line so a stopped iostat leaves every complete interval.
_MONITOR = (
    FUNCS
    + r"""
set -C
enter "$1" && cd -- "$2" && ours . || exit 5
b="$3"; shift 3
echo $$ > pid || exit 5
exec timeout "$b" stdbuf -oL "$@" > out 2>/dev/null < /dev/null
"""
)
# $1 the detached monitor's script (_MONITOR: the same functions, so it checks again what
# it enters), then the parent, the name, the bound and the iostat argv as above.
START_SCRIPT = (
    FUNCS
    + r"""
m="$1"; shift
umask 077
claim "$1" >&2 || exit 5
rm -rf -- "$2"
mkdir -m 0700 -- "$2" || exit 5
exec setsid -f sh -c "$m" screener-iostat "$@"
"""
)
# $1 the private parent, $2 the job's directory in it: only if both are ours (a real
# directory, not a link, owned by this user, mode 0700), stop our iostat (only if the pid
# still is one), wait for it, print what it wrote, remove it.
# Exit 3: no in-job iostat was started; 6: the name is someone else's (left alone);
# 7: started, but the monitor had not even begun (a job of a moment): no sample.
STOP_SCRIPT = (
    FUNCS
    + r"""
[ -e "$1" ] || [ -L "$1" ] || exit 3
enter "$1" || exit 6
[ -e "$2" ] || [ -L "$2" ] || exit 3
ours "$2" || exit 6
d="$2"
[ -f "$d/pid" ] || { rm -rf -- "$d"; exit 7; }
pid=$(cat "$d/pid")
case "$pid" in ''|*[!0-9]*) exit 4 ;; esac
if grep -q iostat "/proc/$pid/cmdline" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    n=0
    while kill -0 "$pid" 2>/dev/null && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
fi
cat "$d/out" 2>/dev/null
rm -rf -- "$d"
"""
)
NOT_STARTED = 3  # STOP_SCRIPT's exit when the prolog started nothing on the node
NOT_OURS = 6  # STOP_SCRIPT's exit when the directory's name was taken by someone else
NOT_BEGUN = 7  # STOP_SCRIPT's exit when the monitor was started but had not begun


def private_dir(job_id: str, node: str, directory: str = INJOB_PARENT) -> str:
    """Per job and node (emulated nodes share /tmp), from validated parts only, inside
    screener's private parent (screener.probe.private)."""
    return f"{directory}/{job_dir(job_id, node)}"


def job_dir(job_id: str, node: str) -> str:
    """The job's and node's directory name inside the private parent."""
    return f"iostat-{check_job_id(job_id)}-{validate_node(node)}"


def start_argv(
    job_id: str, node: str, interval_s: int, bound_s: int, devices: Sequence[str]
) -> list[str]:
    """Detached in-job iostat on ``node`` for at most ``bound_s`` seconds."""
    count = max(1, bound_s // interval_s)
    return [
        "sh",
        "-c",
        START_SCRIPT,
        "screener-iostat",  # $0
        _MONITOR,
        INJOB_PARENT,
        job_dir(job_id, node),
        str(bound_s),
        *iostat_argv(interval_s, count, devices),
    ]


def stop_argv(job_id: str, node: str) -> list[str]:
    """Stop the in-job iostat on ``node`` and print its JSON."""
    return ["sh", "-c", STOP_SCRIPT, "screener-iostat-stop", INJOB_PARENT, job_dir(job_id, node)]


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


MIN_COMPARED = 3  # nodes that read in enough intervals: no median of two


def compared(figures: Mapping[str, NodeJobIo], min_samples: int = 1) -> int:
    """How many nodes ``outliers`` would judge (they read in ``min_samples`` intervals)."""
    return sum(1 for f in figures.values() if f.samples >= min_samples)


def outliers(
    figures: Mapping[str, NodeJobIo], factor: float, floor_ms: float, min_samples: int = 1
) -> dict[str, str]:
    """Nodes whose read latency was ``factor`` x the job's median (and above ``floor_ms``):
    node -> reason. Only nodes that read in at least ``min_samples`` intervals are judged
    (one noisy interval is no evidence), and at least 3 of them (no median of two)."""
    figures = {n: f for n, f in figures.items() if f.samples >= min_samples}
    if len(figures) < MIN_COMPARED:
        return {}
    median = statistics.median(f.r_await_ms for f in figures.values())
    limit = max(floor_ms, factor * median)
    return {
        n: f"in-job r_await {f.r_await_ms:.0f}ms vs job median {median:.1f}ms"
        f" (util {f.util_pct:.0f}%, {f.samples} samples)"
        for n, f in figures.items()
        if f.r_await_ms > limit
    }
