"""Whether a job's ingested figures may change node state (pure; issue 41, item 5).

The epilog ingests whatever directory a job names (``screener_out=``): per-rank figures
a user can write by hand. An in-job outlier opens an episode (which takes the node off
the prolog's fast path) and, with ``[ingest] drain = true``, drains it; on shared nodes
those nodes serve other users too. So figures act on a node only where they can be
trusted: the job had its nodes to itself (Slurm's ``OverSubscribe=NO``), or the node's
slowness is confirmed by the in-job iostat screener itself collected over the same job.
Otherwise they are stored as a record, with a note saying so, and act on nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass

from screener.hostlist import fold_nodes
from screener.ingest.judge import JobFigures, SlowNode
from screener.slurm.client import SlurmJob

UNTRUSTED = "figures not trusted for node state"  # starts the stored note and log line


def allocation(job: SlurmJob) -> str:
    """How the job held its nodes, in the words the note uses."""
    if job.exclusive is True:
        return "exclusive allocation"
    if job.exclusive is False:
        return "shared allocation"
    return "allocation not known to be exclusive"


def trusted(job: SlurmJob, iostat_confirmed: bool) -> tuple[bool, str]:
    """(trusted, why) for one node's ingested figures: an exclusive allocation (no other
    user's work on the node, and the user held it whole) or screener's own in-job iostat
    seeing the same node slow; an unknown exclusivity counts as shared."""
    if job.exclusive is True:
        return True, "exclusive allocation"
    if iostat_confirmed:
        return True, f"{allocation(job)}, slowness confirmed by in-job iostat"
    return False, f"{allocation(job)}, no in-job iostat confirmation"


@dataclass(frozen=True)
class Vetted:
    """A job's figures after the trust decision: ``figures.slow`` holds only the in-job
    outliers that may act (episode, drain); ``held`` the ones recorded only."""

    figures: JobFigures
    held: tuple[SlowNode, ...] = ()
    note: str | None = None  # stored with the ingest and logged; None: every figure trusted


def vet(figures: JobFigures, job: SlurmJob, confirmed: Collection[str]) -> Vetted:
    """Keep the in-job outliers ``trusted`` lets act, hold back the others; a job whose
    figures are not all trusted gets a note (figures without nodes act on nothing)."""
    if job.exclusive is True or not any(f.node is not None for f in figures.figures):
        return Vetted(figures)
    kept = tuple(s for s in figures.slow if trusted(job, s.node in confirmed)[0])
    held = tuple(s for s in figures.slow if s not in kept)
    if kept:
        note = (
            f"{UNTRUSTED} ({allocation(job)}): recorded only, except in-job slow "
            f"{fold_nodes([s.node for s in kept])} (slowness confirmed by in-job iostat)"
        )
    else:
        note = f"{UNTRUSTED} ({trusted(job, False)[1]}): recorded only"
    if held:
        note += f"; in-job slow {fold_nodes([s.node for s in held])}: no episode, no drain"
    figures = dataclasses.replace(figures, slow=kept, notes=(*figures.notes, note))
    return Vetted(figures, held, note)
