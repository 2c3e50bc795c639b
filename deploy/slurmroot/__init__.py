"""A newer Slurm beside the host's: a Debian root filesystem (mmdebstrap) whose /usr is bound
over the host's /usr inside a private mount namespace.

    root = build("24.11")                    # once; cached, stamped, atomic
    argv = exec_argv(root.path, ["scontrol", "-V"])   # runs the root's scontrol

Everything outside /usr (/work, /tmp, /root/.pyenv, /run, state dirs) stays the host's: the
project's venv python runs under the root's (newer) glibc and libraries. Both sides are
usr-merged (/bin, /sbin, /lib, /lib64 are symlinks into /usr), so one bind of /usr replaces
every program and library; /etc/ld.so.cache and /etc/alternatives are the only files outside
/usr that must match it (see EXEC_SCRIPT).

Every external command is an argv list built by a pure function (as deploy/minicluster/argv.py);
nothing goes through a shell with untrusted text: the one `sh -c` script is a constant that
only uses its positional parameters.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE = Path("/var/cache/screener/slurm-root")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
STAMP = "slurmroot.json"  # written last inside the root: its presence means "done"

# Slurm release -> the Debian suite that ships it (checked against dists/*/Packages.xz,
# 2026-11-28: trixie 24.11.5-4+deb13u1; forky and sid both 26.05.5-1, forky is preferred:
# testing moves less often than unstable).
SUITES: dict[str, str] = {"24.11": "trixie", "26.05": "forky"}

# What a node and the controller run, beyond the Essential set (dash, coreutils, util-linux...).
SLURM_PACKAGES = (
    "slurmctld",
    "slurmd",  # pulls slurmstepd's package (slurm-wlm-basic-plugins and libslurm*)
    "slurm-client",  # srun, sbatch, scontrol, sinfo, squeue, scancel
    "slurmrestd",
    "slurm-wlm-jwt-plugin",  # auth/jwt (slurmrestd has rest_auth/jwt): its writes on 26.05
    "munge",  # munged + libmunge (the auth/munge plugin links it)
)
NODE_PACKAGES = (
    "fio",  # the probe
    "openssh-client",  # ssh from the controller side (screener's transport, tests)
    "openssh-server",  # each node's sshd
    "sysstat",  # iostat during probes
    "procps",  # ps/pgrep/kill, used by job steps and the cluster's health checks
    "iproute2",
    "util-linux",
    "mount",  # mount/umount inside a node (scratch, fault overlays)
    "hostname",  # `hostname` in job steps (not Essential in trixie)
    "nvme-cli",  # facts: nvme smart-log (absent on loop devices, but the probe looks for it)
    "pciutils",  # facts: PCIe link
)
# The shared libraries the pyenv-built CPython 3.11 (and its stdlib extension modules) link,
# so the venv's python, bound under the root's /usr, finds them (names as in trixie/forky:
# the 64-bit-time_t transition renamed several, e.g. libssl3 -> libssl3t64). Tk and nis
# (libnsl2, gone from forky) are left out: screener imports neither.
PYTHON_LIB_PACKAGES = (
    "libbz2-1.0",
    "libcrypt1",
    "libexpat1",
    "libffi8",
    "libgdbm6t64",
    "liblzma5",
    "libncursesw6",
    "libreadline8t64",
    "libsqlite3-0",
    "libssl3t64",
    "libtirpc3t64",
    "libuuid1",
    "zlib1g",
)
PACKAGES = SLURM_PACKAGES + NODE_PACKAGES + PYTHON_LIB_PACKAGES

# Documentation and translations are most of a root's size and nothing reads them; the
# slurm.conf(5) and other section 5/8 man pages stay, to compare options against.
DPKG_OPTIONS = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/man/*",
    "path-include=/usr/share/man/man1/*",
    "path-include=/usr/share/man/man5/*",
    "path-include=/usr/share/man/man8/*",
)

# Bound over the host's paths, in this order, by EXEC_SCRIPT. /usr last: until then every
# `mount` is the host's own binary with the host's libraries.
#   /etc/ld.so.cache: the root's loader should search the root's cache. With the host's,
#     things still ran (a miss falls back to the default directories), but 550 of its 670
#     entries name files the root lacks, and the root's own libraries are not in it.
#   /etc/alternatives: /usr/bin/awk, pager, mpirun... are symlinks into it. Without this
#     bind `awk` is "not found" (the host's points at gawk, the root has mawk), and
#     screener's facts script runs awk.
BIND_ETC = ("etc/ld.so.cache", "etc/alternatives")
USR_MERGED_LINKS = ("bin", "sbin", "lib", "lib64")
# A build without these failed, whatever mmdebstrap said (Debian's multiarch plugin dir).
REQUIRED_FILES = (
    "usr/sbin/slurmctld",
    "usr/sbin/slurmd",
    "usr/sbin/slurmstepd",
    "usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so",
    "usr/lib/x86_64-linux-gnu/slurm-wlm/rest_auth_jwt.so",
)

# $1 = root. Binds read-only (the cached root is shared by every cluster: nothing run inside
# may change it), then becomes the command (exec: same pid, so a launcher's recorded pid
# stays the daemon's). Constant text; the root and the command are positional parameters.
EXEC_SCRIPT = (
    'r="$1"; shift; '
    'mount --bind -o ro "$r/etc/ld.so.cache" /etc/ld.so.cache && '
    'mount --bind -o ro "$r/etc/alternatives" /etc/alternatives && '
    'mount --bind -o ro "$r/usr" /usr && '
    'exec "$@"'
)


class SlurmRootError(Exception):
    """A one-line reason the root cannot be built or used."""


@dataclass(frozen=True)
class Stamp:
    """What a finished root holds, read from its stamp file."""

    version: str  # the release asked for: "24.11"
    suite: str
    mirror: str
    slurm: str  # dpkg version of slurmctld in the root: "24.11.5-4+deb13u1"
    glibc: str  # dpkg version of libc6 in the root
    packages: tuple[str, ...]
    build_seconds: float
    size_bytes: int
    release_expired: bool  # the mirror's Release was past Valid-Until when built

    def to_json(self) -> dict[str, object]:
        return {**self.__dict__, "packages": list(self.packages)}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Stamp:
        pk = data["packages"]
        assert isinstance(pk, list)
        return cls(
            version=str(data["version"]),
            suite=str(data["suite"]),
            mirror=str(data["mirror"]),
            slurm=str(data["slurm"]),
            glibc=str(data["glibc"]),
            packages=tuple(str(p) for p in pk),
            build_seconds=float(str(data["build_seconds"])),
            size_bytes=int(str(data["size_bytes"])),
            release_expired=bool(data.get("release_expired", False)),
        )


@dataclass(frozen=True)
class SlurmRoot:
    path: Path
    stamp: Stamp
    built_now: bool  # False: found in the cache


# -- pure argv builders ---------------------------------------------------------------------
def suite_for(version: str) -> str:
    try:
        return SUITES[version]
    except KeyError:
        known = ", ".join(sorted(SUITES))
        raise SlurmRootError(f"no Debian suite for Slurm {version} (known: {known})") from None


def root_path(version: str, cache: Path = DEFAULT_CACHE) -> Path:
    return cache / version


def mmdebstrap_argv(
    suite: str, target: Path, mirror: str, packages: tuple[str, ...], allow_expired: bool = False
) -> list[str]:
    """Build a root into `target` (which must not exist or be empty)."""
    # Only for a mirror whose testing Release is past Valid-Until (release_expired).
    expired = ["--aptopt=Acquire::Check-Valid-Until false"] if allow_expired else []
    return [
        # In root mode mmdebstrap mounts /proc, /sys, /dev/pts, /dev/shm under the target for
        # the whole build; on the host those mounts would be copied into every mount
        # namespace created meanwhile (a running minicluster's nodes) and stay there.
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "mmdebstrap",
        "--mode=root",  # we are root: real ownership, no user-namespace id mapping
        "--variant=essential",  # Essential:yes only; apt itself is not needed inside
        "--format=directory",  # a plain tree to bind-mount, not a tarball
        "--components=main",
        f"--include={','.join(packages)}",  # their hard dependencies come along
        *(f"--dpkgopt={opt}" for opt in DPKG_OPTIONS),
        *expired,
        "--quiet",  # progress bars would flood a log; errors still print
        suite,
        str(target),
        mirror,
    ]


def dpkg_version_argv(root: Path, package: str) -> list[str]:
    """The installed version of `package` in the root, read by the host's dpkg-query."""
    return [
        "dpkg-query",
        f"--admindir={root / 'var/lib/dpkg'}",  # the root's package database, no chroot
        "--show",
        "--showformat=${Version}",
        package,
    ]


