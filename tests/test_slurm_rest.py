"""The slurmrestd backend's readers and settings, fast: real v0.0.42 replies captured from
Slurm 24.11.5 and 26.05.5 slurmrestd in the emulated cluster (tests/data/slurm/rest/<V>/,
README there), read the way RestSlurm reads them; its checks before any request; the
[slurm] rest_* settings at policy load. The real daemons: tests/test_slurm_contract.py and
tests/test_slurm_rest_cluster.py."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from screener.errors import ConfigError, SlurmError
from screener.policy import SlurmPolicy, policy_from_dict, rest_endpoint
from screener.slurm.job_id import parse_job_id
from screener.slurm.rest_backend import RestSlurm, load_token
from screener.slurm.rest_parse import (
    INVALID_JOB_ID,
    auth_refused,
    job_reply,
    nodes_reply,
    ping_reply,
    reply,
    unique_job_id,
)

DATA = Path(__file__).parent / "data" / "slurm" / "rest"
VERSIONS = {"24.11": "24.11.5", "26.05": "26.05.5"}
REASON = "screener: rd 0.05x peers r42"


def captured(version: str, name: str) -> tuple[int, bytes]:
    """(HTTP status, body) of one captured reply."""
    meta = json.loads((DATA / version / "statuses.json").read_text())["replies"][name]
    suffix = ".txt" if meta.get("transport") == "tcp" else ".json"
    return int(meta["status"]), (DATA / version / f"{name}{suffix}").read_bytes()


def ids(version: str) -> dict[str, str]:
    return dict(json.loads((DATA / version / "statuses.json").read_text())["ids"])


def text_of(version: str, name: str, expected: frozenset[int] = frozenset()) -> str | None:
    status, body = captured(version, name)
    return reply(status, body, f"captured {name}", expected)


@pytest.mark.parametrize("version", VERSIONS)
def test_nodes_a_drained_one_with_its_reason_and_two_partitions(version: str) -> None:
    text = text_of(version, "nodes_one_drained")
    assert text is not None
    nodes = {n.name: n for n in nodes_reply(text)}
    assert sorted(nodes) == ["node01", "node02", "node03"]
    drained = nodes["node02"]
    assert drained.states == {"IDLE", "DRAIN"} and drained.reason == REASON
    assert drained.drained and drained.idle_drained and not drained.busy
    assert set(drained.partitions) == {"debug", "extra"}
    assert nodes["node01"].partitions == ("debug",) and nodes["node01"].busy  # array task 1
    assert nodes["node03"].states == {"IDLE"} and nodes["node03"].reason == ""


@pytest.mark.parametrize("version", VERSIONS)
def test_nodes_reason_changed_at_and_set_by_user(version: str) -> None:
    """v0.0.42's ``reason_changed_at`` ({"set", "infinite", "number"}) and
    ``reason_set_by_user``: when and by whom, aware UTC; no reason, no time nor user (the
    reply says {"set": true, "number": 0} and "" there)."""
    text = text_of(version, "nodes_one_drained")
    assert text is not None
    nodes = {n.name: n for n in nodes_reply(text)}
    second = {"24.11": 11, "26.05": 17}[version]  # the scenario's drain, as captured
    assert nodes["node02"].reason_time == datetime(2026, 11, 28, 10, 4, second, tzinfo=UTC)
    assert nodes["node02"].reason_user == "root"
    assert all(
        (nodes[n].reason_time, nodes[n].reason_user) == (None, "") for n in ("node01", "node03")
    )
    raw = json.loads(text)
    for changed in (
        {"set": False, "infinite": False, "number": 1795860251},
        {"set": True, "infinite": True, "number": 0},
        None,
    ):
        raw["nodes"][1]["reason_changed_at"] = changed
        (node,) = [n for n in nodes_reply(json.dumps(raw)) if n.name == "node02"]
        assert node.reason == REASON and node.reason_time is None, changed  # unknown time


def test_nodes_after_a_rest_drain_carry_its_time_and_user() -> None:
    """24.11's slurmrestd drained node01 and node03 in one POST as root, after node02's
    drain: one time for both, not before node02's, the user the request ran as."""
    text = text_of("24.11", "nodes_after_drain")
    assert text is not None
    nodes = {n.name: n for n in nodes_reply(text)}
    one, three, two = (nodes[n] for n in ("node01", "node03", "node02"))
    assert one.reason == three.reason == "screener: contract"
    assert one.reason_time == three.reason_time and one.reason_user == three.reason_user == "root"
    assert one.reason_time is not None and two.reason_time is not None
    assert timedelta(0) <= one.reason_time - two.reason_time <= timedelta(seconds=5)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_requeued_job_is_pending_for_its_begin_time(version: str) -> None:
    job_id = ids(version)["requeued"]
    job = job_reply(text_of(version, "job_requeued_pending"), parse_job_id(job_id), job_id)
    assert job is not None
    assert (job.state, job.reason, job.restarts, job.nodes) == ("PENDING", "BeginTime", 1, ())
    assert (job.name, job.comment, job.partition) == ("ior-x", "screener=on", "debug")
    running = job_reply(text_of(version, "job_running"), parse_job_id(job_id), job_id)
    assert running is not None
    assert (running.state, running.nodes, running.restarts) == ("RUNNING", ("node03",), 0)


