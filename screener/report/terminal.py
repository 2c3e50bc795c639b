"""Turn a ScreenResult into what the CLI prints: a rich table or a JSON document."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import enum
import io
import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from screener.pipeline import NodeDone, ScreenResult
from screener.probe_data import NodeProbe, Status, Verdict
from screener.units import unit_of

_STYLE = {
    Status.OK: "green",
    Status.SLOW_READ: "bold red",
    Status.SLOW_WRITE: "bold red",
    Status.DEGRADED: "yellow",
    Status.UNKNOWN: "magenta",
}


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def verdict_table(result: ScreenResult) -> Table:
    """One row per node: figures, z-score, status and the one-line reason."""
    title = f"screener run {result.run_id}" if result.run_id is not None else "screener run"
    table = Table(title=title, title_justify="left")
    for name in ("node", "read MB/s", "write MB/s", "W/R", "4k IOPS", "read p99 ms", "z(read)"):
        table.add_column(name, justify="left" if name == "node" else "right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("reason", overflow="fold", min_width=30)
    for v in result.summary.verdicts:
        table.add_row(
            v.node,
            _num(v.read_mb_s, ",.0f"),
            _num(v.write_mb_s, ",.0f"),
            _num(v.ratio, ".2f"),
            _num(v.rand_read_iops, ",.0f"),
            _num(v.read_p99_ms, ".2f"),
            _num(v.z_read, ".1f"),
            f"[{_STYLE[v.status]}]{v.status.value}[/]",
            v.reason,
        )
    return table


def summary_line(result: ScreenResult) -> str:
    """'8 nodes: 7 OK, 1 SLOW_READ; re-probed node03; 14.2 s' plus the shared-cause flag."""
    counts = Counter(v.status.value for v in result.summary.verdicts)
    parts = [f"{n} {s}" for s, n in sorted(counts.items())]
    line = f"{len(result.summary.verdicts)} nodes: {', '.join(parts)}"
    if result.reprobed:
        line += f"; re-probed {','.join(result.reprobed)}"
    if result.summary.shared_cause:
        line += f"; SHARED CAUSE: {result.summary.shared_cause_reason}"
    return line + f"; {result.wall_s:.1f} s"


def print_result(result: ScreenResult, console: Console) -> None:
    """Human output: the table, then the summary line."""
    console.print(verdict_table(result))
    console.print(summary_line(result))


def _verdict_dict(v: Verdict) -> dict[str, Any]:
    d = dataclasses.asdict(v)
    d["status"] = v.status.value
    d["signals"] = list(v.signals)
    return d


def result_json(result: ScreenResult) -> str:
    """Machine output for --json: everything in the table plus run-level fields."""
    s = result.summary
    doc = {
        "run_id": result.run_id,
        "rounds": result.rounds,
        "reprobed": list(result.reprobed),
        "wall_s": round(result.wall_s, 3),
        "shared_cause": s.shared_cause,
        "shared_cause_reason": s.shared_cause_reason,
        "peer_read_median_mb_s": s.peer_read_median_mb_s,
        "peer_rand_median_iops": s.peer_rand_median_iops,
        "notes": list(result.notes),  # planted names moved aside (screener.probe.private)
        "nodes": [
            _verdict_dict(v) | {"probe_s": round(result.probes[v.node].duration_s, 3)}
            for v in s.verdicts
        ],
    }
    return json.dumps(doc, indent=2, default=str)


def duration(seconds: float) -> str:
    """A short human duration: '45s', '12m', '3h05m', '2d04h'."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _seconds(value: float) -> str:
    """A phase length (sub-second matters) or an age (minutes and days matter)."""
    return f"{value:.2f}s" if value < 10 else duration(value)


