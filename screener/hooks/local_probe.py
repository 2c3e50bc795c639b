"""Run the probe on this node (the sweep's Slurm step), optionally in deep mode."""

from __future__ import annotations

import asyncio
import socket

from screener.hooks.probe_json import node_lines, steady_state
from screener.model import NodeProbe
from screener.pipeline import probe_node
from screener.policy import Policy
from screener.transport.local import LocalTransport


def probe_here(policy: Policy, deep: bool) -> str:
    """This node's probe as short lines (deep: rounds until steady state or the cap)."""
    node = socket.gethostname()
    sw = policy.sweep

    async def go() -> str:
        transport = LocalTransport()
        rounds: list[NodeProbe] = []
        steady: bool | None = None
        try:
            while True:
                p = await probe_node(transport, node, policy)
                rounds.append(p)
                if not deep or not p.usable:
                    break
                reads = [r.seq_read.bw_bytes for r in rounds if r.seq_read is not None]
                steady = steady_state(
                    reads, sw.deep_window, sw.deep_max_excursion, sw.deep_max_slope
                )
                if steady or len(rounds) >= sw.deep_max_rounds:
                    break
        finally:
            await transport.close()
        return "\n".join(node_lines(node, rounds, steady if deep else None))

    return asyncio.run(go())