@pytest.mark.parametrize("version", VERSIONS)
def test_array_tasks_by_index_and_by_their_own_id(version: str) -> None:
    known = ids(version)
    arr, task = known["array"], known["array_task_1"]
    text = text_of(version, "job_array")  # GET /job/A: the pending rest and task 1
    first = job_reply(text, parse_job_id(f"{arr}_1"), f"{arr}_1")
    assert first is not None and first.nodes == ("node01",) and first.state == "RUNNING"
    assert first.job_id == f"{arr}_1"  # the id it was asked by, as the CLI backend says it
    assert job_reply(text, parse_job_id(f"{arr}_7"), f"{arr}_7") is None
    assert unique_job_id(text, parse_job_id(f"{arr}_1")) == int(task)
    own = job_reply(text_of(version, "job_array_task"), parse_job_id(task), task)
    assert own is not None and own.nodes == ("node01",)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_unknown_job_is_none_and_other_errors_one_line(version: str) -> None:
    assert text_of(version, "error_unknown_job", frozenset({INVALID_JOB_ID})) is None
    assert job_reply(None, parse_job_id("999999"), "999999") is None
    with pytest.raises(SlurmError, match=r"Invalid job id specified: Unable to query JobId=999999"):
        text_of(version, "error_unknown_job")  # not expected there: an error like any other
    with pytest.raises(SlurmError, match=r"Submit job update against Array Job's JobID") as err:
        text_of(version, "error_release_array_task")
    assert "\n" not in str(err.value)
    # 24.11's slurmrestd runs as root in the emulated cluster; 26.05's as nobody
    words = "Invalid node name specified" if version == "24.11" else "Invalid user id"
    with pytest.raises(SlurmError, match=rf"{words}: Failure to update node nosuchnode"):
        text_of(version, "error_unknown_node")


@pytest.mark.parametrize("version", VERSIONS)
def test_writes_answer_ok_or_in_slurms_words(version: str) -> None:
    for name in ("drain_two", "resume_two", "release"):
        if version == "24.11":
            assert text_of(version, name) is not None
        else:  # slurmrestd as nobody: slurmctld refuses (the contract runs writes on 24.11)
            with pytest.raises(SlurmError, match="Invalid user id"):
                text_of(version, name)
    after = text_of(version, "nodes_after_drain")
    assert after is not None
    reasons = {n.name: n.reason for n in nodes_reply(after) if n.drained}
    if version == "24.11":
        assert reasons == {
            "node01": "screener: contract",
            "node02": REASON,
            "node03": "screener: contract",
        }
    else:
        assert reasons == {"node02": REASON}


