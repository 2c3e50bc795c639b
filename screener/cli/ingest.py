"""After the job: `screener ingest JOBID FILE...` and `screener accuracy`."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from screener.cli.common import Subparsers, job_id_arg, parse_duration
from screener.errors import ConfigError
from screener.policy import load_policy

if TYPE_CHECKING:
    from screener.ingest.service import Ingested
    from screener.verdict.trend_score import NodeScore, TrendScore

_PARTITION = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_RANKS_PER_NODE = 65_536
MAX_RANKS = 4_000_000  # nodes x ranks per node: the layout is one entry per rank
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
RULE_NOTE = (
    "a node a live rule drained never ran the job: counted as drained, never scored; a"
    " shadowed rule drains nobody, so its nodes run the job and are scored"
)

TREND_NOTE = (
    "trend (shadow, scored on the sweeps, never drains): a warning is a node DECLINING at a"
    " sweep, replayed with only the sweeps up to it; caught: SLOW_READ within {horizon} of"
    " it; false: {horizon} passed without; misses: a SLOW_READ with no warning before it"
)
TREND_LINES = 10  # warnings and misses named one a line; --json lists every one


def register(sub: Subparsers) -> None:
    i = sub.add_parser("ingest", help="attribute a job's IOR/fio results to nodes, find outliers")
    i.add_argument("job_id", metavar="JOBID", help="the Slurm job the files came from")
    i.add_argument(
        "files", metavar="FILE", nargs="*", type=Path, help="IOR text/JSON/CSV or fio JSON"
    )
    i.add_argument(
        "--dir", type=Path, help="instead of FILEs: the job's outputs in DIR, found by job id"
    )
    i.add_argument(
        "--nodes", help="the job's nodes (Slurm hostlist); default: Slurm's record of the job"
    )
    i.add_argument("--ranks-per-node", type=int, help="ranks per node (block distribution)")
    i.add_argument("--partition", help="the job's partition (for `screener accuracy`)")
    i.add_argument("--observed-at", help="when the job's I/O ran (ISO 8601 with zone; default now)")
    i.add_argument("--replace", action="store_true", help="replace an earlier ingest of JOBID")
    i.add_argument("--no-store", action="store_true", help="only print, do not record")
    out = i.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON only")
    out.add_argument("--csv", action="store_true", help="print CSV only")
    i.set_defaults(handler=run_ingest, intermixed="files")  # FILEs may follow the options

    j = sub.add_parser("job", help="a job's ingested figures, per node and phase")
    j.add_argument("job_id", metavar="JOBID")
    j.add_argument("--json", action="store_true")
    j.set_defaults(handler=run_job)

    a = sub.add_parser("accuracy", help="prolog verdicts vs what screened jobs then saw")
    a.add_argument("--since", default="30d", help="window: e.g. 12h, 30d, 2w (default 30d)")
    a.add_argument(
        "--by",
        choices=["partition", "day", "job", "rule"],
        default="partition",
        help="group by partition, day or job; `rule`: each verdict rule's record, shadowed"
        " or not ([verdict] shadow)",
    )
    a.add_argument("--json", action="store_true")
    a.set_defaults(handler=run_accuracy)


def since_arg(text: str, now: datetime) -> datetime:
    """'30d' -> now minus 30 days (the one duration parser), else ConfigError."""
    return now - parse_duration(text, "--since")


def observed_arg(text: str | None, now: datetime) -> datetime:
    """--observed-at as an aware datetime (default now): from 1970 to a day from now."""
    if text is None:
        return now
    try:
        at = datetime.fromisoformat(text).astimezone(UTC)
    except (ValueError, OverflowError):  # year 1 at +23:59 or 9999 at -23:59 overflow
        raise ConfigError(f"invalid --observed-at {text[:40]!r}: use ISO 8601") from None
    if datetime.fromisoformat(text).tzinfo is None:
        raise ConfigError(f"--observed-at {text[:40]!r} needs a time zone (e.g. +00:00)")
    if not EARLIEST <= at <= now + timedelta(days=1):
        raise ConfigError(f"--observed-at {text[:40]!r} is not between 1970 and now")
    return at


def check_layout(nodes: str | None, ranks_per_node: int | None) -> None:
    """--nodes and --ranks-per-node together, and a layout of at most MAX_RANKS ranks."""
    from screener.hostlist import count_nodes

    if (nodes is None) != (ranks_per_node is None):
        raise ConfigError("give --nodes and --ranks-per-node together")
    if nodes is None or ranks_per_node is None:
        return
    if not 1 <= ranks_per_node <= MAX_RANKS_PER_NODE:
        got = str(ranks_per_node)[:24]
        raise ConfigError(f"--ranks-per-node must be within 1..{MAX_RANKS_PER_NODE}, got {got}")
    if count_nodes(nodes) * ranks_per_node > MAX_RANKS:
        raise ConfigError(f"--nodes x --ranks-per-node is more than {MAX_RANKS:,} ranks")


def run_ingest(args: argparse.Namespace, console: Console) -> int:
    from screener.ingest.files import outputs_near
    from screener.ingest.layout import SlurmLayout
    from screener.ingest.service import ingest

    job = job_id_arg(args.job_id)
    if args.partition is not None and not _PARTITION.fullmatch(args.partition):
        raise ConfigError(f"invalid partition {args.partition!r}")
    check_layout(args.nodes, args.ranks_per_node)
    if bool(args.files) == (args.dir is not None):
        raise ConfigError("give the job's output FILEs or --dir DIR (one of the two)")
    paths = args.files or outputs_near(args.dir, job)
    now = datetime.now(UTC)
    policy = load_policy(args.config)
    done = ingest(
        job,
        paths,
        policy,
        nodes=args.nodes,
        ranks_per_node=args.ranks_per_node,
        partition=args.partition,
        observed_at=observed_arg(args.observed_at, now),
        now=now,
        store_results=not args.no_store,
        replace=args.replace,
        slurm=SlurmLayout(policy.slurm.command_timeout_s),  # used only without --nodes
    )
    if args.json:
        print(json.dumps(done.as_json(), indent=2))
    elif args.csv:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(done.records()[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(done.records())
        print(buf.getvalue(), end="")
    else:
        console.print(_table(done))
        for line in done.summary_lines():
            console.print(line, highlight=False)
    return 0


def _table(done: Ingested) -> Table:
    """One row per figure: the whole job first, then each node."""
    table = Table(title=f"job {done.job_id}: in-job figures", title_justify="left")
    for name in ("node", "phase", "iter", "ranks", "MiB", "seconds", "MB/s", "ratio", "z"):
        table.add_column(name, justify="left" if name in ("node", "phase") else "right")
    table.add_column("outlier")
    for f in done.figures.figures:
        table.add_row(
            f.node or "(whole job)",
            f.phase.value,
            str(f.iteration),
            str(f.ranks),
            f"{f.bytes / (1 << 20):,.1f}",
            f"{f.seconds:.4f}",
            f"{f.throughput_bytes_s / 1e6:,.1f}",
            "-" if f.ratio is None else f"{f.ratio:.2f}",
            "-" if f.z is None else f"{f.z:.1f}",
            "[bold red]OUTLIER[/]" if f.outlier else "",
        )
    return table


def run_job(args: argparse.Namespace, console: Console) -> int:
    from screener import app
    from screener.report import terminal
    from screener.store.jobs import ingest_notes, job_results

    job = job_id_arg(args.job_id)
    with app.open_results(load_policy(args.config)) as store:
        rows = job_results(store, job)
        notes = ingest_notes(store, [job]).get(job, ())
    if not rows:
        raise ConfigError(f"job {job} has not been ingested")
    if args.json:
        print(terminal.rows_json(rows))
    else:
        console.print(terminal.rows_table(f"job {job} (node '-' = the whole job)", rows))
        for line in notes:  # e.g. which phases were too short to judge
            console.print(f"note: {line}", highlight=False)
    return 0


def run_accuracy(args: argparse.Namespace, console: Console) -> int:
    from screener import app
    from screener.ingest.accuracy import compare_all, summarize, too_short, unknowable
    from screener.ingest.rule_accuracy import RuleRow, by_rule
    from screener.report import terminal
    from screener.store.jobs import in_job_reads, ingest_notes, prolog_verdicts
    from screener.store.trend_outcomes import trend_scores
    from screener.verdict.trend_score import summarize as summarize_trend

    now = datetime.now(UTC)
    since = since_arg(args.since, now)
    policy = load_policy(args.config)
    with app.open_results(policy) as store:
        in_job = in_job_reads(store, since)
        prolog = prolog_verdicts(store, sorted({r.job_id for r in in_job}))
        short = too_short(ingest_notes(store, sorted({r.job_id for r in in_job})))
        scores = trend_scores(store, policy, since, now) if args.by == "rule" else []
    jobs = compare_all(in_job, prolog)
    notes = unknowable(jobs)
    rows: Sequence[object]
    trend = summarize_trend(scores)
    if args.by == "rule":
        rows = by_rule(in_job, prolog, policy.verdict.shadow, trend)
        notes = [RULE_NOTE, *notes[1:]]
    else:
        rows = summarize(jobs, args.by)
    horizon = f"{policy.trend.horizon_days:g}d"
    if args.json:
        doc = {
            "since": since.isoformat(),
            "by": args.by,
            "rows": json.loads(terminal.rows_json(rows)),
            "cannot_know": notes,
            "too_short": [{"job_id": j, "note": n} for j, n in short],
        }
        if trend.nodes:
            doc["trend"] = {
                "note": TREND_NOTE.format(horizon=horizon),
                "horizon_days": policy.trend.horizon_days,
                **dataclasses.asdict(trend),
                "warnings_per_node": json.loads(
                    terminal.rows_json([f for s in scores for f in s.flags])
                ),
                "misses_per_node": json.loads(
                    terminal.rows_json([m for s in scores for m in s.misses])
                ),
            }
        print(json.dumps(doc, indent=2))
        return 0
    if rows:
        title = f"screening accuracy since {since:%Y-%m-%d %H:%M} UTC"
        columns = [f.name for f in dataclasses.fields(RuleRow)] if args.by == "rule" else None
        console.print(terminal.rows_table(title, rows, columns))
        if trend.nodes:
            for line in trend_lines(trend, scores, horizon):
                console.print(line, highlight=False, markup=False)
    else:
        console.print(
            f"nothing to score since {since:%Y-%m-%d %H:%M} UTC: no ingested job with in-job "
            "read figures (`screener ingest`, or the epilog's ingest, adds them)",
            highlight=False,
            markup=False,
        )
        return 0  # what cannot be known is said about figures; there are none
    for line in notes:
        console.print(f"cannot know: {line}", highlight=False)
    for job_id, line in short:
        console.print(f"not judged: job {job_id}: {line}", highlight=False)
    return 0


def trend_lines(trend: TrendScore, scores: Sequence[NodeScore], horizon: str) -> list[str]:
    """The trend's record in words under the table: its lead, its pending warnings, why it
    missed, then the newest warnings and misses one a line."""
    from screener.verdict.trend_score import Outcome

    lead = (
        f"median lead {trend.lead_sweeps:g} sweeps ({trend.lead_days:.1f} days)"
        if trend.lead_sweeps is not None and trend.lead_days is not None
        else "no lead yet (no warning confirmed)"
    )
    whys = ", ".join(f"{n} {why}" for why, n in trend.missed_why.items())
    out = [
        f"trend (shadow): {_n(trend.nodes, 'node')}, {trend.judged} of {_n(trend.sweeps, 'sweep')}"
        f" with a forecast; {_n(trend.warnings, 'warning')} on {_n(trend.flagged, 'node')}:"
        f" {trend.confirmed} then SLOW_READ within {horizon}, {trend.false} false,"
        f" {trend.pending} pending; {lead}; {trend.missed} missed" + (f" ({whys})" if whys else ""),
        "note: " + TREND_NOTE.format(horizon=horizon),
    ]
    flags = sorted((f for s in scores for f in s.flags), key=lambda f: f.at, reverse=True)
    for f in flags[:TREND_LINES]:
        then = (
            f"SLOW_READ {f.lead_sweeps} sweeps later ({f.slow_at:%Y-%m-%d %H:%M})"
            if f.outcome is Outcome.CONFIRMED and f.slow_at is not None
            else f.outcome.value.lower()
        )
        out.append(f"trend warned {f.node} {f.at:%Y-%m-%d %H:%M}: {then}: {f.reason}")
    misses = sorted((m for s in scores for m in s.misses), key=lambda m: m.slow_at, reverse=True)
    for m in misses[:TREND_LINES]:
        out.append(f"trend missed {m.node}: SLOW_READ {m.slow_at:%Y-%m-%d %H:%M}, {m.why}")
    return out


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"
