"""The slurmrestd backend against the emulated cluster's real slurmrestd (24.11, 26.05), run
as nobody with JWT auth as in production: what `auto` picks and says, the unix socket as
well as TCP, and a wrong or expired JWT as one SlurmError line. The operations themselves
are the contract's (tests/test_slurm_contract.py, backend "rest")."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest

from deploy.minicluster import ClusterHandle
from deploy.minicluster.procs import wait_until
from screener.errors import SlurmError
from screener.policy import SlurmPolicy
from screener.slurm import select_client
from screener.slurm.rest_backend import RestSlurm
from tests.hooked_cluster import SLURM_UNDER_TEST

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        SLURM_UNDER_TEST is None,
        reason="the host's Slurm 22.05 has no slurmrestd: run with SCREENER_TEST_SLURM=24.11 "
        "or 26.05",
    ),
]
TAG = "screener: rest cluster test"
# A well-formed HS256 JWT for root that no cluster signed (its key is random per cluster).
FOREIGN = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdW4iOiJyb290IiwiZXhwIjo0MTAyNDQ0ODAwfQ.c2ln"


def env_of(cluster: ClusterHandle, key: str) -> str:
    return cluster.env(inherit=False)[f"SCREENER_MINICLUSTER_REST_{key}"]


def policy(cluster: ClusterHandle, url_key: str = "URL") -> SlurmPolicy:
    """[slurm] as an admin writes it for this cluster: URL and token file."""
    return SlurmPolicy(
        rest_url=env_of(cluster, url_key),
        rest_token_file=env_of(cluster, "TOKEN_FILE"),
        command_timeout_s=8.0,
    )


def token_of(cluster: ClusterHandle, *args: str) -> str:
    """A fresh JWT for root from the cluster's own `scontrol token`."""
    out = cluster.slurm("scontrol", "token", "username=root", *args).stdout
    return out.strip().removeprefix("SLURM_JWT=")


def test_the_cluster_exports_a_jwt_for_root(cluster: ClusterHandle) -> None:
    """The token file is 0600 and holds root's JWT, signed by slurmctld (HS256)."""
    path = Path(env_of(cluster, "TOKEN_FILE"))
    assert path.stat().st_mode & 0o777 == 0o600
    assert (cluster.info.jwt_key.stat().st_mode & 0o777) == 0o600
    header, claims, _sig = path.read_text().strip().split(".")
    assert _part(header)["alg"] == "HS256"
    body = _part(claims)
    assert body["sun"] == "root" and float(str(body["exp"])) > time.time() + 3600, body


def test_auto_uses_slurmrestd_when_its_ping_answers(cluster: ClusterHandle) -> None:
    client, why = select_client(policy(cluster))
    url = env_of(cluster, "URL")
    assert client.name == "rest", why
    assert why == f"rest: {url} answers (Slurm {SLURM_UNDER_TEST}.5, slurmctld UP)"
    assert sorted(n.name for n in client.nodes()) == sorted(cluster.nodes)


def test_auto_says_why_it_did_not(cluster: ClusterHandle, tmp_path: Path) -> None:
    """slurmrestd gone: the local choice (cli here), with the reason appended."""
    url = f"unix:{tmp_path}/gone.sock"
    client, why = select_client(SlurmPolicy(backend="auto", rest_url=url, command_timeout_s=4))
    assert client.name != "rest"
    assert f"(rest: {url} did not answer: slurmrestd GET /slurm/v0.0.42/ping/: cannot reach" in why


def test_the_unix_socket_takes_the_jwt_too(cluster: ClusterHandle) -> None:
    """Same slurmrestd on its socket, JWT only as on TCP: with root's it drains and resumes,
    without one it is refused."""
    client = RestSlurm.from_policy(policy(cluster, "UNIX_URL"))
    node = cluster.nodes[1]
    client.drain([node], f"{TAG} unix")
    assert client.nodes([node])[0].reason == f"{TAG} unix"
    assert "DRAIN" in client.nodes([node])[0].states
    client.resume([node])
    assert "DRAIN" not in client.nodes([node])[0].states
    with pytest.raises(SlurmError, match=r"HTTP 401: Authentication failure; no JWT sent"):
        RestSlurm(env_of(cluster, "UNIX_URL"), 8.0).nodes()


def test_without_a_jwt_tcp_is_refused_in_one_line(cluster: ClusterHandle) -> None:
    with pytest.raises(SlurmError, match=r"GET /slurm/v0.0.42/nodes/: HTTP 401: Auth") as exc:
        RestSlurm(env_of(cluster, "URL"), 8.0).nodes()
    assert "\n" not in str(exc.value)


def test_a_wrong_or_expired_jwt_is_one_slurm_error_line(cluster: ClusterHandle) -> None:
    """A token the cluster did not sign, and one of its own past its lifespan: each refused as
    one line saying the JWT was refused; `auto` then stays local and says why."""
    url = env_of(cluster, "URL")
    short = token_of(cluster, "lifespan=1")
    RestSlurm(url, 8.0, short).nodes()  # valid for a second: it is the cluster's own
    wait_until(
        "the one-second token expired",
        lambda: time.time() > _exp(short) + 1,
        time.monotonic() + 10,
    )
    for token in (FOREIGN, short):
        with pytest.raises(SlurmError) as exc:
            RestSlurm(url, 8.0, token).drain([cluster.nodes[0]], TAG)
        line = str(exc.value)
        assert "\n" not in line and "the JWT was refused" in line, line
    assert "DRAIN" not in cluster.slurm("sinfo", "-h", "-N", "-o", "%N %T").stdout.upper()
    client, why = select_client(SlurmPolicy(rest_url=url, command_timeout_s=8.0))
    assert client.name != "rest" and "no JWT sent" in why, why


def _part(b64: str) -> dict[str, object]:
    """One base64url part of a JWT (header or claims), decoded."""
    data = json.loads(base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)))
    assert isinstance(data, dict)
    return data


def _exp(token: str) -> float:
    return float(str(_part(token.split(".")[1])["exp"]))


def test_forced_rest_without_a_url_is_one_line() -> None:
    with pytest.raises(SlurmError, match=r"slurm\.backend = rest needs slurm\.rest_url"):
        select_client(SlurmPolicy(backend="rest"))
