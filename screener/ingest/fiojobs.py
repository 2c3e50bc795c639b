"""fio's per-job JSON (``--output-format=json[+] --group_reporting=0``) as per-rank results.

Rule (stated, not guessed from job names): within one fio document the k-th job of each
direction is rank k, so a document of 4 read jobs gives ranks 0-3, and one node's
document with a write job then a read job gives one rank with both phases. Several
documents (one per srun task) are numbered on in the order given: documents before this
one hold ``first_rank`` ranks. fio reports one figure per job, so the iteration is 0.
"""

from __future__ import annotations

from collections import Counter

from screener.errors import ProbeError
from screener.ingest.results import ParsedFile, Phase, RankResult, SourceKind
from screener.probe.fio import parse_fio

# fio's rw= per job ("" = not given: fio's default is read); mixed jobs have no single phase.
_PHASES = {
    "": Phase.READ,
    "read": Phase.READ,
    "randread": Phase.READ,
    "write": Phase.WRITE,
    "randwrite": Phase.WRITE,
}


def parse_fio_jobs(text: str, name: str, first_rank: int = 0) -> ParsedFile:
    """Each fio job as a RankResult; bytes = fio's bw x runtime (fio's bw is bytes/runtime)."""
    run = parse_fio(text, name)  # validates, picks each job's direction, ProbeError if unusable
    seen: Counter[Phase] = Counter()
    results = []
    for job in run.jobs:
        phase = _PHASES.get(job.rw)
        if phase is None:
            raise ProbeError(
                name, f"fio job {job.name} is rw={job.rw}: not one read or write phase"
            )
        if job.runtime_ms <= 0:
            raise ProbeError(name, f"fio job {job.name} has no runtime")
        seconds = job.runtime_ms / 1000.0
        rank = first_rank + seen[phase]
        seen[phase] += 1
        results.append(
            RankResult(rank, phase, 0, round(job.bw_bytes * seconds), seconds, job.bw_bytes)
        )
    return ParsedFile(
        kind=SourceKind.FIO_JSON,
        name=name,
        tool_version=run.fio_version,
        ranks=tuple(results),
        tasks=max(seen.values()),
        repetitions=1,
    )