def exec_argv(root: Path, cmd: list[str]) -> list[str]:
    """Run cmd in a fresh private mount namespace where the root's /usr is the /usr.

    The pid of the returned command is cmd's own (unshare without --fork, then exec)."""
    return [
        "unshare",
        "--mount",  # a private mount table: the binds exist only for cmd and its children
        "--propagation",
        "private",  # nothing mounted here reaches the host, nor the reverse
        "--",
        "/bin/sh",  # the host's dash: it runs before /usr is replaced
        "-c",
        EXEC_SCRIPT,  # constant; values below are positional parameters, never parsed
        "slurmroot-exec",  # $0
        str(root),  # $1
        *cmd,
    ]


def bind_argvs(root: Path) -> list[list[str]]:
    """The same binds as EXEC_SCRIPT, one `mount` each, for a namespace that already exists
    (a minicluster node's holder: run each via `nsenter -t HOLDER -m`)."""
    return [["mount", "--bind", "-o", "ro", str(root / rel), "/" + rel] for rel in BIND_ETC] + [
        ["mount", "--bind", "-o", "ro", str(root / "usr"), "/usr"]
    ]


# -- checks ---------------------------------------------------------------------------------
def usr_merged(root: Path) -> bool:
    """Are /bin, /sbin, /lib, /lib64 of `root` symlinks to usr/...? (/lib64 may be absent)."""
    for name in USR_MERGED_LINKS:
        p = root / name
        if name == "lib64" and not p.exists() and not p.is_symlink():
            continue
        if not p.is_symlink() or os.readlink(p).lstrip("/") != f"usr/{name}":
            return False
    return True


