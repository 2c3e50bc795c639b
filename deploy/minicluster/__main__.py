"""CLI: python -m deploy.minicluster {up,down,status,inject,heal} [--state-dir DIR].

A thin wrapper over deploy.minicluster.Cluster; errors are one line on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence

from deploy.minicluster.cluster import Cluster, ClusterStatus
from deploy.minicluster.spec import DEFAULT_STATE_DIR, FAULT_KINDS, HOST_SLURM, slurm_version_arg
from deploy.slurmroot import SUITES
from screener.errors import ScreenerError


def build_parser() -> argparse.ArgumentParser:
    """The argument grammar; --state-dir is accepted before or after the subcommand."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-dir", default=argparse.SUPPRESS, help="cluster state dir")
    parser = argparse.ArgumentParser(
        prog="python -m deploy.minicluster", description=__doc__, parents=[common]
    )
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", parents=[common], help="bring a cluster up (or repair it)")
    up.add_argument("--nodes", type=int, default=8)
    up.add_argument("--prefix", default="node")
    up.add_argument("--subnet", default="127.0.10", help="sshd of node i listens on SUBNET.i")
    up.add_argument("--slurm-port-base", type=int, default=17000, help="slurmctld; slurmd +i")
    up.add_argument("--sshd-only", action="store_true", help="namespaces + sshd, no fs/Slurm")
    up.add_argument("--scratch-mib", type=int, default=1024, help="size of each /scratch")
    up.add_argument("--fault", action="append", default=[], metavar="NODE:KIND[=VALUE]")
    up.add_argument("--prolog", help="script run as PrologSlurmctld (via an env wrapper)")
    up.add_argument("--epilog", help="script run as EpilogSlurmctld (via an env wrapper)")
    up.add_argument(
        "--nested-loop",
        action="store_true",
        help="/scratch on a loop nested in another: slow_* show in the node's iostat",
    )
    up.add_argument(
        "--slurm-version",
        metavar="V",
        help=f"run Slurm V ({', '.join(sorted(SUITES))}) from its root "
        f"(make slurm-root SLURM=V); default: the host's ({HOST_SLURM})",
    )
    up.add_argument(
        "--pace", metavar="RATE", help="every device reads/writes at RATE (300M) when healthy"
    )
    up.add_argument("--pace-iops", metavar="N", help="and reads at most N IOPS (20000)")
    up.add_argument("--timeout", type=float, default=180.0, help="readiness deadline, s")

    sub.add_parser("down", parents=[common], help="remove everything up created")
    status = sub.add_parser("status", parents=[common], help="daemons, Slurm states, faults")
    status.add_argument("--json", action="store_true")

    inject = sub.add_parser("inject", parents=[common], help="inject a fault into a node")
    inject.add_argument("node")
    inject.add_argument("kind", choices=list(FAULT_KINDS))
    inject.add_argument("value", nargs="?", help="bytes/s (20M, 20MiB) or IOPS for slow_*")

    heal = sub.add_parser("heal", parents=[common], help="reverse injected faults")
    heal.add_argument("node", nargs="?")
    return parser


def main(args: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(args)
    cluster = Cluster(getattr(ns, "state_dir", DEFAULT_STATE_DIR))
    try:
        return _dispatch(cluster, ns)
    except ScreenerError as exc:
        print(f"minicluster: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `... | head`: the reader is gone, nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("minicluster: interrupted", file=sys.stderr)
        return 130


def _dispatch(cluster: Cluster, ns: argparse.Namespace) -> int:
    if ns.command == "up":
        t0 = time.monotonic()
        info = cluster.up(
            ns.nodes,
            prefix=ns.prefix,
            subnet=ns.subnet,
            slurm_port_base=ns.slurm_port_base,
            sshd_only=ns.sshd_only,
            scratch_mib=ns.scratch_mib,
            prolog=ns.prolog,
            epilog=ns.epilog,
            nested_loop=ns.nested_loop,
            faults=ns.fault,
            timeout=ns.timeout,
            slurm_version=slurm_version_arg(ns.slurm_version),
            pace=ns.pace,
            pace_iops=ns.pace_iops,
        )
        version = f" (Slurm {info.spec.slurm_version})" if info.spec.slurm_version else ""
        took = time.monotonic() - t0
        print(f"cluster {info.cluster_id} up: {info.hostlist}{version} in {took:.1f} s")
        for key, value in sorted(info.env(inherit=False).items()):
            print(f"export {key}={shlex.quote(value)}")
        print(f"# try: ssh -F {info.ssh_config} {info.nodes[0]} hostname")
    elif ns.command == "down":
        t0 = time.monotonic()
        removed = cluster.down()
        word = "removed" if removed else "nothing recorded in"
        print(f"{word} {cluster.state_dir} ({time.monotonic() - t0:.1f} s)")
    elif ns.command == "status":
        st = cluster.status()
        print(json.dumps(_status_json(st), indent=2) if ns.json else _status_text(st))
        return 0 if st.healthy else 3
    elif ns.command == "inject":
        cluster.inject(ns.node, ns.kind, ns.value)
        print(f"{ns.node}: {ns.kind}{'=' + ns.value if ns.value else ''} injected")
    elif ns.command == "heal":
        healed = cluster.heal(ns.node)
        for node, kinds in sorted(healed.items()):
            print(f"{node}: healed {', '.join(kinds)}")
        if not healed:
            print("no faults to heal")
    return 0


def _status_json(st: ClusterStatus) -> dict[str, object]:
    out: dict[str, object] = {
        "cluster_id": st.info.cluster_id,
        "state_dir": str(st.info.state_dir),
        "spec": st.info.spec.to_json(),
        "healthy": st.healthy,
        "munged": st.munged,
        "slurmctld": st.slurmctld,
        "nodes": [vars(n) for n in st.nodes],
    }
    if st.controller_ns is not None:  # a versioned cluster's controller namespace holder
        out["controller_ns"] = st.controller_ns
    return out


def _status_text(st: ClusterStatus) -> str:
    def flag(value: bool | None) -> str:
        return "-" if value is None else ("up" if value else "DOWN")

    info = st.info
    ctl = "" if st.controller_ns is None else f", controller ns {flag(st.controller_ns)}"
    version = f" (Slurm {info.spec.slurm_version})" if info.spec.slurm_version else ""
    lines = [
        f"cluster {info.cluster_id} in {info.state_dir}: {info.hostlist}{version}, "
        f"{'healthy' if st.healthy else 'DEGRADED'}; munged {flag(st.munged)}, "
        f"slurmctld {flag(st.slurmctld)}{ctl}",
        f"{'node':10} {'addr':14} {'ns':5} {'sshd':5} {'slurmd':6} {'loop':12} {'slurm':10} faults",
    ]
    for n in st.nodes:
        faults = ",".join(k if v is None else f"{k}={v}" for k, v in sorted(n.faults.items()))
        lines.append(
            f"{n.name:10} {n.addr:14} {flag(n.holder):5} {flag(n.sshd):5} {flag(n.slurmd):6} "
            f"{n.loop or '-':12} {n.slurm_state or '-':10} {faults or '-'}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
