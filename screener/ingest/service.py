"""Glue for `screener ingest`: read the files, map ranks, judge, record. The epilog calls
the same function, so a hook and an admin get exactly the same result."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from screener.errors import ConfigError, SlurmError
from screener.hostlist import expand_nodeset, fold_nodes
from screener.ingest.files import load_files, read_text
from screener.ingest.judge import Figure, JobFigures, SlowNode, judge_job
from screener.ingest.layout import LayoutSource, RankLayout, block_layout
from screener.ingest.trust import Vetted
from screener.policy import Policy, database_url
from screener.store import open_store
from screener.store.jobs import IngestHead, ResultRow, SlowRow, record_ingest


@dataclass(frozen=True)
class Ingested:
    """What one ingest found (and stored, when ``ingest_id`` is set)."""

    job_id: str
    figures: JobFigures
    layout: str
    ingest_id: int | None
    held: tuple[SlowNode, ...] = ()  # in-job outliers not trusted to act: recorded only

    def records(self) -> list[dict[str, Any]]:
        """One record per node (None: the whole job), phase and iteration."""
        return [_record(f) for f in self.figures.figures]

    def as_json(self) -> dict[str, Any]:
        """The --json document."""
        return {
            "job_id": self.job_id,
            "ingest_id": self.ingest_id,
            "layout": self.layout,
            "records": self.records(),
            "in_job_slow": [{"node": s.node, "reason": s.reason} for s in self.figures.slow],
            "notes": list(self.figures.notes),
        }

    def summary_lines(self) -> list[str]:
        """What the table means, in a few lines."""
        lines = [f"in-job slow: {s.node}: {s.reason}" for s in self.figures.slow]
        judged = any(f.z is not None for f in self.figures.figures)
        if not self.figures.slow:
            lines.append("no node was an in-job outlier" if judged else "no phase was judged")
        lines += [f"note: {n}" for n in self.figures.notes]
        lines.append(
            "ratio: a node's throughput / the job's median node; whole job: median node "
            "time / slowest node time (1.00 = no node dragged the job down)"
        )
        where = f"stored as ingest {self.ingest_id}" if self.ingest_id else "not stored"
        return [*lines, f"ranks mapped: {self.layout}; {where}"]


def _record(f: Figure) -> dict[str, Any]:
    return {
        "node": f.node,
        "phase": f.phase.value,
        "iteration": f.iteration,
        "ranks": f.ranks,
        "bytes": f.bytes,
        "seconds": f.seconds,
        "throughput_bytes_s": f.throughput_bytes_s,
        "ratio": f.ratio,
        "z": f.z,
        "outlier": f.outlier,
        "source": f.source.value,
    }


def resolve_layout(
    job_id: str,
    nodes: str | None,
    ranks_per_node: int | None,
    slurm: LayoutSource | None = None,
    needed: bool = False,
) -> RankLayout | None:
    """Explicit --nodes/--ranks-per-node first, else Slurm's record of the job, else None.

    ``needed`` (the files hold per-rank data): a job Slurm no longer knows is an error
    naming the way out, rather than an ingest that can judge no node.
    """
    if nodes is not None and ranks_per_node is not None:
        return block_layout(expand_nodeset(nodes), ranks_per_node)
    if slurm is None or not needed:
        return None
    way_out = "give --nodes NODESET --ranks-per-node N"
    try:
        layout = slurm.task_layout(job_id)
    except SlurmError as exc:
        raise ConfigError(f"no task layout for job {job_id} from Slurm: {exc}; {way_out}") from None
    if layout is None:
        raise ConfigError(
            f"Slurm no longer knows job {job_id} (it forgets finished jobs after MinJobAge), "
            f"so its task layout is unknown: {way_out}"
        )
    return layout


def ingest(
    job_id: str,
    paths: Sequence[Path],
    policy: Policy,
    *,
    nodes: str | None,
    ranks_per_node: int | None,
    partition: str | None,
    observed_at: datetime,
    now: datetime,
    store_results: bool = True,
    replace: bool = False,
    slurm: LayoutSource | None = None,
    read: Callable[[Path], str] = read_text,
    trust: Callable[[JobFigures], Vetted] | None = None,
) -> Ingested:
    """Parse, map, judge and (unless told not to) record one job's outputs. ``trust`` (the
    epilog's, screener.ingest.trust): which in-job outliers may open an episode; without
    it every one does (an admin's ingest of files the admin chose)."""
    files = load_files(paths, read)
    needed = any(f.ranks for f in files)
    layout = resolve_layout(job_id, nodes, ranks_per_node, slurm, needed)
    figures = judge_job(files, layout, policy.verdict, policy.ingest)
    held: tuple[SlowNode, ...] = ()
    if trust is not None:
        vetted = trust(figures)
        figures, held = vetted.figures, vetted.held
    how = layout.how if layout else "none (no per-rank data or no layout)"
    if not store_results:
        return Ingested(job_id, figures, how, None, held)
    mapped = sorted({f.node for f in figures.figures if f.node is not None})
    head = IngestHead(
        job_id=job_id,
        partition=partition,
        nodeset=fold_nodes(mapped) if mapped else "",
        layout=how,
        files=tuple(f"{f.kind.value}:{f.name}" for f in files),
        notes=figures.notes,
        observed_at=observed_at,
    )
    rows, slow = store_rows(figures)
    url = database_url(policy)
    with open_store(url, upgrade=url.startswith("sqlite")) as store:
        ingest_id = record_ingest(store, head, rows, slow, now=now, replace=replace)
    return Ingested(job_id, figures, how, ingest_id, held)


def store_rows(figures: JobFigures) -> tuple[list[ResultRow], list[SlowRow]]:
    """The judged figures of a job as the rows store/jobs.py writes (results, slow nodes)."""
    rows = [
        ResultRow(
            f.node,
            f.phase.value,
            f.iteration,
            f.ranks,
            f.bytes,
            f.seconds,
            f.throughput_bytes_s,
            f.ratio,
            f.z,
            f.outlier,
            f.source.value,
        )
        for f in figures.figures
    ]
    return rows, [SlowRow(s.node, s.reason) for s in figures.slow]