@pytest.mark.parametrize("version", VERSIONS)
def test_ping_and_a_refusal_over_tcp(version: str) -> None:
    text = text_of(version, "ping")
    assert text is not None and ping_reply(text) == f"Slurm {VERSIONS[version]}, slurmctld UP"
    with pytest.raises(SlurmError, match=r"HTTP 401: Authentication failure"):
        text_of(version, "tcp_no_token")  # text/plain, not JSON


@pytest.mark.parametrize("version", VERSIONS)
def test_jwt_writes_and_refused_jwts(version: str) -> None:
    """slurmrestd as nobody (SLURM_JWT=daemon, rest_auth/jwt): root's JWT drains and resumes;
    a foreign or an expired one passes slurmrestd and slurmctld refuses it (1007, HTTP 511),
    said in one line that names the JWT; no JWT at all: slurmrestd's own 401."""
    for name in ("jwt_drain", "jwt_resume"):
        status, body = captured(version, name)
        assert auth_refused(status, body, name, token_sent=True) is None
        assert text_of(version, name) is not None
    what = "slurmrestd POST /slurm/v0.0.42/nodes/"
    for name in ("jwt_foreign_drain", "jwt_expired_drain"):
        status, body = captured(version, name)
        assert status == 511
        with pytest.raises(SlurmError, match=r"Protocol authentication error: .*\(1007\)$"):
            text_of(version, name)  # without the hint, still Slurm's own words
        refused = auth_refused(status, body, what, token_sent=True)
        assert refused is not None and "\n" not in str(refused)
        assert str(refused) == (
            f"{what}: Protocol authentication error: Failure to update node node01 (1007); "
            "the JWT was refused (expired, or not signed with slurmctld's jwt_key): renew "
            "slurm.rest_token_file with `scontrol token`"
        )
    status, body = captured(version, "tcp_no_token")
    assert str(auth_refused(status, body, "GET", token_sent=False)) == (
        "GET: HTTP 401: Authentication failure; no JWT sent: set slurm.rest_token_file "
        "(or SLURM_JWT)"
    )
    status, body = captured(version, "error_unknown_node")  # another error: not auth's
    assert auth_refused(status, body, what, token_sent=True) is None


def test_any_bytes_are_data_or_one_slurm_error() -> None:
    """Whatever slurmrestd sends (truncated, garbage, wrong shapes), a SlurmError or data."""
    rng = random.Random(43)
    status, good = captured("24.11", "job_array")
    samples: list[bytes] = [b"", b"null", b"[]", b'{"errors": 3}', b'{"errors": [{}]}', b"\xff"]
    samples += [good[: rng.randrange(len(good))] for _ in range(30)]
    samples += [bytes(rng.randrange(256) for _ in range(40)) for _ in range(30)]
    samples.append(b'{"jobs": [{"job_id": {"set": true, "number": "x"}}]}')
    samples.append(b'{"nodes": [{"name": "bad name;rm"}]}')
    samples.append(b'{"errors": [{"error_number": 1007, "error": "x\\ny"}]}')
    for body in samples:
        for code in (401, status):
            refused = auth_refused(code, body, "fuzz", True)  # never raises itself
            assert refused is None or "\n" not in str(refused)
        try:
            text = reply(status, body, "fuzz")
            if text is not None:
                job_reply(text, parse_job_id("1_1"), "1_1")
                nodes_reply(text) if '"nodes"' in text else None
        except SlurmError as exc:
            assert "\n" not in str(exc)


@pytest.mark.parametrize(
    ("url", "want"),
    [
        (
            "unix:/run/slurmrestd/slurmrestd.socket",
            ("unix", "/run/slurmrestd/slurmrestd.socket", 0),
        ),
        ("http://127.0.0.1:6820", ("http", "127.0.0.1", 6820)),
        ("http://localhost:6820/", ("http", "localhost", 6820)),
        ("https://rest.example.org:443", ("https", "rest.example.org", 443)),
        ("http://[::1]:6820", ("http", "::1", 6820)),
    ],
)
def test_rest_urls_accepted(url: str, want: tuple[str, str, int]) -> None:
    assert rest_endpoint(url) == want


