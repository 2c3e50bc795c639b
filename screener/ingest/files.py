"""Read output files and tell their kind by content (never by file name)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from screener.errors import ConfigError, ProbeError
from screener.ingest.fiojobs import parse_fio_jobs
from screener.ingest.ior import CSV_COLUMNS, parse_ior_csv, parse_ior_json, parse_ior_text
from screener.ingest.results import ParsedFile, SourceKind

MAX_BYTES = 64 << 20  # an IOR/fio report is kilobytes; refuse to slurp a wrong huge file


def sniff(text: str, name: str) -> SourceKind:
    """The kind of output ``text`` is, from its first lines; ProbeError if none fits."""
    head = text.lstrip()[:4096]
    if head.startswith("IOR-") or "\nIOR-" in text[:4096]:
        return SourceKind.IOR_TEXT
    first = head.splitlines()[0] if head else ""
    if tuple(c.strip() for c in first.split(",")) == CSV_COLUMNS:
        return SourceKind.IOR_CSV
    if '"fio version"' in head:
        return SourceKind.FIO_JSON
    if head.startswith("{") and '"Version"' in head and '"tests"' in head:
        return SourceKind.IOR_JSON
    raise ProbeError(name, "not an IOR text report, IOR JSON summary, IOR per-rank CSV or fio JSON")


def parse_text(text: str, name: str, first_rank: int = 0) -> ParsedFile:
    """Parse one output whose kind is sniffed from its content."""
    kind = sniff(text, name)
    if kind is SourceKind.IOR_TEXT:
        return parse_ior_text(text, name)
    if kind is SourceKind.IOR_JSON:
        return parse_ior_json(text, name)
    if kind is SourceKind.IOR_CSV:
        return parse_ior_csv(text, name)
    return parse_fio_jobs(text, name, first_rank)


def read_text(path: Path) -> str:
    """A file's text; ConfigError (one line) if it is missing, unreadable or huge."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ConfigError(f"{path}: {size} bytes is too large for a benchmark report")
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


def load_files(paths: Sequence[Path]) -> list[ParsedFile]:
    """Parse every file; fio documents are numbered on in the order given (rank offsets)."""
    parsed: list[ParsedFile] = []
    next_rank = 0
    for path in paths:
        done = parse_text(read_text(path), path.name, next_rank)
        if done.kind is SourceKind.FIO_JSON:
            next_rank += done.tasks or 0
        parsed.append(done)
    return parsed