def check_mirror(mirror: str, suite: str, timeout: float = 30.0) -> dict[str, str]:
    """The suite's InRelease header fields (Date, Valid-Until, ...); SlurmRootError (one line)
    when the mirror does not serve it."""
    import urllib.error  # here, not at the top: the minicluster imports this module, and
    import urllib.request  # these two cost ~80 ms that only a build needs

    url = f"{mirror.rstrip('/')}/dists/{suite}/InRelease"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            text = resp.read(1 << 16).decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SlurmRootError(f"mirror unreachable: {url}: {reason}") from None
    return release_fields(text)


def release_fields(inrelease: str) -> dict[str, str]:
    """`Key: value` lines of a (clear-signed) Release file, up to its first list field."""
    fields: dict[str, str] = {}
    for line in inrelease.splitlines():
        if line.startswith("-----BEGIN PGP SIGNED") or line.startswith("Hash:") or not line:
            continue
        if line.startswith(" ") or line.endswith(":"):
            break  # the checksum lists: nothing of interest after them
        key, sep, value = line.partition(": ")
        if sep:
            fields[key] = value.strip()
    return fields


def release_expired(fields: dict[str, str], now: float | None = None) -> bool:
    """Is the Release file past its Valid-Until (testing/unstable carry one; stable does not)?

    A stale mirror of testing then makes apt refuse the suite ("Release file ... is expired");
    the build relaxes only that check, and only then (the signature is still verified)."""
    import email.utils  # only a build needs it (see check_mirror)

    until = fields.get("Valid-Until")
    if not until:
        return False
    try:
        stamp = email.utils.parsedate_to_datetime(until).timestamp()
    except (TypeError, ValueError):
        return False
    return stamp < (time.time() if now is None else now)


def read_stamp(root: Path) -> Stamp | None:
    try:
        return Stamp.from_json(json.loads((root / STAMP).read_text()))
    except FileNotFoundError:
        return None


def _name(cmd: list[str]) -> str:
    """`unshare ... -- mmdebstrap ...` is named by what it runs."""
    return cmd[cmd.index("--") + 1] if cmd[0] == "unshare" and "--" in cmd else cmd[0]


