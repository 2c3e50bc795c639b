"""OpenSSH client config, parsed once and looked up per host in microseconds.

asyncssh can read ssh_config itself, but it re-reads the whole file on every connection
(about 11 ms of CPU per connection for a 64-host file: quadratic in cluster size), and
explicit client keys / known_hosts would override the per-host IdentityFile /
UserKnownHostsFile anyway. So the file is tokenised once here and the directives screener
needs are resolved per host with OpenSSH's rules: first value wins, IdentityFile
accumulates, ``Host`` patterns with ``*``/``?``/``!``, case-insensitive keywords,
``Include``, ``%h``/``%d``/``%u``/``%r``/``%p``/``%n``/``%%`` and ``~`` expansion; without
an explicit file, ~/.ssh/config then /etc/ssh/ssh_config. ``Match all`` applies
everywhere; other ``Match`` blocks never apply (``exec`` conditions are not evaluated).
"""

from __future__ import annotations

import getpass
import glob
import os
import shlex
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from screener.errors import ConfigError

# Directives resolved per host; everything else in the file is accepted and ignored.
_WANTED = {"hostname", "port", "user", "identityfile", "userknownhostsfile", "hostkeyalias"}
_MAX_INCLUDE_DEPTH = 16
SYSTEM_CONFIG = Path("/etc/ssh/ssh_config")


@dataclass(frozen=True)
class HostConfig:
    """Where and as whom to connect for one host alias, after ssh_config."""

    alias: str
    hostname: str
    port: int
    user: str | None
    identity_files: tuple[str, ...]
    known_hosts_files: tuple[str, ...]
    host_key_alias: str | None


@dataclass(frozen=True)
class _Block:
    """One ``Host``/``Match`` section: its patterns (None = applies always) and directives."""

    patterns: tuple[str, ...] | None
    directives: tuple[tuple[str, tuple[str, ...]], ...]

    def applies(self, alias: str) -> bool:
        if self.patterns is None:
            return True
        name = alias.lower()
        positive = False
        for pattern in self.patterns:
            if pattern.startswith("!"):
                if fnmatchcase(name, pattern[1:].lower()):
                    return False
            elif fnmatchcase(name, pattern.lower()):
                positive = True
        return positive


class SshConfig:
    """A parsed ssh_config; ``lookup(alias)`` gives the HostConfig for one node."""

    def __init__(self, blocks: list[_Block], path: str | None) -> None:
        self._blocks = blocks
        self.path = path
        self._local_user = getpass.getuser()

    @classmethod
    def load(cls, path: str | None) -> SshConfig:
        """Parse ``path`` (like ``ssh -F``); when None, ~/.ssh/config then /etc/ssh/ssh_config
        as plain ``ssh`` does (either may be missing)."""
        blocks: list[_Block] = []
        user_dir = Path("~/.ssh").expanduser()
        if path is not None:
            if not Path(path).is_file():
                raise ConfigError(f"ssh config {path} does not exist")
            _parse_file(Path(path), blocks, depth=0, base=user_dir)
            return cls(blocks, path)
        for default, base in (
            (user_dir / "config", user_dir),
            (SYSTEM_CONFIG, SYSTEM_CONFIG.parent),
        ):
            if default.is_file():
                _parse_file(default, blocks, depth=0, base=base)
        return cls(blocks, None)

    def lookup(self, alias: str) -> HostConfig:
        """Resolve HostName, Port, User, IdentityFile, UserKnownHostsFile for ``alias``."""
        found: dict[str, tuple[str, ...]] = {}
        identities: list[str] = []
        for block in self._blocks:
            if not block.applies(alias):
                continue
            for key, args in block.directives:
                if key == "identityfile":
                    identities.extend(args)
                else:
                    found.setdefault(key, args)  # OpenSSH: the first obtained value wins
        hostname = _expand(found.get("hostname", ("%h",))[0], alias, alias, None, None)
        port_text = found.get("port", ("22",))[0]
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(f"ssh config {self.path}: bad Port {port_text!r} for {alias}")
        port = int(port_text)
        user = found["user"][0] if "user" in found else None
        subst = (hostname, alias, user or self._local_user, port)
        known = found.get("userknownhostsfile", ())
        if [k.lower() for k in known] == ["none"]:  # would disable checking: not allowed here
            raise ConfigError(f"ssh config {self.path}: UserKnownHostsFile none for {alias}")
        return HostConfig(
            alias=alias,
            hostname=hostname,
            port=port,
            user=user,
            identity_files=tuple(_expand(f, *subst) for f in identities if f.lower() != "none"),
            known_hosts_files=tuple(_expand(f, *subst) for f in known),
            host_key_alias=found["hostkeyalias"][0] if "hostkeyalias" in found else None,
        )


def _parse_file(path: Path, blocks: list[_Block], depth: int, base: Path) -> None:
    """Append the blocks of ``path`` to ``blocks``; relative Includes are under ``base``."""
    if depth > _MAX_INCLUDE_DEPTH:
        raise ConfigError(f"ssh config {path}: Include nested too deeply")
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"ssh config {path}: {exc.strerror}") from None
    patterns: tuple[str, ...] | None = None
    directives: list[tuple[str, tuple[str, ...]]] = []

    def flush() -> None:
        if directives:
            blocks.append(_Block(patterns, tuple(directives)))

    for lineno, raw in enumerate(text.splitlines(), 1):
        words = _split(raw, path, lineno)
        if not words:
            continue
        key, args = words[0].lower(), tuple(words[1:])
        if key == "host":
            flush()
            patterns, directives = args or ("",), []
        elif key == "match":
            flush()
            applies_always = [a.lower() for a in args] == ["all"]
            patterns, directives = (None if applies_always else ()), []
        elif key == "include":
            flush()
            saved = patterns
            for pattern in args:
                full = os.path.expanduser(pattern)
                if not os.path.isabs(full):
                    full = os.path.join(base, full)
                for included in sorted(glob.glob(full)):
                    _parse_file(Path(included), blocks, depth + 1, base)
            patterns, directives = saved, []
        elif key in _WANTED:
            if not args:
                raise ConfigError(f"ssh config {path}:{lineno}: {words[0]} needs a value")
            directives.append((key, args))
    flush()


def _split(line: str, path: Path, lineno: int) -> list[str]:
    """Split one config line into words; ``Key=value`` is the same as ``Key value``."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return []
    head, sep, rest = stripped.partition("=")
    if sep and " " not in head.strip() and "\t" not in head.strip():
        stripped = f"{head.strip()} {rest}"
    try:
        return shlex.split(stripped, comments=True)
    except ValueError as exc:
        raise ConfigError(f"ssh config {path}:{lineno}: {exc}") from None


def _expand(value: str, hostname: str, alias: str, user: str | None, port: int | None) -> str:
    """Expand OpenSSH ``%`` tokens and a leading ``~`` in a path or host name."""
    tokens = {
        "%": "%",
        "h": hostname,
        "n": alias,
        "d": str(Path.home()),
        "u": getpass.getuser(),
        "r": user or getpass.getuser(),
        "p": str(port if port is not None else 22),
    }
    out: list[str] = []
    i = 0
    while i < len(value):
        if value[i] == "%" and i + 1 < len(value) and value[i + 1] in tokens:
            out.append(tokens[value[i + 1]])
            i += 2
        else:
            out.append(value[i])
            i += 1
    return os.path.expanduser("".join(out))
