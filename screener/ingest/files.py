"""Read output files and tell their kind by content (never by file name)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from screener.errors import ConfigError, ProbeError
from screener.ingest.fiojobs import parse_fio_jobs
from screener.ingest.ior import CSV_COLUMNS, parse_ior_csv, parse_ior_json, parse_ior_text
from screener.ingest.results import ParsedFile, SourceKind

MAX_BYTES = 64 << 20  # an IOR/fio report is kilobytes; refuse to slurp a wrong huge file


class Parser(Protocol):
    """Turns one output's text into figures; ProbeError (naming ``name``) if unusable."""

    def __call__(self, text: str, name: str, first_rank: int) -> ParsedFile: ...


def _is_ior_text(head: str) -> bool:
    return head.startswith("IOR-") or "\nIOR-" in head


def _is_ior_csv(head: str) -> bool:
    first = head.splitlines()[0] if head else ""
    return tuple(c.strip() for c in first.split(",")) == CSV_COLUMNS


def _is_fio(head: str) -> bool:
    return '"fio version"' in head


def _is_ior_json(head: str) -> bool:
    return head.startswith("{") and '"Version"' in head and '"tests"' in head


# The formats ingest reads: (kind, "is it this?" on the first 4 KiB, parser). A new format
# (e.g. BenchFS's per-op timing log, docs/ingest.md) is one entry here, a SourceKind and
# a migration widening job_results.source; nothing else changes.
FORMATS: tuple[tuple[SourceKind, Callable[[str], bool], Parser], ...] = (
    (SourceKind.IOR_TEXT, _is_ior_text, lambda t, n, _r: parse_ior_text(t, n)),
    (SourceKind.IOR_CSV, _is_ior_csv, lambda t, n, _r: parse_ior_csv(t, n)),
    (SourceKind.FIO_JSON, _is_fio, parse_fio_jobs),
    (SourceKind.IOR_JSON, _is_ior_json, lambda t, n, _r: parse_ior_json(t, n)),
)


def _format(text: str, name: str) -> tuple[SourceKind, Parser]:
    head = text.lstrip()[:4096]
    for kind, matches, parser in FORMATS:
        if matches(head):
            return kind, parser
    raise ProbeError(name, "not an IOR text report, IOR JSON summary, IOR per-rank CSV or fio JSON")


def parse_text(text: str, name: str, first_rank: int = 0) -> ParsedFile:
    """Parse one output whose kind is told by its content."""
    return _format(text, name)[1](text, name, first_rank)


def read_text(path: Path) -> str:
    """A file's text; ConfigError (one line) if it is missing, unreadable or huge."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ConfigError(f"{path}: {size} bytes is too large for a benchmark report")
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


# What jobs/ior.sbatch and an `srun --output=fio.%j.%t.json` step leave next to the job's
# output, by job id: the epilog (or an admin) finds a job's outputs from the id alone.
_IOR_NAMES = ("ior-{job}.summary.json", "ior-{job}.ranks.csv")
_FIO_NAME = re.compile(r"fio\.(?P<job>[0-9_+]+)\.(?P<task>[0-9]{1,6})\.json")


def outputs_near(directory: Path, job_id: str) -> list[Path]:
    """The job's outputs in ``directory`` by the naming convention (docs/ingest.md): IOR's
    summary and per-rank CSV, or fio's per-task documents in task order (numeric: 2 < 10)."""
    try:
        return _outputs_near(directory, job_id)
    except OSError as exc:  # e.g. a job directory SlurmUser may not list
        raise ConfigError(f"cannot look into {directory}: {exc.strerror}") from None


def _outputs_near(directory: Path, job_id: str) -> list[Path]:
    if not directory.is_dir():
        raise ConfigError(f"--dir {directory} is not a directory")
    ior = [directory / n.format(job=job_id) for n in _IOR_NAMES]
    found = [p for p in ior if p.is_file()]
    tasks = []
    for path in directory.iterdir():
        m = _FIO_NAME.fullmatch(path.name)
        if m and m["job"] == job_id and path.is_file():
            tasks.append((int(m["task"]), path))
    if found and tasks:
        raise ConfigError(f"{directory} holds both IOR and fio outputs of job {job_id}")
    if not found and not tasks:
        raise ConfigError(
            f"no outputs of job {job_id} in {directory} (looked for ior-{job_id}.summary.json, "
            f"ior-{job_id}.ranks.csv, fio.{job_id}.<task>.json)"
        )
    numbers = sorted(t for t, _ in tasks)
    if numbers and numbers != list(range(len(numbers))):
        raise ConfigError(f"fio outputs of job {job_id} in {directory}: tasks {numbers} have gaps")
    return found or [p for _, p in sorted(tasks)]


def load_files(paths: Sequence[Path], read: Callable[[Path], str] = read_text) -> list[ParsedFile]:
    """Parse every file; fio documents are numbered on in the order given (rank offsets).
    ``read``: how to read one (the epilog passes one that checks the file's owner)."""
    parsed: list[ParsedFile] = []
    next_rank = 0
    for path in paths:
        done = parse_text(read(path), path.name, next_rank)
        if done.kind is SourceKind.FIO_JSON:
            next_rank += done.tasks or 0
        parsed.append(done)
    return parsed
