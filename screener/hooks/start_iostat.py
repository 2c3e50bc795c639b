"""Prolog side of in-job iostat: learn each node's scratch device, start the monitor."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from screener.errors import ProbeError, TransportError
from screener.hooks.injob import start_argv
from screener.hooks.log import HookLog
from screener.policy import Policy
from screener.probe.facts import facts_argv, parse_facts
from screener.probe.private import planted_notes
from screener.slurm.client import SlurmJob
from screener.transport.base import Transport, check


async def start_job_iostat(
    transport: Transport, job: SlurmJob, devices: Mapping[str, str], policy: Policy, log: HookLog
) -> None:
    """Start a bounded, detached iostat on every node of ``job``; failures are only logged
    (monitoring is evidence, never a reason to hold a job)."""
    pp = policy.prolog
    timeout = policy.transport.command_timeout_s

    async def one(node: str) -> str | None:
        try:
            dev = devices.get(node)
            if dev is None:  # fast-path node: ask for its scratch device
                res = await transport.run(node, facts_argv(policy.probe.target), timeout=timeout)
                dev = parse_facts(res.stdout, node).device
            argv = start_argv(
                job.job_id, node, pp.iostat_interval_s, pp.iostat_max_s, [dev] if dev else []
            )
            res = check(await transport.run(node, argv, timeout=timeout))
            for note in planted_notes(res.stderr, node):  # a planted /tmp/.screener
                log(note)
            return None
        except (TransportError, ProbeError) as exc:
            return f"{node}: {exc}"

    errors = [e for e in await asyncio.gather(*(one(n) for n in job.nodes)) if e]
    for e in errors:
        log(f"in-job iostat not started on {e}")
    started = len(job.nodes) - len(errors)
    log(f"in-job iostat started on {started} of {len(job.nodes)} nodes")
