"""Pure parts of the transport layer: remote command quoting, check(), make_transport, and
the ssh_config resolver (checked against OpenSSH's own ``ssh -G``)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from screener.app import make_transport
from screener.errors import ConfigError, TransportError
from screener.policy import TransportPolicy
from screener.process import run_command
from screener.transport import CommandResult, check
from screener.transport.base import is_remote_timeout, remote_command
from screener.transport.local import LocalTransport
from screener.transport.ssh_config import SshConfig, _expand

DATA = Path(__file__).parent / "data" / "ssh"

NASTY = [
    "plain",
    "two words",
    "it's",
    '"double"',
    "$(touch /tmp/screener-pwned)",
    "`id`",
    "; echo injected",
    "a && b || c",
    "*",
    "$HOME",
    "back\\slash",
    "new\nline",
    "",
    "-n",
    "ünïcode",
]


def _result(status: int, stderr: str = "") -> CommandResult:
    return CommandResult("node01", ("fio", "--x"), status, "", stderr, 0.1)


def test_remote_command_wraps_in_timeout_and_round_trips() -> None:
    cmd = remote_command(["fio", "--name=a b"], 30)
    assert shlex.split(cmd) == ["timeout", "-k", "5", "30", "fio", "--name=a b"]
    assert remote_command(["x"], 1.5).split()[:4] == ["timeout", "-k", "5", "1.5"]


def test_remote_command_rejects_empty_argv() -> None:
    with pytest.raises(ConfigError):
        remote_command([], 10)


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_remote_command_string_reaches_a_real_shell_verbatim(shell: str) -> None:
    # sshd runs `$SHELL -c <string>`: do exactly that and compare what printf received.
    cmd = remote_command(["printf", "%s\\n", *NASTY], 10)
    result = run_command([shell, "-c", cmd], timeout=10)
    assert result.exit_status == 0, result.stderr
    assert result.stdout == "".join(f"{a}\n" for a in NASTY)
    assert not Path("/tmp/screener-pwned").exists()


def test_check_passes_zero_and_raises_first_stderr_line() -> None:
    ok = _result(0)
    assert check(ok) is ok
    with pytest.raises(TransportError) as info:
        check(_result(2, "\n  fio: file not found\nmore\n"))
    assert info.value.kind == "failed"
    assert str(info.value) == "node01: failed: fio exited with status 2: fio: file not found"
    with pytest.raises(TransportError, match="status 1: no stderr"):
        check(_result(1))


def test_is_remote_timeout_needs_status_and_duration() -> None:
    assert is_remote_timeout(124, 10.0, 10.0)
    assert is_remote_timeout(137, 15.1, 10.0)
    assert not is_remote_timeout(124, 0.2, 10.0)  # the command itself exited 124
    assert not is_remote_timeout(1, 30.0, 10.0)


def test_make_transport_picks_by_kind(tmp_path: Path) -> None:
    assert isinstance(make_transport(TransportPolicy(kind="local")), LocalTransport)
    from screener.transport.asyncssh_transport import AsyncsshTransport
    from screener.transport.fabric_transport import FabricTransport

    cfg = tmp_path / "ssh_config"
    cfg.write_text("")
    policy = TransportPolicy(kind="asyncssh", ssh_config=str(cfg))
    assert isinstance(make_transport(policy), AsyncsshTransport)
    fabric = TransportPolicy(kind="fabric", ssh_config=str(cfg))
    assert isinstance(make_transport(fabric), FabricTransport)
    with pytest.raises(ConfigError, match="unknown transport kind"):
        make_transport(TransportPolicy(kind="telnet"))


def test_missing_ssh_config_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        make_transport(TransportPolicy(ssh_config=str(tmp_path / "nope")))
    with pytest.raises(ConfigError, match="does not exist"):
        make_transport(TransportPolicy(kind="fabric", ssh_config=str(tmp_path / "nope")))


def _ssh_g(config: Path, alias: str) -> dict[str, list[str]]:
    """OpenSSH's own resolution of ``alias`` (``ssh -G``), as key -> values."""
    out = run_command(["ssh", "-G", "-F", str(config), alias], timeout=10)
    assert out.exit_status == 0, out.stderr
    values: dict[str, list[str]] = {}
    for line in out.stdout.splitlines():
        key, _, value = line.partition(" ")
        values.setdefault(key, []).append(value)
    return values


@pytest.mark.parametrize("alias", ["node01", "node09", "gpu1", "x.example", "bastion", "other"])
def test_lookup_matches_openssh(alias: str) -> None:
    config = DATA / "config"
    mine = SshConfig.load(str(config)).lookup(alias)
    theirs = _ssh_g(config, alias)
    assert mine.hostname == theirs["hostname"][0]
    assert str(mine.port) == theirs["port"][0]
    assert mine.user == theirs["user"][0]
    subst = (mine.hostname, alias, mine.user, mine.port)
    assert list(mine.identity_files) == [_expand(f, *subst) for f in theirs["identityfile"]]
    if mine.known_hosts_files:  # else: OpenSSH's defaults, which we replace by policy's
        assert " ".join(mine.known_hosts_files) == theirs["userknownhostsfile"][0]
    assert mine.host_key_alias == theirs.get("hostkeyalias", [None])[0]


def test_lookup_details() -> None:
    node = SshConfig.load(str(DATA / "config")).lookup("node01")
    assert node.hostname == "10.0.0.node01" and node.port == 2201
    assert node.identity_files[1] == "/etc/keys/10.0.0.node01-admin.key"
    assert node.identity_files[0] == str(Path("~/.ssh/id_node").expanduser())
    gpu = SshConfig.load(str(DATA / "config")).lookup("gpu1")
    assert gpu.known_hosts_files == ("/etc/screener/known_hosts", "/etc/other known")


def test_include_and_unset_defaults(tmp_path: Path) -> None:
    extra = tmp_path / "extra.conf"
    extra.write_text("Host inc*\n  HostName 192.0.2.1\n  Port 2022\n")
    main = tmp_path / "config"
    main.write_text(f"Include {tmp_path}/*.conf\nHost *\n  User root\n")
    cfg = SshConfig.load(str(main))
    inc = cfg.lookup("inc1")
    assert (inc.hostname, inc.port, inc.user) == ("192.0.2.1", 2022, "root")
    plain = cfg.lookup("plain")
    assert (plain.hostname, plain.port, plain.identity_files) == ("plain", 22, ())


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("Host x\n  Port 99999\n", "bad Port"),
        ("Host x\n  UserKnownHostsFile none\n", "UserKnownHostsFile none"),
        ("Host x\n  HostName 'unterminated\n", "No closing quotation"),
        ("Host x\n  HostName\n", "needs a value"),
    ],
)
def test_bad_ssh_config_is_config_error(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "config"
    path.write_text(text)
    with pytest.raises(ConfigError, match=fragment):
        SshConfig.load(str(path)).lookup("x")


def test_default_config_is_the_users_with_relative_includes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ssh_dir = tmp_path / ".ssh"
    (ssh_dir / "conf.d").mkdir(parents=True)
    (ssh_dir / "conf.d" / "nodes.conf").write_text("Host n1\n  HostName 192.0.2.7\n")
    (ssh_dir / "config").write_text("Include conf.d/*.conf\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert SshConfig.load(None).lookup("n1").hostname == "192.0.2.7"


def test_fabric_missing_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fabric", None)  # makes `import fabric` fail
    with pytest.raises(ConfigError) as info:
        make_transport(TransportPolicy(kind="fabric"))
    assert str(info.value) == "transport fabric needs `pip install screener[fabric]`"
