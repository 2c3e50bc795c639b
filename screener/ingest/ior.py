"""Parsers for IOR's three outputs: the text report, the JSON summary and the per-rank CSV.

Checked against IOR-4.1.0+dev (tests/data/ior/README.md). The text report and the JSON
summary carry only job-wide figures per phase and iteration; only the per-rank CSV
(``-O saveRankPerformanceDetailsCSV=``) says which rank was slow. Anything unusable
(truncated, corrupt, not IOR) raises ProbeError naming the file, never a traceback.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from screener.errors import ProbeError
from screener.ingest.results import ParsedFile, Phase, PhaseTotal, RankResult, SourceKind

MIB = 1 << 20
_UNITS = {"B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": MIB, "GiB": 1 << 30, "TiB": 1 << 40}
_TEXT_HEAD = re.compile(r"^IOR-(\S+): MPI Coordinated Test of Parallel I/O", re.M)
_OPTION = re.compile(r"^(?P<key>[a-zA-Z][\w /]*?)\s*: (?P<value>.*)$")
CSV_COLUMNS = (
    "access",
    "rank",
    "runtime-with-openclose",
    "runtime",
    "throughput-withopenclose",
    "throughput",
)


def _phase(value: Any, name: str, where: str) -> Phase:
    try:
        return Phase(str(value).strip().lower())
    except ValueError:
        raise ProbeError(name, f"{where}: unknown IOR access {value!r}") from None


def _number(value: Any, name: str, where: str) -> float:
    """A finite, non-negative float from text or JSON, else ProbeError."""
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise ProbeError(name, f"{where}: not a usable number", repr(value))
    return number


def _size(text: str, name: str) -> int:
    """'64 MiB' (IOR's human-readable size) in bytes."""
    parts = text.split()
    if len(parts) != 2 or parts[1] not in _UNITS:
        raise ProbeError(name, "IOR text: unreadable aggregate filesize", text)
    return round(_number(parts[0], name, "aggregate filesize") * _UNITS[parts[1]])


def _check_complete(totals: Sequence[PhaseTotal], repetitions: int | None, name: str) -> None:
    """Every phase present must have one figure per repetition, none twice."""
    keys = Counter((t.phase, t.iteration) for t in totals)
    if not keys:
        raise ProbeError(name, "IOR output has no results (did the run fail?)")
    if (dup := [k for k, n in keys.items() if n > 1]) != []:
        raise ProbeError(
            name, f"IOR output has {dup[0][0]} iteration {dup[0][1]} twice (several tests?)"
        )
    per_phase = Counter(t.phase for t in totals)
    want = repetitions if repetitions is not None else max(per_phase.values())
    for phase, count in per_phase.items():
        if count != want:
            raise ProbeError(name, f"IOR output has {count} {phase} results, expected {want}")


def parse_ior_text(text: str, name: str) -> ParsedFile:
    """IOR's text report: one PhaseTotal per line of its ``Results:`` table.

    The throughput is IOR's bw(MiB/s), i.e. aggregate size / total(s). The ``close(s)``
    column spans all ranks (last stop minus first start): it is not a slow close.
    """
    head = _TEXT_HEAD.search(text)
    if head is None:
        raise ProbeError(name, "not IOR text output (no 'IOR-<version>: MPI Coordinated' line)")
    lines = text.splitlines()
    options: dict[str, str] = {}
    for line in lines:
        if m := _OPTION.match(line):
            options.setdefault(m["key"].strip(), m["value"].strip())
    if "Finished" not in options:
        raise ProbeError(name, "IOR text output is incomplete (no 'Finished' line): truncated?")
    if "aggregate filesize" not in options:
        raise ProbeError(name, "IOR text output has no 'aggregate filesize'")
    size = _size(options["aggregate filesize"], name)
    totals: list[PhaseTotal] = []
    columns: list[str] = []  # the Results table's header while inside the table
    for line in lines:
        fields = line.split()
        if fields[:2] == ["access", "bw(MiB/s)"]:
            columns = fields
        elif not fields:
            columns = []  # a blank line ends the table
        elif columns and fields[0] in ("write", "read"):
            totals.append(_text_row(columns, fields, size, line, name))
    reps = options.get("repetitions", "")
    repetitions = int(reps) if reps.isdigit() else None
    _check_complete(totals, repetitions, name)
    tasks, tpn = options.get("tasks", ""), options.get("clients per node", "")
    return ParsedFile(
        kind=SourceKind.IOR_TEXT,
        name=name,
        tool_version=head.group(1),
        totals=tuple(totals),
        tasks=int(tasks) if tasks.isdigit() else None,
        tasks_per_node=int(tpn) if tpn.isdigit() else None,
        repetitions=repetitions,
    )


def _text_row(columns: list[str], fields: list[str], size: int, line: str, name: str) -> PhaseTotal:
    """One row of the text Results table; bw(MiB/s) = aggregate size / total(s)."""
    if len(fields) != len(columns):
        raise ProbeError(name, "IOR text: results row with missing columns (truncated?)", line)
    row = dict(zip(columns, fields, strict=True))
    if "iter" not in row or not row["iter"].isdigit() or "total(s)" not in row:
        raise ProbeError(name, "IOR text: results row without iter/total(s)", line)
    seconds = _number(row["total(s)"], name, "IOR text total(s)")
    bw = _number(row["bw(MiB/s)"], name, "IOR text bw(MiB/s)")
    return PhaseTotal(Phase(fields[0]), int(row["iter"]), size, seconds, bw * MIB)


def _load_json(text: str, name: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProbeError(
            name, f"not valid JSON (truncated?): {exc.msg} at line {exc.lineno}"
        ) from None
    if not isinstance(doc, dict):
        raise ProbeError(name, "JSON document is not an object")
    return doc


def _int_field(entry: Mapping[str, Any], key: str, name: str) -> int:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProbeError(name, f"IOR JSON summary: {key} is not a count", repr(value))
    return value


def parse_ior_json(text: str, name: str) -> ParsedFile:
    """IOR's JSON summary (``-O summaryFormat=JSON``): one PhaseTotal per entry of Results.

    Results are listed in run order without an iteration field, so the n-th entry of an
    access is iteration n (older IOR nests one list per iteration: handled the same way).
    """
    doc = _load_json(text, name)
    version, tests, summary = doc.get("Version"), doc.get("tests"), doc.get("summary")
    if not isinstance(version, str) or not isinstance(tests, list):
        raise ProbeError(name, "not an IOR JSON summary (no Version/tests)")
    if len(tests) != 1 or not isinstance(tests[0], dict):
        raise ProbeError(name, f"IOR JSON summary has {len(tests)} tests; ingest takes exactly one")
    if not isinstance(summary, list) or not summary:
        raise ProbeError(name, "IOR JSON summary has no 'summary' section: incomplete run?")
    sizes: dict[Phase, int] = {}
    tasks = tpn = reps = 0
    for entry in summary:
        if not isinstance(entry, dict):
            raise ProbeError(name, "IOR JSON summary: summary entry is not an object")
        phase = _phase(entry.get("operation"), name, "IOR JSON summary")
        tasks = _int_field(entry, "numTasks", name)
        tpn = _int_field(entry, "tasksPerNode", name)
        reps = _int_field(entry, "repetitions", name)
        sizes[phase] = (
            _int_field(entry, "blockSize", name) * _int_field(entry, "segmentCount", name) * tasks
        )
    raw = tests[0].get("Results")
    if not isinstance(raw, list):
        raise ProbeError(name, "IOR JSON summary: test has no Results list")
    nested = all(isinstance(r, list) for r in raw) and bool(raw)
    flat = [r for group in raw for r in group] if nested else raw
    seen: Counter[Phase] = Counter()
    totals: list[PhaseTotal] = []
    for result in flat:
        if not isinstance(result, dict):
            raise ProbeError(name, "IOR JSON summary: result is not an object")
        phase = _phase(result.get("access"), name, "IOR JSON result")
        if phase not in sizes:
            raise ProbeError(name, f"IOR JSON summary: {phase} results but no {phase} summary")
        seconds = _number(result.get("totalTime"), name, "IOR JSON totalTime")
        bw = _number(result.get("bwMiB"), name, "IOR JSON bwMiB")
        totals.append(PhaseTotal(phase, seen[phase], sizes[phase], seconds, bw * MIB))
        seen[phase] += 1
    _check_complete(totals, reps, name)
    return ParsedFile(
        kind=SourceKind.IOR_JSON,
        name=name,
        tool_version=version,
        totals=tuple(totals),
        tasks=tasks,
        tasks_per_node=tpn,
        repetitions=reps,
    )


def _csv_rows(text: str, name: str) -> list[tuple[int, Phase, float, float]]:
    """(rank, phase, runtime s, throughput B/s) per data line, after checking the header."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines or tuple(c.strip() for c in lines[0].split(",")) != CSV_COLUMNS:
        raise ProbeError(
            name, "not an IOR per-rank CSV (header differs)", lines[0] if lines else ""
        )
    rows = []
    for no, line in enumerate(lines[1:], start=2):
        cells = [c.strip() for c in line.split(",")]
        if tuple(cells) == CSV_COLUMNS:
            raise ProbeError(
                name,
                f"line {no}: a second header: the CSV holds several runs "
                "(remove it before each run)",
            )
        if len(cells) != len(CSV_COLUMNS):
            raise ProbeError(name, f"line {no}: {len(cells)} fields, expected 6 (truncated?)", line)
        row = dict(zip(CSV_COLUMNS, cells, strict=True))
        if not row["rank"].isdigit():
            raise ProbeError(name, f"line {no}: rank is not a number", line)
        where = f"line {no}"
        runtime = _number(row["runtime"], name, where)
        rows.append(
            (
                int(row["rank"]),
                _phase(row["access"], name, where),
                runtime,
                _number(row["throughput"], name, where),
            )
        )
    if not rows:
        raise ProbeError(name, "IOR per-rank CSV has a header but no rows")
    return rows


def parse_ior_csv(text: str, name: str) -> ParsedFile:
    """IOR's per-rank CSV: one RankResult per row, iterations inferred from the row blocks.

    The file has no iteration column: IOR writes, per iteration, one block with every rank's
    write row, then one with every rank's read row. A block ends when the access changes or
    a rank repeats; every block must hold every rank exactly once, and every phase the same
    number of blocks, or the file is truncated or not one run.
    """
    if not text.endswith("\n"):
        raise ProbeError(name, "IOR per-rank CSV does not end with a newline: truncated?")
    rows = _csv_rows(text, name)
    ranks = {r for r, *_ in rows}
    if ranks != set(range(len(ranks))):
        raise ProbeError(name, f"ranks are not 0..{len(ranks) - 1}: {sorted(ranks)[:8]}")
    blocks: list[list[tuple[int, Phase, float, float]]] = []
    for row in rows:
        block = blocks[-1] if blocks else None
        if block is None or block[0][1] != row[1] or any(r[0] == row[0] for r in block):
            blocks.append([row])
        else:
            block.append(row)
    done: Counter[Phase] = Counter()
    results: list[RankResult] = []
    for index, block in enumerate(blocks):
        phase = block[0][1]
        if len(block) != len(ranks):
            raise ProbeError(
                name,
                f"block {index + 1} ({phase}) has {len(block)} of {len(ranks)} ranks (truncated?)",
            )
        for rank, _, seconds, bw in block:
            results.append(RankResult(rank, phase, done[phase], round(bw * seconds), seconds, bw))
        done[phase] += 1
    if len(set(done.values())) != 1:
        counts = ", ".join(f"{n} {p}" for p, n in done.items())
        raise ProbeError(name, f"phases have different iteration counts ({counts}): truncated?")
    return ParsedFile(
        kind=SourceKind.IOR_CSV,
        name=name,
        tool_version="IOR",
        ranks=tuple(results),
        tasks=len(ranks),
        repetitions=next(iter(done.values())),
    )
