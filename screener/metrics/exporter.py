"""Serve the store's metrics over HTTP, or write them once as a node_exporter textfile.

The registry is passed in (never the process-global default one), so a test or an
embedding program decides what else is exported next to screener's metrics. Both paths
write the text format 0.0.4 through ``exposition.render`` (fast for the per-node families);
the HTTP server answers every GET with it whatever the Accept header asks (Prometheus
accepts it, and OpenMetrics would add nothing screener uses), gzipped at level 1 when the
client accepts gzip (level 9, the library's, took 232 ms for a 10,000-node body against
25 ms, for a body only ~10 % smaller).
"""

from __future__ import annotations

import gzip
import ipaddress
import os
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry

from screener.errors import ConfigError
from screener.metrics.exposition import CONTENT_TYPE, render

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
App = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


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


def metrics_app(
    registry: CollectorRegistry,
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """A WSGI app: GET (any path) -> the registry rendered; other methods -> 405."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] != "GET":
            start_response("405 Method Not Allowed", [("Allow", "GET")])
            return [b""]
        body = render(registry)
        headers = [("Content-Type", CONTENT_TYPE)]
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(len(body))))
        start_response("200 OK", headers)
        return [body]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    """One thread per request (a slow scrape does not hold up the next); threads are
    daemons so shutdown does not wait for a stuck client."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Every scrape would log a line to stderr; the exporter stays quiet."""


def serve(registry: CollectorRegistry, listen: str, stop: threading.Event) -> None:
    """Serve ``registry`` at http://LISTEN/metrics until ``stop`` is set."""
    host, port = parse_listen(listen)
    server_class = type(
        "Server",
        (_Server,),
        {"address_family": socket.AF_INET6 if ":" in host else socket.AF_INET},
    )
    try:
        server: WSGIServer = make_server(
            host, port, metrics_app(registry), server_class, handler_class=_QuietHandler
        )
    except OSError as exc:
        raise ConfigError(f"cannot listen on {listen}: {exc.strerror}") from None
    thread = threading.Thread(target=server.serve_forever, name="exporter", daemon=True)
    thread.start()
    try:
        stop.wait()
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def check_textfile(path: Path) -> None:
    """Refuse (ConfigError, one line) anything but a regular file or a new name in an
    existing directory: the write replaces ``path`` by rename, which as root would turn
    /dev/full or a FIFO into a regular file, or follow nothing for a symlink."""
    directory = path.absolute().parent
    if not directory.is_dir():
        raise ConfigError(f"textfile directory {directory} does not exist")
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return  # a new name: created by the rename
    except OSError as exc:
        raise ConfigError(f"cannot use textfile {path}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise ConfigError(f"textfile {path} is {kind}: give a regular file or a new name")


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symbolic link",
}


def write_textfile(registry: CollectorRegistry, path: Path) -> None:
    """Write the metrics to ``path`` atomically (temp file in the same directory, then
    rename), so node_exporter's textfile collector never reads a half-written file.
    Only a regular file or a new name is written (check_textfile)."""
    check_textfile(path)
    data = render(registry)
    directory = path.absolute().parent
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # node_exporter usually runs as another user
        check_textfile(path)  # again, just before the rename (it may have changed meanwhile)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
