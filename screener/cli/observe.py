"""What admins look at beyond tables: `exporter` (Prometheus) and `report RUN --html`."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from rich.console import Console

from screener.cli.common import Subparsers, check_id
from screener.errors import ConfigError
from screener.policy import load_policy

DEFAULT_LISTEN = "127.0.0.1:9464"  # loopback by default: metrics name every node


def register(sub: Subparsers) -> None:
    e = sub.add_parser("exporter", help="serve Prometheus metrics read from the store")
    e.add_argument("--listen", default=DEFAULT_LISTEN, help=f"ADDRESS:PORT ({DEFAULT_LISTEN})")
    e.add_argument(
        "--textfile",
        type=Path,
        metavar="PATH",
        help="write the metrics once to PATH (node_exporter textfile collector) and exit",
    )
    e.add_argument(
        "--reuse-seconds",
        type=float,
        default=60.0,
        metavar="S",
        help="reuse the per-node figures for up to S seconds while no verdict, node or drain"
        " was added (probe ages are always current; 0: read them at every scrape; default 60)",
    )
    e.set_defaults(handler=exporter)

    r = sub.add_parser("report", help="one run as a self-contained HTML page with plots")
    r.add_argument("run_id", metavar="RUN", type=int)
    r.add_argument("--html", type=Path, required=True, metavar="OUT", help="file to write")
    r.set_defaults(handler=report)


def exporter(args: argparse.Namespace, console: Console) -> int:
    from prometheus_client import CollectorRegistry

    from screener import app
    from screener.metrics import StoreCollector, parse_listen, serve, write_textfile
    from screener.metrics.accuracy import AccuracyCollector
    from screener.metrics.exporter import check_textfile
    from screener.metrics.ops import OpsCollector

    policy = load_policy(args.config)
    if args.textfile is None:
        parse_listen(args.listen)  # a bad --listen fails before the store is opened
    else:
        check_textfile(args.textfile)  # so does a device, a directory or a missing directory
    if not args.reuse_seconds >= 0:  # also refuses nan
        raise ConfigError(f"--reuse-seconds must be >= 0, not {args.reuse_seconds}")
    with app.open_results(policy) as store:
        registry = CollectorRegistry()
        registry.register(StoreCollector(store, reuse_s=args.reuse_seconds, policy=policy))
        # screening vs in-job figures over 30 days, also per rule (shadowed or not)
        registry.register(AccuracyCollector(store, shadow=policy.verdict.shadow))
        registry.register(OpsCollector(store, policy))  # what the alerting rules need
        if args.textfile is not None:
            write_textfile(registry, args.textfile)
            return 0
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())  # systemd stop: clean shutdown
        console.print(f"serving http://{args.listen}/metrics", highlight=False)
        serve(registry, args.listen, stop)
    return 0


def report(args: argparse.Namespace, console: Console) -> int:
    from screener import app
    from screener.report import html
    from screener.report.trend_plot import run_trends
    from screener.store import views

    check_id(args.run_id, "RUN")  # an id beyond 2^63 overflows the database's integer
    policy = load_policy(args.config)
    out: Path = args.html
    if not out.absolute().parent.is_dir():
        raise ConfigError(f"directory of {out} does not exist")
    with app.open_results(policy) as store:
        detail = views.run_detail(store, args.run_id)
        probes = store.run_probes(args.run_id)
        nodes = [n.node for n in detail.nodes]  # their trend as it stood at the run's start
        trends = run_trends(store, policy, nodes, detail.run.started_at, args.run_id)
    page = html.render(detail, probes, trends=trends)
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror}") from None
    console.print(f"wrote {out} ({len(page) // 1024} KiB)", highlight=False)
    return 0
