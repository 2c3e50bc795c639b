"""Run the probe on this node (the sweep's Slurm step): the pipeline's own probe_node, and in
deep mode the one steady-state loop (screener.steady), or the prolog's triage recipe a few
times over (the sweep's learning reads, sweep/learn.py); or remove the probe file."""

from __future__ import annotations

import asyncio
import socket

from screener.pipeline import probe_node, remove_probe_files
from screener.policy import Policy
from screener.probe.lines import node_lines
from screener.probe.short import triage_policy
from screener.steady import deep_rounds
from screener.transport.local import LocalTransport


def probe_here(policy: Policy, deep: bool, triage: int = 0) -> str:
    """This node's probe as short lines (deep: rounds until steady state or the cap;
    ``triage``: that many rounds of the triage's recipe instead, one after another)."""
    node = socket.gethostname()

    async def go() -> str:
        transport = LocalTransport()
        try:
            if triage:
                short = triage_policy(policy)
                rounds = [await probe_node(transport, node, short) for _ in range(triage)]
                return "\n".join(node_lines(node, rounds, None))
            if deep:
                rounds, steady = await deep_rounds(
                    lambda: probe_node(transport, node, policy), policy.sweep
                )
                return "\n".join(node_lines(node, rounds, steady))
            return "\n".join(node_lines(node, [await probe_node(transport, node, policy)], None))
        finally:
            await transport.close()

    return asyncio.run(go())


def remove_file_here(policy: Policy) -> None:
    """``[probe] keep_file = false``: remove this node's probe file (best effort)."""
    asyncio.run(remove_probe_files(LocalTransport(), [socket.gethostname()], policy))
