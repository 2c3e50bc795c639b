"""Client CPU and wall time to run `hostname` on every node: asyncssh vs Fabric vs clush.

    .venv/bin/python bench/dispatch.py [--nodes 64] [--repeat 3]

Runs on an sshd-only minicluster in its own state dir (brought up and torn down here unless
it was already up). CPU is user+sys of the client only: time.process_time() deltas for the
in-process transports (all threads, connection setup and config parsing included) and
RUSAGE_CHILDREN deltas for clush, which forks one OpenSSH client per node. Tools are
interleaved per round so machine noise spreads evenly; medians are reported. Writes
bench/results/dispatch.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deploy.minicluster.cluster import Cluster  # noqa: E402
from deploy.minicluster.spec import SPEC_FILE  # noqa: E402
from screener.app import make_transport  # noqa: E402
from screener.hostlist import fold_nodes  # noqa: E402
from screener.policy import TransportPolicy  # noqa: E402
from screener.process import run_command  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "dispatch.json"
TARGET_MS_PER_NODE = 15.0
TARGET_RATIO_VS_CLUSH = 7.0


def measure_transport(kind: str, info: Any) -> tuple[float, float]:
    """(client CPU s, wall s) for one fresh transport running `hostname` on every node."""
    nodes = list(info.nodes)
    policy = TransportPolicy(
        kind=kind,
        ssh_config=str(info.ssh_config),
        known_hosts=str(info.known_hosts),
        concurrency=len(nodes),
        connect_timeout_s=30,
    )

    async def fan_out() -> list[str]:
        transport = make_transport(policy)  # inside: config parsing is part of the cost
        try:
            results = await asyncio.gather(
                *(transport.run(n, ["hostname"], timeout=60) for n in nodes)
            )
        finally:
            await transport.close()
        return [r.stdout.strip() for r in results]

    cpu0, wall0 = time.process_time(), time.perf_counter()
    names = asyncio.run(fan_out())
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    if names != nodes:
        raise SystemExit(f"{kind}: wrong hostnames: {names[:3]}...")
    return cpu, wall


def measure_clush(info: Any) -> tuple[float, float]:
    """(children CPU s, wall s) for `clush -f N -o '-F ssh_config' -w nodes hostname`."""
    nodes = list(info.nodes)
    argv = [
        "clush",
        "-f",  # fan-out: all nodes at once, like the transports' concurrency
        str(len(nodes)),
        "-o",  # extra ssh options: the cluster's ssh_config (aliases, key, known_hosts)
        f"-F {info.ssh_config}",
        "-w",
        fold_nodes(nodes),
        "hostname",
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall0 = time.perf_counter()
    result = run_command(argv, timeout=300)
    wall = time.perf_counter() - wall0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = sorted(result.stdout.splitlines())
    expected = sorted(f"{n}: {n}" for n in nodes)
    if result.exit_status != 0 or lines != expected:
        raise SystemExit(f"clush failed ({result.exit_status}): {result.stderr.strip()[:200]}")
    return cpu, wall


def versions() -> dict[str, str]:
    """Versions of everything measured."""
    ssh = run_command(["ssh", "-V"], timeout=10)
    clush = run_command(["clush", "--version"], timeout=10)
    return {
        "python": platform.python_version(),
        "asyncssh": version("asyncssh"),
        "fabric": version("fabric"),
        "paramiko": version("paramiko"),
        "clustershell": clush.stdout.strip() or clush.stderr.strip(),
        "openssh": ssh.stderr.strip(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--state-dir", default="/tmp/screener-bench-dispatch")
    parser.add_argument("--subnet", default="127.0.20", help="loopback /24 for the nodes")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()

    cluster = Cluster(args.state_dir)
    was_up = (Path(args.state_dir) / SPEC_FILE).exists()
    info = cluster.up(args.nodes, sshd_only=True, subnet=args.subnet)
    tools: dict[str, Callable[[], tuple[float, float]]] = {
        "asyncssh": lambda: measure_transport("asyncssh", info),
        "fabric": lambda: measure_transport("fabric", info),
        "clush": lambda: measure_clush(info),
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in tools}
    load_before = os.getloadavg()
    try:
        for round_no in range(args.repeat):
            for name, measure in tools.items():
                cpu, wall = measure()
                samples[name].append((cpu, wall))
                print(f"round {round_no + 1} {name:9s} cpu {cpu:6.2f} s  wall {wall:6.2f} s")
    finally:
        if not (was_up or args.keep):
            cluster.down()

    n = args.nodes
    figures: dict[str, dict[str, Any]] = {}
    for name, runs in samples.items():
        cpu = statistics.median(c for c, _ in runs)
        wall = statistics.median(w for _, w in runs)
        figures[name] = {
            "cpu_s_median": round(cpu, 3),
            "cpu_ms_per_node": round(cpu * 1000 / n, 2),
            "wall_s_median": round(wall, 3),
            "cpu_s_samples": [round(c, 3) for c, _ in runs],
            "wall_s_samples": [round(w, 3) for _, w in runs],
        }
    a = figures["asyncssh"]["cpu_s_median"]
    ratios = {
        "clush_over_asyncssh": round(figures["clush"]["cpu_s_median"] / a, 1),
        "fabric_over_asyncssh": round(figures["fabric"]["cpu_s_median"] / a, 1),
    }
    targets = {
        "asyncssh_ms_per_node_max": TARGET_MS_PER_NODE,
        "clush_over_asyncssh_min": TARGET_RATIO_VS_CLUSH,
        "met": figures["asyncssh"]["cpu_ms_per_node"] <= TARGET_MS_PER_NODE
        and ratios["clush_over_asyncssh"] >= TARGET_RATIO_VS_CLUSH,
    }
    report = {
        "benchmark": "dispatch: `hostname` on every node, client CPU (user+sys) and wall",
        "command": " ".join(["python bench/dispatch.py", *sys.argv[1:]]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "nodes": n,
        "repeat": args.repeat,
        "machine": {
            "cores": os.cpu_count(),
            "kernel": platform.release(),
            "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
            "note": "nodes are sshd on loopback of the same machine: server CPU competes",
        },
        "versions": versions(),
        "figures": figures,
        "ratios": ratios,
        "targets": targets,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")

    print(f"\n{n} nodes, median of {args.repeat} (client CPU = user+sys)")
    print(f"{'tool':10s} {'CPU s':>7s} {'ms/node':>8s} {'wall s':>7s} {'x asyncssh':>10s}")
    for name, fig in figures.items():
        ratio = fig["cpu_s_median"] / a
        print(
            f"{name:10s} {fig['cpu_s_median']:7.2f} {fig['cpu_ms_per_node']:8.1f} "
            f"{fig['wall_s_median']:7.2f} {ratio:10.1f}"
        )
    verdict = "met" if targets["met"] else "NOT met"
    print(
        f"targets (asyncssh <= {TARGET_MS_PER_NODE:g} ms/node, >= {TARGET_RATIO_VS_CLUSH:g}x "
        f"below clush): {verdict}; wrote {args.out}"
    )
    return 0 if targets["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
