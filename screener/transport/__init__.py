"""How screener reaches nodes: asyncssh (default), Fabric (optional extra) or locally."""

from screener.transport.base import CommandResult, Transport, check, make_transport

__all__ = ["CommandResult", "Transport", "check", "make_transport"]
