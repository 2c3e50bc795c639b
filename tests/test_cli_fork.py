"""tests/cli_fork.py: a CLI call forked from the test-side server behaves as the same call
made as a real `python -m screener.cli` process (each test makes both and compares)."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from admin_seed import seed_fleet

from screener.store import open_store
from screener.store.migrate import upgrade
from tests import cli_fork

pytestmark = pytest.mark.skipif(
    os.environ.get(cli_fork.ENV_SWITCH) == "0",
    reason=f"{cli_fork.ENV_SWITCH}=0: every CLI call is a real process",
)
PREFIX = [sys.executable, "-m", "screener.cli"]
WAIT_S = 60.0  # a loaded 2-core machine: a real process can take seconds to get going


def real(args: list[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", WAIT_S)
    if "input" not in kw:
        kw["stdin"] = subprocess.DEVNULL
    return subprocess.run([*PREFIX, *args], **kw)


@pytest.fixture
def forked_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call that would fall back to a real process fails instead: the comparisons below
    must compare a forked call with a real one, not two real ones."""

    def refuse(*_a: object, **_kw: object) -> None:
        raise AssertionError("cli_fork ran a real process: the server is missing or refused")

    monkeypatch.setattr(cli_fork, "_real", refuse)


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An upgraded SQLite store with the admin tests' seeded fleet."""
    url = f"sqlite:///{tmp_path_factory.mktemp('fork') / 'fleet.db'}"
    upgrade(url)
    with open_store(url) as store:
        seed_fleet(store, datetime.now(UTC).replace(microsecond=0))
    return url


def base_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCREENER_", "COLUMNS"))}
    return env | {"SCREENER_DATABASE_URL": url, "SCREENER_CONFIG": ""}


def same(a: subprocess.CompletedProcess[Any], b: subprocess.CompletedProcess[Any]) -> None:
    assert (a.args, a.returncode, a.stdout, a.stderr) == (b.args, b.returncode, b.stdout, b.stderr)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["runs", "--json"], 0),
        (["--version"], 0),
        (["nodes", "--bogus"], 2),  # argparse's usage error
        (["show", "9999"], 1),  # one line on stderr
    ],
)
def test_exit_code_stdout_and_stderr_are_a_real_processs(
    forked_only: None, store_url: str, args: list[str], code: int
) -> None:
    env = base_env(store_url)
    forked = cli_fork.run(args, env=env, timeout=WAIT_S)
    assert forked.returncode == code, forked.stderr
    same(forked, real(args, env=env))
    assert forked.stdout or forked.stderr


def test_check_text_and_uncaptured_output(
    forked_only: None, store_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    env = base_env(store_url)
    with pytest.raises(subprocess.CalledProcessError) as forked:
        cli_fork.run(["show", "9999"], env=env, check=True)
    with pytest.raises(subprocess.CalledProcessError) as really:
        real(["show", "9999"], env=env, check=True)
    assert forked.value.returncode == really.value.returncode == 1
    assert (forked.value.cmd, forked.value.stderr) == (really.value.cmd, really.value.stderr)
    as_bytes = cli_fork.run(["--version"], env=env, text=False)
    assert as_bytes.stdout == real(["--version"], env=env, text=False).stdout
    assert isinstance(as_bytes.stdout, bytes) and as_bytes.stdout.startswith(b"screener ")
    capfd.readouterr()
    loose = cli_fork.run(["--version"], env=env, capture_output=False)
    forked_out = capfd.readouterr().out
    real(["--version"], env=env, capture_output=False)
    assert loose.stdout is None and loose.stderr is None
    assert forked_out == capfd.readouterr().out == as_bytes.stdout.decode()


def test_stdin_is_the_input(forked_only: None, store_url: str) -> None:
    """The config read from /dev/stdin: what `input` wrote, in both."""
    env = base_env(store_url)
    config = '[slurm]\ndry_run = true\n[verdict]\nshadow = ["peer_tail"]\n'
    args = ["--config", "/dev/stdin", "doctor", "--json"]
    forked = cli_fork.run(args, env=env, input=config, timeout=WAIT_S)
    same(forked, real(args, env=env, input=config))
    assert json.loads(forked.stdout)["shadow_rules"].startswith("peer_tail")
    # without input, stdin is /dev/null: an empty config, the defaults
    empty = cli_fork.run(args, env=env, timeout=WAIT_S)
    assert json.loads(empty.stdout)["shadow_rules"].startswith("none")


@pytest.fixture
def fresh_server() -> Iterator[None]:
    """A server started within the test (under its monkeypatched environment), stopped
    after it; the next test starts another."""
    cli_fork.stop_server()
    yield
    cli_fork.stop_server()


def test_env_cwd_and_umask_are_the_calls_not_the_servers(
    fresh_server: None, forked_only: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The server starts with SLURM_CONF and SCREENER_CONFIG set: a call without them must
    # not see them (os.environ replaced, not updated).
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "server-slurm.conf"))
    monkeypatch.setenv("SCREENER_CONFIG", str(tmp_path / "server.toml"))
    cli_fork.run(["--version"], timeout=WAIT_S)  # starts the server
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "SCREENER_CONFIG")}
    env["SCREENER_DATABASE_URL"] = "sqlite:///relative.db"  # in the cwd
    old = os.umask(0o027)
    try:
        results = {}
        for how in ("forked", "real"):
            where = tmp_path / how
            where.mkdir()
            call = cli_fork.run if how == "forked" else real
            up = call(["db", "upgrade"], env=env, cwd=where)
            doctor = call(["doctor", "--json"], env=env, cwd=where)
            modes = {p.name: oct(p.stat().st_mode) for p in sorted(where.iterdir())}
            results[how] = (up.returncode, up.stdout, up.stderr, doctor.stdout, modes)
    finally:
        os.umask(old)
    assert results["forked"] == results["real"]
    doc = json.loads(results["forked"][3])
    assert doc["database"] == "sqlite:///relative.db"
    assert doc["config"] == "/etc/screener/screener.toml"  # not the server's SCREENER_CONFIG
    assert "SLURM_CONF unset" in doc["why"]
    assert results["forked"][4] == {"relative.db": "0o100640"}  # umask 027


