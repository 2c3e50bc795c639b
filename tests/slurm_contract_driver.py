"""One SlurmClient call in a process of its own, printed as JSON (tests/test_slurm_contract.py).

``python -m tests.slurm_contract_driver BACKEND OP [ARG...]`` with BACKEND cli|pyslurm|rest|auto
and OP nodes|job|drain|resume|release. libslurm reads its config once per process, so each call
runs here with the cluster's SLURM_CONF; a SlurmError prints {"error": ...} (rc 0), any other
exception is a traceback and rc 1: the contract test fails on it. ``rest`` reaches slurmrestd
at the cluster's SCREENER_MINICLUSTER_REST_URL (ClusterInfo.env), with the JWT in
SCREENER_MINICLUSTER_REST_TOKEN_FILE if there is one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from screener.errors import SlurmError
from screener.policy import SlurmPolicy
from screener.slurm import select_client


def main(argv: list[str]) -> int:
    backend, op, *args = argv
    rest = backend == "rest"
    policy = SlurmPolicy(
        backend=backend,
        command_timeout_s=8.0,
        rest_url=os.environ.get("SCREENER_MINICLUSTER_REST_URL", "") if rest else "",
        rest_token_file=os.environ.get("SCREENER_MINICLUSTER_REST_TOKEN_FILE", "") if rest else "",
    )
    out: object
    try:
        client, why = select_client(policy)
    except SlurmError as exc:  # e.g. rest without a URL: the test reads why
        print(json.dumps({"backend": backend, "why": str(exc), "result": {"error": str(exc)}}))
        return 0
    try:
        if op == "nodes":
            # partitions as a set: sinfo -N lists a node's records in no fixed order
            out = [
                {**dataclasses.asdict(n), "partitions": sorted(n.partitions)}
                for n in client.nodes(args or None)
            ]
        elif op == "job":
            job = client.job(args[0])
            out = None if job is None else dataclasses.asdict(job)
        elif op == "drain":
            client.drain(args[1:], args[0])
            out = "ok"
        elif op == "resume":
            client.resume(args)
            out = "ok"
        elif op == "release":
            client.release(args[0])
            out = "ok"
        else:
            raise SystemExit(f"unknown op {op}")
    except SlurmError as exc:
        out = {"error": str(exc)}
    print(json.dumps({"backend": client.name, "why": why, "result": out}, default=sorted))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
