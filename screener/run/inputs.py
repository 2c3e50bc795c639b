"""A run's inputs: the policy with command-line overrides, the node list, the run tag."""

from __future__ import annotations

import dataclasses
import secrets
import socket
import time

from screener.errors import ConfigError
from screener.hostlist import expand_nodeset
from screener.policy import Policy, validate


def screen_policy(
    policy: Policy,
    *,
    local: bool = False,
    target: str | None = None,
    transport: str | None = None,
    confirm: bool = True,
) -> Policy:
    """Apply command-line overrides to the configured policy (and re-validate it)."""
    probe = policy.probe if target is None else dataclasses.replace(policy.probe, target=target)
    kind = "local" if local else (transport or policy.transport.kind)
    return validate(
        dataclasses.replace(
            policy,
            probe=probe,
            transport=dataclasses.replace(policy.transport, kind=kind),
            verdict=dataclasses.replace(policy.verdict, confirm=policy.verdict.confirm and confirm),
        )
    )


def resolve_nodes(nodeset: str | None, local: bool) -> list[str]:
    """The node list to screen: this host for --local, else the expanded NodeSet."""
    if local:
        return [socket.gethostname()]
    if not nodeset:
        raise ConfigError("give a NODESET (e.g. 'node[01-08]') or --local")
    return expand_nodeset(nodeset)


def new_run_tag() -> str:
    """A run tag: time-ordered (spool files sort by it) and unique across hosts."""
    return f"{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{secrets.token_hex(6)}"