def test_columns_80_gives_an_80_column_table_as_in_a_fresh_process(
    forked_only: None, store_url: str
) -> None:
    env = base_env(store_url)
    widths = {}
    for columns in ("80", "120", None):
        call_env = env if columns is None else env | {"COLUMNS": columns}
        forked = cli_fork.run(["nodes"], env=call_env, timeout=WAIT_S)
        assert forked.returncode == 0, forked.stderr
        same(forked, real(["nodes"], env=call_env))
        widths[columns] = max(len(line) for line in forked.stdout.splitlines())
    # the table wraps to 80 columns; 120 or a pipe (200 wide) leave it its natural width
    assert widths["80"] <= 80 < widths["120"] == widths[None] <= 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def refused(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
    return False


def server_children() -> list[int]:
    server = cli_fork._SERVER
    assert server is not None
    pid = server.proc.pid
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_timeout_kills_the_child_and_raises_timeout_expired(
    forked_only: None, store_url: str
) -> None:
    env = base_env(store_url)
    port = free_port()
    args = ["exporter", "--listen", f"127.0.0.1:{port}"]
    serving = f"serving http://127.0.0.1:{port}/metrics\n".encode()
    with pytest.raises(subprocess.TimeoutExpired) as forked:
        cli_fork.run(args, env=env, timeout=5)
    assert refused(port) and server_children() == []  # killed and reaped
    with pytest.raises(subprocess.TimeoutExpired) as really:
        real(args, env=env, timeout=5)
    assert refused(port)
    assert (forked.value.cmd, forked.value.timeout) == (really.value.cmd, really.value.timeout)
    assert forked.value.output == serving and forked.value.stderr is None
    assert really.value.output in (None, serving)  # a real process may not be there yet


def first_line(fd: int) -> bytes:
    """The first line written to the pipe ``fd`` (select, no sleep)."""
    got = b""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while not got.endswith(b"\n"):
            assert sel.select(WAIT_S), f"nothing on the pipe after {WAIT_S} s: {got!r}"
            more = os.read(fd, 4096)
            assert more, f"the pipe closed: {got!r}"
            got += more
    return got


@contextlib.contextmanager
def serving_exporter(how: str, env: dict[str, str]) -> Iterator[tuple[int, Any]]:
    """``screener exporter`` started forked or as a real process, once it says it serves:
    (its pid, its wait(timeout)); killed and reaped on the way out."""
    args = ["exporter", "--listen", f"127.0.0.1:{free_port()}"]
    with contextlib.ExitStack() as stack:
        read_end, write_end = os.pipe()
        stack.callback(os.close, read_end)
        try:
            null = stack.enter_context(open(os.devnull, "rb"))
            if how == "forked":
                child = cli_fork.start(args, env=env, fds=(null.fileno(), write_end, 2))
                assert child is not None
                stack.enter_context(child)  # closed: the server kills what still runs
                pid, wait = child.pid, child.wait
            else:
                proc = subprocess.Popen([*PREFIX, *args], env=env, stdin=null, stdout=write_end)
                stack.callback(proc.wait)
                stack.callback(proc.kill)  # first (a no-op once it ended), then wait
                pid, wait = proc.pid, proc.wait
        finally:
            os.close(write_end)  # the child has it: EOF when the child is gone
        assert first_line(read_end).startswith(b"serving http://127.0.0.1:")
        yield pid, wait


@contextlib.contextmanager
def sigint(handler: Any) -> Iterator[None]:
    """The caller's SIGINT disposition for a while: what its children inherit. pytest run
    in the background of a script (`make test &`) has SIGINT ignored, a terminal's has not."""
    old = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@pytest.mark.parametrize(
    ("signum", "code"),
    [
        (signal.SIGKILL, -signal.SIGKILL),  # a signal death: negative, as subprocess says
        (signal.SIGINT, 130),  # Python's SIGINT handler (KeyboardInterrupt), not SIG_DFL
        (signal.SIGTERM, 0),  # the exporter's own handler: a clean stop
    ],
    ids=["SIGKILL", "SIGINT", "SIGTERM"],
)
def test_a_signal_ends_the_child_as_it_ends_a_real_process(
    forked_only: None, store_url: str, signum: int, code: int
) -> None:
    env = base_env(store_url)
    results = []
    # as from a terminal: SIGINT not ignored, whatever the suite was started from
    with sigint(signal.default_int_handler):
        for how in ("forked", "real"):
            with serving_exporter(how, env) as (pid, wait):
                os.kill(pid, signum)
                results.append(wait(WAIT_S))
    assert results == [code, code]


def ignored_signals(pid: int) -> int:
    """The SigIgn mask of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no SigIgn in /proc/{pid}/status")


@pytest.mark.parametrize(
    "handler", [signal.SIG_IGN, signal.default_int_handler], ids=["ignored", "python"]
)
def test_the_callers_ignored_sigint_is_the_childs_as_for_a_real_process(
    forked_only: None, store_url: str, handler: Any
) -> None:
    env = base_env(store_url)
    masks = []
    with sigint(handler):
        for how in ("forked", "real"):
            with serving_exporter(how, env) as (pid, wait):
                masks.append(ignored_signals(pid))
                os.kill(pid, signal.SIGTERM)  # the exporter's clean stop, either way
                assert wait(WAIT_S) == 0
    assert masks[0] == masks[1]
    sigint_bit = 1 << (signal.SIGINT - 1)
    assert bool(masks[0] & sigint_bit) == (handler is signal.SIG_IGN)


def test_a_call_whose_startup_environment_differs_runs_as_a_real_process(
    store_url: str,
) -> None:
    env = base_env(store_url)
    child = cli_fork.start(["--version"], env=env)
    assert child is not None  # the same environment: forked
    with child:
        assert child.wait(WAIT_S) == 0
    for name, value in (("PYTHONHASHSEED", "1"), ("LC_ALL", "C"), ("HOME", "/nonexistent")):
        assert cli_fork.start(["--version"], env=env | {name: value}) is None, name
    # and run() then makes the real process
    done = cli_fork.run(["--version"], env=env | {"PYTHONHASHSEED": "1"})
    assert done.returncode == 0 and done.stdout.startswith("screener ")


def test_argv_is_after_the_module_prefix() -> None:
    with pytest.raises(ValueError, match=r"after `python -m screener\.cli`"):
        cli_fork.run([*PREFIX, "--version"])


def test_refusal_names_the_variable_or_the_stale_code() -> None:
    request = cli_fork._Request(
        argv=["--version"], env={"A": "1"}, cwd="/", umask=0o22, sigign=[], sigblk=[], fds=[7, 8, 9]
    )
    stamp = cli_fork._fingerprint()
    assert cli_fork._refusal(request, stamp, {"A": "1"}, {"A"}) == ""
    assert cli_fork._refusal(request, stamp, {"A": "2"}, {"A"}).startswith("$A differs")
    assert cli_fork._refusal(request, stamp, {}, {"A"}).startswith("$A differs")  # added
    assert cli_fork._refusal(request, stamp, {"A": "1"}, set()) == ""  # not read at import
    with_locale = cli_fork._Request(**{**vars(request), "env": {"A": "1", "LC_ALL": "C"}})
    assert cli_fork._refusal(with_locale, stamp, {"A": "1"}, set()).startswith("$LC_ALL")
    assert cli_fork._refusal(request, "older", {"A": "1"}, {"A"}).startswith("stale")


def test_import_time_reads_are_recorded_but_a_library_search_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ctypes.util

    monkeypatch.setenv("CLI_FORK_PRESENT", "1")
    original = type(os.environ).__getitem__
    with cli_fork._env_reads() as names:
        os.environ.get("CLI_FORK_ABSENT")
        assert "CLI_FORK_PRESENT" in os.environ
        ctypes.util.find_library("cli-fork-no-such-library")  # copies the whole environment
    assert names == {"CLI_FORK_ABSENT", "CLI_FORK_PRESENT"}
    assert type(os.environ).__getitem__ is original  # the spy is gone
