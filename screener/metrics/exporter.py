"""Serve the store's metrics over HTTP, or write them once as a node_exporter textfile.

The registry is passed in (never the process-global default one), so a test or an
embedding program decides what else is exported next to screener's metrics.
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
import threading
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from screener.errors import ConfigError


def parse_listen(listen: str) -> tuple[str, int]:
    """'127.0.0.1:9464' or '[::1]:9464' -> (address, port); ConfigError if malformed."""
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ConfigError(f"--listen must be ADDRESS:PORT (e.g. 127.0.0.1:9464), not {listen!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ConfigError(f"--listen address must be an IP address, not {host!r}") from None
    port = int(port_text)
    if not 0 < port < 65536:
        raise ConfigError(f"--listen port must be 1..65535, not {port}")
    return host, port


def serve(registry: CollectorRegistry, listen: str, stop: threading.Event) -> None:
    """Serve ``registry`` at http://LISTEN/metrics until ``stop`` is set."""
    host, port = parse_listen(listen)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {listen}: {exc.strerror}") from None
    try:
        stop.wait()
    finally:
        server.shutdown()
        thread.join()


def write_textfile(registry: CollectorRegistry, path: Path) -> None:
    """Write the metrics to ``path`` atomically (temp file in the same directory, then
    rename), so node_exporter's textfile collector never reads a half-written file."""
    data = generate_latest(registry)
    directory = path.absolute().parent
    if not directory.is_dir():
        raise ConfigError(f"textfile directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # node_exporter usually runs as another user
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
