"""The slurmrestd backend: OpenAPI v0.0.42 (Slurm 24.11 through 26.05) over a unix socket or
TCP, with only the standard library (http.client). docs/slurm.md, "The slurmrestd backend".

Requests: ``GET /nodes/``, ``GET /job/{id}``, ``POST /nodes/`` (state DRAIN + reason, or
RESUME: one call for all nodes), ``POST /job/{id}`` with ``begin_time`` now (what
``scontrol update jobid=N starttime=now`` does). Node names, reasons and job ids are checked
before any path or body is built; the URL was checked at policy load (policy.rest_endpoint).
Auth: a JWT (``scontrol token``) in X-SLURM-USER-TOKEN, or none over a unix socket
(rest_auth/local: slurmrestd's own uid). Every failure is a one-line SlurmError.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import time
from collections.abc import Sequence
from typing import Any

from screener.errors import ConfigError, SlurmError
from screener.hostlist import validate_node
from screener.policy import SlurmPolicy, rest_endpoint
from screener.slurm.client import SlurmJob, SlurmNode, check_job_id, check_reason
from screener.slurm.job_id import parse_job_id
from screener.slurm.parse import one_line
from screener.slurm.rest_parse import (
    API,
    INVALID_JOB_ID,
    auth_refused,
    job_reply,
    nodes_reply,
    ping_reply,
    reply,
    unique_job_id,
)

_TOKEN_RE = re.compile(r"[A-Za-z0-9_.=-]{1,8192}")  # a JWT: base64url parts joined by dots
_MAX_REPLY = 256 << 20  # a reply beyond this is refused, not read into memory


def load_token(policy: SlurmPolicy) -> str:
    """The JWT to send: slurm.rest_token_file (re-read each time: a timer may rotate it), else
    $SLURM_JWT, else "" (no token). ``SLURM_JWT=`` as `scontrol token` prints it is cut."""
    if policy.rest_token_file:
        try:
            with open(policy.rest_token_file, encoding="ascii", errors="replace") as fh:
                raw = fh.read(16384)
        except OSError as exc:
            raise SlurmError(
                f"slurm.rest_token_file {policy.rest_token_file}: {exc.strerror or exc}"
            ) from None
        where = f"slurm.rest_token_file {policy.rest_token_file}"
    else:
        raw = os.environ.get("SLURM_JWT", "")
        where = "SLURM_JWT"
    token = raw.strip().removeprefix("SLURM_JWT=")
    if token and not _TOKEN_RE.fullmatch(token):
        raise SlurmError(f"{where} does not hold a JWT (scontrol token prints one)")
    return token


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix stream socket (slurmrestd's unix:/path listener)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class RestSlurm:
    """SlurmClient over slurmrestd (data_parser v0.0.42)."""

    name = "rest"

    def __init__(self, url: str, timeout_s: float = 20.0, token: str = "", user: str = "") -> None:
        try:
            self._scheme, self._host, self._port = rest_endpoint(url)
        except ConfigError as exc:
            raise SlurmError(str(exc)) from None
        if token and not _TOKEN_RE.fullmatch(token):
            raise SlurmError("the slurmrestd token is not a JWT")
        self.url = url
        self.timeout_s = timeout_s
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["X-SLURM-USER-TOKEN"] = token
            if user:
                self._headers["X-SLURM-USER-NAME"] = user

    @classmethod
    def from_policy(cls, policy: SlurmPolicy) -> RestSlurm:
        """The client [slurm] describes (rest_url, token file or $SLURM_JWT, rest_user)."""
        if not policy.rest_url:
            raise SlurmError("slurm.backend = rest needs slurm.rest_url (docs/slurm.md)")
        return cls(policy.rest_url, policy.command_timeout_s, load_token(policy), policy.rest_user)

    # -- HTTP ---------------------------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        if self._scheme == "unix":
            return _UnixConnection(self._host, self.timeout_s)
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout_s)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, bytes]:
        """(HTTP status, reply body) of one request, within timeout_s in all; SlurmError when
        slurmrestd cannot be reached or does not answer in time."""
        what = f"slurmrestd {method} {path}"
        headers = dict(self._headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        deadline = time.monotonic() + self.timeout_s
        conn = self._connection()
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            chunks: list[bytes] = []
            size = 0
            while chunk := resp.read(1 << 16):
                size += len(chunk)
                if size > _MAX_REPLY:
                    raise SlurmError(f"{what}: reply larger than {_MAX_REPLY >> 20} MiB")
                if time.monotonic() > deadline:
                    raise SlurmError(f"{what}: no full reply within {self.timeout_s:g} s")
                chunks.append(chunk)
            return resp.status, b"".join(chunks)
        except TimeoutError:
            raise SlurmError(f"{what}: no reply within {self.timeout_s:g} s ({self.url})") from None
        except (OSError, http.client.HTTPException) as exc:
            why = one_line(f"{type(exc).__name__}: {exc}", 160)
            raise SlurmError(f"{what}: cannot reach slurmrestd at {self.url}: {why}") from None
        finally:
            conn.close()

    def _get(self, path: str, expected: frozenset[int] = frozenset()) -> str | None:
        status, body = self._call("GET", path)
        self._check_auth(status, body, f"slurmrestd GET {path}")
        return reply(status, body, f"slurmrestd GET {path}", expected)

    def _post(self, path: str, body: dict[str, Any]) -> None:
        status, raw = self._call("POST", path, body)
        self._check_auth(status, raw, f"slurmrestd POST {path}")
        reply(status, raw, f"slurmrestd POST {path}")

    def _check_auth(self, status: int, body: bytes, what: str) -> None:
        refused = auth_refused(status, body, what, "X-SLURM-USER-TOKEN" in self._headers)
        if refused is not None:
            raise refused

    # -- SlurmClient --------------------------------------------------------------------------
    def ping(self) -> str:
        """ "Slurm 24.11.5, slurmctld UP", or a SlurmError (for `auto` and doctor)."""
        text = self._get(f"{API}/ping/")
        assert text is not None
        return ping_reply(text)

    def nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        text = self._get(f"{API}/nodes/")
        assert text is not None
        every = nodes_reply(text)
        if names is None:
            return every
        wanted = set(names)
        return [n for n in every if n.name in wanted]

    def _job_text(self, job_id: str) -> tuple[str | None, Any]:
        """The reply for the record ``job_id`` names: its array's or het job's records come
        with it (slurmrestd refuses A_T and H+O in a path), None when Slurm does not know it."""
        ref = parse_job_id(check_job_id(job_id))
        return self._get(f"{API}/job/{ref.job_id}", frozenset({INVALID_JOB_ID})), ref

    def job(self, job_id: str) -> SlurmJob | None:
        text, ref = self._job_text(job_id)
        return job_reply(text, ref, job_id)

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        if nodes:
            body = {"name": _names(nodes), "state": ["DRAIN"], "reason": check_reason(reason)}
            self._post(f"{API}/nodes/", body)

    def resume(self, nodes: Sequence[str]) -> None:
        if nodes:
            self._post(f"{API}/nodes/", {"name": _names(nodes), "state": ["RESUME"]})

    def release(self, job_id: str) -> None:
        ref = parse_job_id(check_job_id(job_id))
        unique: int | None = ref.job_id
        if ref.kind != "job":  # slurmrestd updates an array task or het component by its id
            text, ref = self._job_text(job_id)
            unique = unique_job_id(text, ref)
            if unique is None:
                raise SlurmError(f"slurmrestd: no job {job_id} to release")
        # scontrol's starttime=now: begin time = the current time, as scontrol computes it
        begin = {"set": True, "infinite": False, "number": int(time.time())}
        self._post(f"{API}/job/{unique}", {"begin_time": begin})


def _names(nodes: Sequence[str]) -> list[str]:
    """Validated node names, as a list (v0.0.42's hostlist_string is an array)."""
    try:
        return [validate_node(n) for n in nodes]
    except ConfigError as exc:
        raise SlurmError(str(exc)) from None
