"""The small exception tree. ``str(err)`` is the one line an admin sees; no tracebacks."""

from __future__ import annotations


class ScreenerError(Exception):
    """Base of every error screener raises on purpose."""


class ConfigError(ScreenerError):
    """Bad policy/config: unknown key, wrong type, out-of-range value."""


class ProbeError(ScreenerError):
    """A probe's output could not be used (malformed, truncated, missing fields)."""

    def __init__(self, node: str, message: str, excerpt: str = "") -> None:
        self.node = node
        self.message = message
        self.excerpt = _short(excerpt)
        tail = f": {self.excerpt!r}" if self.excerpt else ""
        super().__init__(f"{node}: {message}{tail}")


class TransportError(ScreenerError):
    """Running a command on a host failed before it could produce a result.

    ``kind`` is one of: unreachable, auth, hostkey, timeout, failed.
    """

    KINDS = ("unreachable", "auth", "hostkey", "timeout", "failed")

    def __init__(self, host: str, kind: str, message: str) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"unknown TransportError kind {kind!r}")
        self.host = host
        self.kind = kind
        self.message = message
        super().__init__(f"{host}: {kind}: {message}")


class CommandTimeout(TransportError):
    """A command ran past its timeout; its whole process group was killed."""

    def __init__(self, host: str, argv0: str, timeout: float) -> None:
        super().__init__(host, "timeout", f"{argv0} did not finish within {timeout:g} s")
        self.timeout = timeout


class SlurmError(ScreenerError):
    """A Slurm command failed or answered something we cannot parse."""


class StoreError(ScreenerError):
    """The database cannot be reached, is not migrated, or refused a write."""


def _short(text: str, limit: int = 120) -> str:
    """One-line excerpt of raw output for error messages."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class Terminated(BaseException):
    """SIGTERM arrived (Slurm's PrologEpilogTimeout sends it): stop, clean up, exit 143.

    A BaseException so that no ``except Exception`` on the way swallows it.
    """

    def __init__(self, signum: int = 15) -> None:
        self.signum = signum
        super().__init__(f"terminated by signal {signum}")
