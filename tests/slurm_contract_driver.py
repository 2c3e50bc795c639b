"""One SlurmClient call in a process of its own, printed as JSON (tests/test_slurm_contract.py).

``python -m tests.slurm_contract_driver BACKEND OP [ARG...]`` with BACKEND cli|pyslurm and OP
nodes|job|drain|resume|release. libslurm reads its config once per process, so each call runs
here with the cluster's SLURM_CONF; a SlurmError prints {"error": ...} (rc 0), any other
exception is a traceback and rc 1: the contract test fails on it.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from screener.errors import SlurmError
from screener.policy import SlurmPolicy
from screener.slurm import select_client


def main(argv: list[str]) -> int:
    backend, op, *args = argv
    client, why = select_client(SlurmPolicy(backend=backend, command_timeout_s=8.0))
    out: object
    try:
        if op == "nodes":
            out = [dataclasses.asdict(n) for n in client.nodes(args or None)]
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