def _run(cmd: list[str], timeout: float, log: Path | None = None) -> str:
    """Run to completion; stdout, or SlurmRootError naming the command and its last error line.
    With `log`, stdout+stderr go to that file instead (mmdebstrap is chatty)."""
    try:
        if log is not None:
            with open(log, "ab") as f:
                proc = subprocess.run(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                    check=False,
                )
            if proc.returncode != 0:
                lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
                last = lines[-1] if lines else "(no output)"
                rc = proc.returncode
                raise SlurmRootError(f"{_name(cmd)} failed (exit {rc}): {last} (log: {log})")
            return ""
        res = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise SlurmRootError(
            f"{_name(cmd)} is not installed (apt-get install {_name(cmd)})"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmRootError(f"{_name(cmd)} did not finish within {timeout:g} s") from None
    if res.returncode != 0:
        err = [ln for ln in res.stderr.splitlines() if ln.strip()]
        raise SlurmRootError(
            f"{_name(cmd)} failed (exit {res.returncode}): {err[-1] if err else ''}"
        )
    return res.stdout


def _du(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


# -- build ----------------------------------------------------------------------------------
def _say(line: str) -> None:
    print(f"slurmroot: {line}", file=sys.stderr)


def current(stamp: Stamp | None) -> bool:
    """Is a stamped root still what build() would make (same package list)? A root built
    before a package was added (slurm-wlm-jwt-plugin) lacks it: it is rebuilt, not reused."""
    return stamp is not None and stamp.packages == PACKAGES


def build(
    version: str,
    cache: Path = DEFAULT_CACHE,
    mirror: str = DEFAULT_MIRROR,
    timeout: float = 3600.0,
    say: Callable[[str], None] = _say,
) -> SlurmRoot:
    """The root for `version`, built once. A second call finds the stamp and returns at once;
    a stamp whose packages differ from PACKAGES is rebuilt (one line through `say`).

    Atomic: built in `<version>.partial` (removed first if an interrupted build left one),
    stamped, then renamed to `<version>`; a lock file serialises concurrent builders. A stale
    root is renamed to `<version>.old` first (kept until the next rebuild: running clusters
    still have it bound), so `<version>` is never half-built."""
    suite = suite_for(version)
    final = root_path(version, cache)
    stamp = read_stamp(final)
    if current(stamp):
        assert stamp is not None
        return SlurmRoot(final, stamp, built_now=False)
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another builder finishes first; then we reuse it
        stamp = read_stamp(final)
        if current(stamp):
            assert stamp is not None
            return SlurmRoot(final, stamp, built_now=False)
        if stamp is None and final.exists():
            raise SlurmRootError(f"{final} exists without {STAMP}: not ours, remove it by hand")
        if stamp is not None:
            missing = sorted(set(PACKAGES) - set(stamp.packages))
            extra = sorted(set(stamp.packages) - set(PACKAGES))
            diff = ", ".join([*(f"+{p}" for p in missing), *(f"-{p}" for p in extra)])
            say(f"{final} was built with other packages ({diff or 'order'}): rebuilding it")
        if shutil.which("mmdebstrap") is None:
            raise SlurmRootError("mmdebstrap is not installed (apt-get install mmdebstrap)")
        expired = release_expired(check_mirror(mirror, suite))
        partial = cache / f"{version}.partial"
        if partial.exists():
            shutil.rmtree(partial)  # an interrupted build: never reused
        log = cache / f"{version}.build.log"
        log.write_text("")
        start = time.monotonic()
        _run(mmdebstrap_argv(suite, partial, mirror, PACKAGES, expired), timeout, log=log)
        if not usr_merged(partial):
            raise SlurmRootError(f"{partial} is not usr-merged: binding /usr alone would not do")
        for rel in (*BIND_ETC, *REQUIRED_FILES):
            if not (partial / rel).exists():
                raise SlurmRootError(f"{partial / rel} missing after mmdebstrap")
        stamp = Stamp(
            version=version,
            suite=suite,
            mirror=mirror,
            slurm=_run(dpkg_version_argv(partial, "slurmctld"), 30).strip(),
            glibc=_run(dpkg_version_argv(partial, "libc6"), 30).strip(),
            packages=PACKAGES,
            build_seconds=round(time.monotonic() - start, 1),
            size_bytes=_du(partial),
            release_expired=expired,
        )
        if not stamp.slurm.startswith(version + "."):
            raise SlurmRootError(f"{suite} installed Slurm {stamp.slurm}, not {version}")
        tmp = partial / f"{STAMP}.tmp"
        tmp.write_text(json.dumps(stamp.to_json(), indent=2) + "\n")
        os.replace(tmp, partial / STAMP)
        if final.exists():  # the stale root: aside, whole, before the new one takes its name
            old = cache / f"{version}.old"
            if old.exists():
                shutil.rmtree(old)  # the one before: no cluster started since uses it
            os.rename(final, old)
        os.rename(partial, final)  # atomic: `final` appears complete or not at all
        return SlurmRoot(final, stamp, built_now=True)


def find(version: str, cache: Path = DEFAULT_CACHE) -> SlurmRoot:
    """An already built root, or SlurmRootError saying how to build it (one line)."""
    suite_for(version)  # an unknown release is named as such, not as a missing root
    final = root_path(version, cache)
    stamp = read_stamp(final)
    if stamp is None:
        raise SlurmRootError(
            f"no Slurm {version} root in {cache}: build it once with "
            f"`make slurm-root SLURM={version}` (python -m deploy.slurmroot build --version "
            f"{version})"
        )
    if not current(stamp):
        raise SlurmRootError(
            f"the Slurm {version} root in {cache} was built with other packages (before "
            f"slurm-wlm-jwt-plugin?): rebuild it with `make slurm-root SLURM={version}`"
        )
    return SlurmRoot(final, stamp, built_now=False)


def tool_in_root(root: Path, name: str) -> str | None:
    """Where `name` lives in the root, as seen once the root's /usr is bound over /usr
    ("/usr/sbin/slurmd"), or None when the root does not ship it (e.g. sacct)."""
    for rel in ("usr/sbin", "usr/bin"):
        if (root / rel / name).is_file():
            return f"/{rel}/{name}"
    return None
