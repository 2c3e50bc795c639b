"""CLI: python -m deploy.slurmroot {build,exec,show,pyslurm} --version V [--cache DIR].

    python -m deploy.slurmroot build --version 24.11        # once; a no-op when stamped
    python -m deploy.slurmroot pyslurm --version 24.11 --vendor ../shared/vendor
    python -m deploy.slurmroot exec --version 24.11 -- scontrol -V
    python -m deploy.slurmroot show --version 24.11 [--json]

Errors are one line on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from deploy.slurmroot import (
    DEFAULT_CACHE,
    DEFAULT_MIRROR,
    SUITES,
    SlurmRootError,
    build,
    exec_argv,
    find,
)
from deploy.slurmroot.pyslurm import DEFAULT_PYSLURM_CACHE, build_pyslurm


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--version", required=True, choices=sorted(SUITES), help="Slurm release")
    common.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="roots live here")
    parser = argparse.ArgumentParser(prog="python -m deploy.slurmroot", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", parents=[common], help="build the root once (mmdebstrap)")
    b.add_argument("--mirror", default=DEFAULT_MIRROR)
    e = sub.add_parser("exec", parents=[common], help="run a command with the root's /usr")
    e.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARG...]")
    s = sub.add_parser("show", parents=[common], help="path and stamp of a built root")
    s.add_argument("--json", action="store_true")
    p = sub.add_parser(
        "pyslurm", parents=[common], help="build pyslurm for the root (deploy/slurmroot/pyslurm.py)"
    )
    p.add_argument("--vendor", type=Path, required=True, help="holds pyslurm's tarball")
    p.add_argument("--pyslurm-cache", type=Path, default=DEFAULT_PYSLURM_CACHE)
    p.add_argument(
        "--python",
        type=Path,
        default=Path(sys.executable),
        help="the venv interpreter that will import it (gets the .pth; default: this one)",
    )
    return parser


def main(args: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(args)
    try:
        if ns.command == "build":
            t0 = time.monotonic()
            root = build(ns.version, ns.cache, ns.mirror)
            st = root.stamp
            what = "built" if root.built_now else "cached"
            print(
                f"{what} {root.path}: slurm {st.slurm}, glibc {st.glibc}, suite {st.suite}, "
                f"{st.size_bytes / 2**20:.0f} MiB, build {st.build_seconds:.0f} s "
                f"(this call {time.monotonic() - t0:.1f} s)"
            )
        elif ns.command == "pyslurm":
            t0 = time.monotonic()
            built = build_pyslurm(ns.version, ns.vendor, ns.python, ns.pyslurm_cache, ns.cache)
            ps = built.stamp
            what = "built" if built.built_now else "cached"
            print(
                f"pyslurm {ps.pyslurm} {what} in {built.site} for Slurm {ps.slurm} "
                f"(build {ps.build_seconds:.0f} s, this call {time.monotonic() - t0:.1f} s); "
                f"used only inside the {ns.version} root, via {built.pth}"
            )
        elif ns.command == "exec":
            cmd = ns.cmd[1:] if ns.cmd[:1] == ["--"] else ns.cmd
            if not cmd:
                raise SlurmRootError("exec needs a command after --")
            root = find(ns.version, ns.cache)
            argv = exec_argv(root.path, cmd)
            sys.stdout.flush()
            os.execvp(argv[0], argv)
        else:
            root = find(ns.version, ns.cache)
            if ns.json:
                print(json.dumps({"path": str(root.path), **root.stamp.to_json()}, indent=2))
            else:
                print(f"{root.path} slurm {root.stamp.slurm} glibc {root.stamp.glibc}")
    except SlurmRootError as exc:
        print(f"slurmroot: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