@pytest.mark.parametrize(
    "url",
    [
        "unix:relative.sock",
        "unix:/a/../etc/x",
        "http://127.0.0.1",  # no port
        "http://127.0.0.1:0",
        "http://127.0.0.1:70000",
        "http://user@127.0.0.1:6820",
        "http://127.0.0.1:6820/slurm/v0.0.42",
        "ftp://127.0.0.1:21",
        "http://a b:6820",
        "http://127.0.0.1:6820\r\nX-Injected: 1",
    ],
)
def test_rest_urls_refused_at_policy_load(url: str) -> None:
    with pytest.raises(ConfigError, match=r"slurm.rest_url .* must be unix:/path"):
        policy_from_dict({"slurm": {"rest_url": url}})


@pytest.mark.parametrize(
    ("slurm", "message"),
    [
        ({"backend": "rest"}, "slurm.backend = rest needs slurm.rest_url"),
        ({"rest_url": "http://127.0.0.1:6820", "rest_token_file": "jwt"}, "absolute path"),
        ({"rest_url": "http://127.0.0.1:6820", "rest_user": "Root;x"}, "not a user name"),
        ({"backend": "slurmrestd"}, "must be one of auto, cli, pyslurm, rest"),
    ],
)
def test_rest_settings_refused_in_one_line(slurm: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        policy_from_dict({"slurm": slurm})
    assert "\n" not in str(err.value)


def test_a_rest_policy_loads() -> None:
    p = policy_from_dict(
        {
            "slurm": {
                "backend": "rest",
                "rest_url": "unix:/run/slurmrestd/slurmrestd.socket",
                "rest_token_file": "/etc/screener/slurm.jwt",
                "rest_user": "slurm",
            }
        }
    )
    assert p.slurm.backend == "rest" and p.slurm.rest_user == "slurm"


def test_tokens_as_scontrol_token_prints_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJyb290In0.c2lnbmF0dXJl"
    path = tmp_path / "jwt"
    path.write_text(f"SLURM_JWT={jwt}\n")
    assert load_token(SlurmPolicy(rest_token_file=str(path))) == jwt
    monkeypatch.setenv("SLURM_JWT", jwt)
    assert load_token(SlurmPolicy()) == jwt  # no file: the environment
    monkeypatch.delenv("SLURM_JWT")
    assert load_token(SlurmPolicy()) == ""  # none: rest_auth/local over a unix socket
    path.write_text("SLURM_JWT=abc\r\nX-Injected: yes\n")
    with pytest.raises(SlurmError, match="does not hold a JWT"):
        load_token(SlurmPolicy(rest_token_file=str(path)))
    with pytest.raises(SlurmError, match="No such file"):
        load_token(SlurmPolicy(rest_token_file=str(tmp_path / "missing")))


def test_bad_names_reasons_and_ids_never_reach_slurmrestd(tmp_path: Path) -> None:
    """Refused before any request: the socket does not even exist."""
    client = RestSlurm(f"unix:{tmp_path}/none.sock", 2.0)
    calls: list[tuple[Callable[[], object], str]] = [
        (lambda: client.drain(["node01", "../x"], "screener: x"), "invalid node name"),
        (lambda: client.drain(["node01"], "reason=with'quote"), "drain reason"),
        (lambda: client.resume(["node 1"]), "invalid node name"),
        (lambda: client.job("1/../../nodes"), "invalid Slurm job id"),
        (lambda: client.release("1 2"), "invalid Slurm job id"),
    ]
    for call, match in calls:
        with pytest.raises(SlurmError, match=match):
            call()
    with pytest.raises(SlurmError, match=r"cannot reach slurmrestd at unix:.*none.sock"):
        client.nodes()
    client.drain([], "screener: x")  # nothing to do: no request either