# How a declared unit (screener/units.py) prints in a human table: (header suffix, format).
# The unit is declared on the row field; nothing is guessed from a column's name.
FORMATS: dict[str, tuple[str, Callable[[float], str]]] = {
    "MB/s": ("MB/s", lambda v: f"{v:,.1f}"),
    "bytes/s": ("MB/s", lambda v: f"{v / 1e6:,.1f}"),  # shown in MB/s, stored in bytes/s
    "s": ("", _seconds),
    "ms": ("ms", lambda v: f"{v:,.1f}"),
    "IOPS": ("IOPS", lambda v: f"{v:,.0f}"),
    "ratio": ("", lambda v: f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"),
    "count": ("", lambda v: f"{v:,.0f}"),
    "bytes": ("", lambda v: f"{v:,.0f}"),
}


def header(f: dataclasses.Field[Any]) -> str:
    """A column's title: the declared header and the unit it prints in."""
    kind, title = unit_of(f)
    suffix = FORMATS[kind][0] if kind else ""
    return f"{title} {suffix}" if suffix else title


def _cell(value: object, f: dataclasses.Field[Any] | None = None) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    kind = unit_of(f)[0] if f is not None else None
    if kind is not None and isinstance(value, int | float):
        return FORMATS[kind][1](float(value))
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, datetime):
        if f is not None and f.metadata.get("day"):
            return value.strftime("%Y-%m-%d")  # a forecast's day
        return value.strftime("%Y-%m-%d %H:%M")  # to the minute: JSON/CSV carry the rest
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def rows_table(title: str, rows: Sequence[object], columns: Sequence[str] | None = None) -> Table:
    """The store's row dataclasses as a table: ``columns`` (field names, in that order; a
    command's human view, so it fits 80 columns) or one column per field. The last column
    folds (a reason); the others keep their figures whole. JSON/CSV carry every field."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    if not rows:
        table.add_column("(no rows)")
        return table
    every = {f.name: f for f in dataclasses.fields(rows[0])}  # type: ignore[arg-type]
    fields = [every[c] for c in columns] if columns is not None else list(every.values())
    text = {f.name for i, f in enumerate(fields) if i == len(fields) - 1 or f.metadata.get("wrap")}
    for f in fields:  # words (a reason) may fold; figures and names stay whole
        table.add_column(header(f), overflow="fold", no_wrap=f.name not in text)
    for row in rows:
        cells = (_cell(getattr(row, f.name), f) for f in fields)
        table.add_row(
            *(_short(c) if f.name in text else c for f, c in zip(fields, cells, strict=True))
        )
    return table


TEXT_CELL = 40  # a reason's first words in a table; full_reasons() prints the whole


def _short(text: str) -> str:
    return text if len(text) <= TEXT_CELL else text[: TEXT_CELL - 1].rstrip() + "…"


def full_reasons(rows: Sequence[object]) -> list[str]:
    """The whole reason of each row whose status is not OK (a table shows one line of it):
    ``node03 SLOW_READ: confirmed: seq read ...``, keyed by node, else by run."""
    out = []
    for r in rows:
        status, reason = getattr(r, "status", None), getattr(r, "reason", "")
        if status is None or status is Status.OK or not reason:
            continue
        key = getattr(r, "node", None) or f"run {getattr(r, 'run_id', '?')}"
        out.append(f"{key} {status.value}: {reason}")
    return out


def _plain(value: object) -> object:
    """A field value as JSON/CSV want it: ISO 8601 times, enums by value, tuples as lists."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def rows_dicts(rows: Sequence[object]) -> list[dict[str, object]]:
    """Row dataclasses as plain dicts (field order kept)."""
    return [
        {f.name: _plain(getattr(r, f.name)) for f in dataclasses.fields(r)}  # type: ignore[arg-type]
        for r in rows
    ]


def rows_csv(rows: Sequence[object]) -> str:
    """The rows as CSV with a header line (lists joined by ';'; empty cell for None)."""
    buf = io.StringIO()
    dicts = rows_dicts(rows)
    if not dicts:
        return ""
    writer = csv.DictWriter(buf, fieldnames=list(dicts[0]), lineterminator="\n")
    writer.writeheader()
    for d in dicts:
        writer.writerow(
            {k: ";".join(map(str, v)) if isinstance(v, list) else v for k, v in d.items()}
        )
    return buf.getvalue()


def rows_json(rows: Sequence[object]) -> str:
    """The same rows as a JSON list (datetimes in ISO 8601, enums by value)."""
    return json.dumps(rows_dicts(rows), indent=2, default=str)


def local_failure(result: ScreenResult) -> str | None:
    """For a one-node (--local) screen: the reason the node could not be judged, if any."""
    (v,) = result.summary.verdicts
    return v.reason if v.status == Status.UNKNOWN else None


def any_slow(result: ScreenResult) -> bool:
    """True when at least one node ended SLOW_READ or SLOW_WRITE."""
    return any(v.status in (Status.SLOW_READ, Status.SLOW_WRITE) for v in result.summary.verdicts)


@contextlib.contextmanager
def progress(console: Console, total: int, *, enabled: bool) -> Iterator[NodeDone | None]:
    """A progress bar on a terminal; yields the per-node callback (None when off or piped)."""
    if not enabled or not console.is_terminal:
        yield None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("probing", total=total)

        def on_done(round_no: int, probe: NodeProbe) -> None:
            if round_no == 2 and bar.tasks[task].description != "re-probing suspects":
                bar.update(task, description="re-probing suspects", completed=0)
            bar.advance(task)

        yield on_done
