"""How screener reaches nodes: asyncssh (default), Fabric (optional extra) or locally.

``screener.app.make_transport`` picks one from the policy (the composition root)."""

from screener.transport.base import CommandResult, Transport, check

__all__ = ["CommandResult", "Transport", "check"]
