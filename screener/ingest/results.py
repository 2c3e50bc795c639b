"""Plain data the ingest parsers produce: per-rank timings and job-wide phase figures."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Phase(enum.StrEnum):
    """An I/O phase of a benchmark run."""

    WRITE = "write"
    READ = "read"


class SourceKind(enum.StrEnum):
    """Which kind of file a figure came from (stored with every result row)."""

    IOR_TEXT = "ior_text"  # IOR's default stdout report: job-wide figures per phase/iteration
    IOR_JSON = "ior_json"  # -O summaryFormat=JSON: the same, as JSON
    IOR_CSV = "ior_csv"  # -O saveRankPerformanceDetailsCSV=: one row per rank, phase, iteration
    FIO_JSON = "fio_json"  # fio --output-format=json --group_reporting=0: one job = one rank


@dataclass(frozen=True)
class RankResult:
    """One rank's figures for one phase of one iteration (what attributes a slow rank)."""

    rank: int
    phase: Phase
    iteration: int
    bytes: int  # bytes this rank moved in the phase
    seconds: float  # transfer time (IOR: without open/close; fio: job runtime)
    throughput_bytes_s: float


@dataclass(frozen=True)
class PhaseTotal:
    """A job-wide figure for one phase of one iteration (IOR's own aggregate line).

    IOR measures it across ranks (last stop minus first start), so one slow rank drags it.
    """

    phase: Phase
    iteration: int
    bytes: int
    seconds: float
    throughput_bytes_s: float


@dataclass(frozen=True)
class ParsedFile:
    """What one output file holds: per-rank results and/or job-wide totals."""

    kind: SourceKind
    name: str  # file name, for messages
    tool_version: str
    ranks: tuple[RankResult, ...] = ()
    totals: tuple[PhaseTotal, ...] = ()
    tasks: int | None = None  # number of ranks the tool reports, when it says
    tasks_per_node: int | None = None
    repetitions: int | None = None
