"""Build the transport a policy names."""

from __future__ import annotations

from screener.errors import ConfigError
from screener.policy import TransportPolicy
from screener.transport.base import Transport


def make_transport(policy: TransportPolicy) -> Transport:
    """The transport ``policy.kind`` names (asyncssh by default).

    Lives here, above the transport package, so that package never imports its own
    implementations (no cycle between transport.base and the transports)."""
    if policy.kind == "asyncssh":
        from screener.transport.asyncssh_transport import AsyncsshTransport

        return AsyncsshTransport(policy)
    if policy.kind == "fabric":
        from screener.transport.fabric_transport import FabricTransport

        return FabricTransport(policy)
    if policy.kind == "local":
        from screener.transport.local import LocalTransport

        return LocalTransport()
    raise ConfigError(f"unknown transport kind {policy.kind!r} (asyncssh, fabric, local)")
