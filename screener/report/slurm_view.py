"""`screener nodes --slurm`: Slurm's whole view beside screener's (issue 26). Every node Slurm
lists (in the partition asked for) gets a row, with Slurm's state and reason, screener's
last verdict and its age, and a note where that is the truth: never probed, drained by
someone else, or a node screener knows that Slurm no longer lists. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from screener.slurm.client import SlurmNode
from screener.store.query_rows import NodeRow

NEVER = "never probed"
OTHERS = "drained by someone else"
GONE = "not in Slurm"


def with_slurm(
    rows: Sequence[NodeRow], slurm: Sequence[SlurmNode], tag: str, partition: str = ""
) -> list[NodeRow]:
    """Screener's rows joined with Slurm's nodes, in Slurm's order, then the ones it lacks."""
    ours = {r.node: r for r in rows}
    listed = [n for n in slurm if not partition or partition in n.partitions]
    out: list[NodeRow] = []
    for n in listed:
        row = ours.get(n.name) or NodeRow(
            node=n.name, status=None, reason="", run_id=None, read_mb_s=None, write_mb_s=None,
            ratio=None, read_p99_ms=None, last_probe_at=None, age_s=None,
            drained_by_screener=False, drained_at=None, drain_reason=None,
        )  # fmt: skip
        notes = []
        if row.status is None:
            notes.append(NEVER)
        if n.drained and not n.reason.startswith(tag):
            notes.append(OTHERS)
        out.append(
            dataclasses.replace(
                row,
                slurm_state="+".join(sorted(n.states)),
                slurm_reason=n.reason or None,
                note=", ".join(notes),
            )
        )
    names = {n.name for n in slurm}
    if not partition:  # a partition filter says nothing of nodes outside it
        out += [dataclasses.replace(r, note=GONE) for r in rows if r.node not in names]
    return out
