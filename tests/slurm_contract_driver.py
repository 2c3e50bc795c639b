"""One SlurmClient call in a process of its own, printed as JSON (tests/test_slurm_contract.py).

``python -m tests.slurm_contract_driver BACKEND OP [ARG...]`` with BACKEND cli|pyslurm|rest|auto
and OP nodes|job|drain|resume|release. libslurm reads its config once per process, so each call
runs here with the cluster's SLURM_CONF; a SlurmError prints {"error": ...} (rc 0), any other
exception is a traceback and rc 1: the contract test fails on it. ``rest`` reaches slurmrestd
at the cluster's SCREENER_MINICLUSTER_REST_URL (ClusterInfo.env), with the JWT in
SCREENER_MINICLUSTER_REST_TOKEN_FILE if there is one. A node's ``reason_time`` prints as
ISO 8601 (UTC) or null.

``show_node_reasons`` reads Slurm's own text (``scontrol show node``), the witness the
contract holds the backends' reason times and users to.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from datetime import UTC, datetime, tzinfo
from typing import Any

from screener.errors import SlurmError
from screener.policy import SlurmPolicy
from screener.slurm import select_client
from screener.slurm.client import SlurmNode

# `Reason=text [user@2026-11-28T13:00:00]`: scontrol prints the reason's time as a local time
# without a zone, in its own process's zone (TZ, else /etc/localtime)
_REASON_STAMP = re.compile(r"Reason=(.*?) \[([^@\]\s]*)@([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8})\]")


def show_node_reasons(
    text: str, zone: tzinfo | None = None
) -> dict[str, tuple[str, str, datetime]]:
    """node -> (reason, user, when, aware UTC) of ``scontrol show node`` text (one line per
    node with -o, or blocks), for nodes with a reason. The time is read in ``zone``, by
    default Python's local zone: the zone scontrol printed in when run beside this process
    (on the slurmctld host, the hooks' zone; the emulated cluster's is UTC)."""
    out: dict[str, tuple[str, str, datetime]] = {}
    for block in re.split(r"(?m)^(?=NodeName=)", text):
        name = re.match(r"NodeName=(\S+)", block)
        stamp = _REASON_STAMP.search(block)
        if name is None or stamp is None:
            continue
        local = datetime.strptime(stamp[3], "%Y-%m-%dT%H:%M:%S")
        at = local.replace(tzinfo=zone) if zone is not None else local.astimezone()
        out[name[1]] = (stamp[1], stamp[2], at.astimezone(UTC))
    return out


def node_json(node: SlurmNode) -> dict[str, Any]:
    """A SlurmNode as the driver prints it: partitions as a set (sinfo -N lists a node's
    records in no fixed order), the reason's time in ISO 8601."""
    when = node.reason_time
    return {
        **dataclasses.asdict(node),
        "partitions": sorted(node.partitions),
        "reason_time": None if when is None else when.isoformat(),
    }


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
            out = [node_json(n) for n in client.nodes(args or None)]
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
