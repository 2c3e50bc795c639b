"""One job's record from ``scontrol show job -d JOBID``: nodes, task counts, output paths.

Slurm 22.05 has no ``scontrol --json`` and this site runs without accounting (no ``sacct``),
so the controller's record (kept for ``MinJobAge`` after the job ends) is what there is.
``squeue --json`` carries the same counts but lists every job; ``scontrol show job ID`` asks
for one. The multi-line form is parsed, not ``-o``: free-text fields (``Comment``,
``StdOut``, ``WorkDir``, ``Command``) sit alone on their line there, so a comment holding
spaces or ``=`` cannot be mistaken for other fields (captured samples: tests/data/slurm/).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from screener.errors import SlurmError, TransportError
from screener.hostlist import expand_nodeset
from screener.process import run_command
from screener.slurm.client import check_job_id

# Fields printed alone on a line whose value runs to the end of it (may contain spaces).
_WHOLE_LINE = ("Comment", "StdOut", "StdErr", "StdIn", "WorkDir", "Command")
# What scontrol prints on stderr for a job the controller does not (or no longer) know.
_UNKNOWN = "Invalid job id specified"
_CPU_RANGE = re.compile(r"([0-9]{1,6})(?:-([0-9]{1,6}))?")
_COUNT = re.compile(r"[0-9]{1,9}")


@dataclass(frozen=True)
class JobRecord:
    """The fields of ``scontrol show job -d`` that ingest and the epilog use."""

    job_id: str
    state: str
    partition: str
    nodes: tuple[str, ...]  # expanded NodeList, in Slurm's (sorted) order
    num_tasks: int
    tasks_per_node: int  # --ntasks-per-node, 0 when not given
    cpus_per_node: tuple[int, ...]  # from the -d detail lines, one entry per node
    std_out: str
    work_dir: str
    comment: str
    # OverSubscribe=NO: no other job may share its nodes (--exclusive; select/linear gives
    # whole nodes unless the job asked --oversubscribe of an OverSubscribe=YES partition).
    # None: the field is missing. YES/USER/MCS/OK: other jobs may share them.
    exclusive: bool | None = None


def show_job_argv(job_id: str) -> list[str]:
    """``scontrol show job -d ID`` for a validated job id."""
    return ["scontrol", "show", "job", "-d", check_job_id(job_id)]


def _fields(block: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """key -> value of one record, plus the (Nodes, CPU_IDs) pairs of its detail lines."""
    fields: dict[str, str] = {}
    details: list[tuple[str, str]] = []
    for line in block.splitlines():
        text = line.strip()
        key, _, rest = text.partition("=")
        if key in _WHOLE_LINE:
            fields[key] = rest
            continue
        pairs = dict(tok.partition("=")[::2] for tok in text.split() if "=" in tok)
        if key == "Nodes" and "CPU_IDs" in pairs:  # a -d detail line, one per node group
            details.append((pairs["Nodes"], pairs["CPU_IDs"]))
            continue
        for k, v in pairs.items():
            fields.setdefault(k, v)
    return fields, details


def _cpu_count(ids: str) -> int:
    """'0-1' -> 2, '0,2-3' -> 3."""
    total = 0
    for part in ids.split(","):
        m = _CPU_RANGE.fullmatch(part)
        if m is None:
            raise SlurmError(f"scontrol show job: unexpected CPU_IDs {ids!r}")
        total += int(m.group(2) or m.group(1)) - int(m.group(1)) + 1
    return total


def _int(fields: dict[str, str], key: str) -> int:
    raw = fields.get(key, "")
    if not _COUNT.fullmatch(raw):
        raise SlurmError(f"scontrol show job: {key}={raw!r} is not a number")
    return int(raw)


def exclusive_of(oversubscribe: str | None) -> bool | None:
    """``OverSubscribe=`` as "the job has its nodes to itself": only ``NO`` is; None when
    scontrol printed no such field (unknown, which trust treats as shared)."""
    if oversubscribe is None or not oversubscribe.strip():
        return None
    return oversubscribe.strip().upper() == "NO"


def _record(block: str) -> JobRecord:
    fields, details = _fields(block)
    nodelist = fields.get("NodeList", "(null)")
    nodes = () if nodelist in ("", "(null)") else tuple(expand_nodeset(nodelist))
    cpus: dict[str, int] = {}
    for names, ids in details:
        for node in expand_nodeset(names):
            cpus[node] = _cpu_count(ids)
    per_node = fields.get("NtasksPerN:B:S:C", "0").split(":")[0]
    return JobRecord(
        job_id=fields.get("JobId", ""),
        state=fields.get("JobState", ""),
        partition=fields.get("Partition", ""),
        nodes=nodes,
        num_tasks=_int(fields, "NumTasks"),
        tasks_per_node=int(per_node) if _COUNT.fullmatch(per_node) else 0,
        cpus_per_node=tuple(cpus[n] for n in nodes if n in cpus),
        std_out=fields.get("StdOut", ""),
        work_dir=fields.get("WorkDir", ""),
        comment=fields.get("Comment", ""),
        exclusive=exclusive_of(fields.get("OverSubscribe")),
    )


def parse_show_job(text: str, job_id: str) -> JobRecord:
    """The record of ``job_id`` in ``scontrol show job -d`` output (pure)."""
    blocks = [b for b in re.split(r"\n\s*\n", text) if b.strip().startswith("JobId=")]
    if not blocks:
        raise SlurmError(f"scontrol show job {job_id} printed no job record")
    records = [_record(b) for b in blocks]
    if len(records) == 1:
        return records[0]
    mine = [r for r in records if r.job_id == job_id]
    if len(mine) != 1:
        raise SlurmError(
            f"scontrol show job {job_id} printed {len(records)} jobs (an array or heterogeneous"
            " job): name one task or component, e.g. 1234_7 or 1234+1"
        )
    return mine[0]


def show_job(job_id: str, timeout_s: float = 20.0) -> JobRecord | None:
    """Slurm's record of ``job_id``, or None when the controller no longer knows the job."""
    argv = show_job_argv(job_id)
    try:
        res = run_command(argv, timeout=timeout_s)
    except TransportError as exc:
        raise SlurmError(f"scontrol: {exc.message}") from None
    return interpret(job_id, res.exit_status, res.stdout, res.stderr)


def interpret(job_id: str, exit_status: int, stdout: str, stderr: str) -> JobRecord | None:
    """What one ``scontrol show job`` call said (pure): the record, None for a job the
    controller does not know, SlurmError for any other failure."""
    if exit_status != 0:
        if _UNKNOWN in stderr:
            return None
        lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
        why = lines[-1] if lines else f"exit status {exit_status}"
        raise SlurmError(f"scontrol show job {job_id} failed: {why}")
    return parse_show_job(stdout, job_id)
