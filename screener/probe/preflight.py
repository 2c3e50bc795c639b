"""Preflight: can this node run the probe at all? (fio present, target usable, space free).

Like the facts, one constant POSIX sh script runs on the node; the target arrives only as
``"$1"``, the fio command as ``"$2"`` and the probe file name as ``"$3"``. It prints
``key=value`` lines and tries a real write (mktemp + write + remove) rather than trusting
permission bits, which say nothing about a read-only mount or a full filesystem.
"""

from __future__ import annotations

from dataclasses import dataclass

from screener.errors import ConfigError, ProbeError
from screener.policy import ProbePolicy
from screener.probe.fio import LEGACY_PROBE_FILE, PROBE_FILE
from screener.probe.private import FUNCS, PRIVATE_DIR, planted_notes

# After the target checks the script claims screener's private directory in the target
# (screener.probe.private: made 0700, or a planted name moved aside and named in a
# ``planted=`` line) and does everything else inside it, by relative names: the real write
# test (mktemp + write + remove, rather than trusting permission bits, which say nothing
# about a read-only mount or a full filesystem) and the probe file's size. Nothing in the
# user-writable target itself is written, read or followed.
# dd with oflag=direct tells a filesystem without O_DIRECT (tmpfs on older kernels) from one
# with it; fio with direct=1 would fail there with a less helpful message. If dd cannot do
# oflag=direct at all (not GNU dd) the answer is "unknown", never a false "no".
# $1 target, $2 fio, $3 private directory name, $4 probe file name, $5 the probe file's
# legacy name in the target (removed when it is a regular file of this user: a link is
# only unlinked, never followed).
PREFLIGHT_SCRIPT = (
    FUNCS
    + r"""
t="$1"
f="$2"
p=$(command -v "$f" 2>/dev/null)
echo "fio=$p"
echo "iostat=$(command -v iostat 2>/dev/null)"
if [ -e "$t" ]; then echo "target_exists=1"; else echo "target_exists=0"; fi
if [ -d "$t" ]; then echo "target_dir=1"; else echo "target_dir=0"; fi
echo "uid=$(id -u)"
echo "target_owner=$(stat -L -c %u -- "$t" 2>/dev/null)"
if [ -L "$t" ]; then echo "target_link_owner=$(stat -c %u -- "$t" 2>/dev/null)"; fi
echo "fstype=$(stat -f -c %T "$t" 2>/dev/null)"
echo "df=$(df -Pk "$t" 2>/dev/null | tail -n 1)"
o="$t/$5"
if [ -f "$o" ] && [ ! -L "$o" ] && [ "$(stat -c %u -- "$o")" = "$(id -u)" ]; then
    rm -f -- "$o" && echo "legacy_removed=1"
fi
w=0
d=unknown
k=0
if [ -d "$t" ]; then
    if claim "$t/$3"; then
        echo "private=1"
        tmp=$(mktemp ".preflight.XXXXXX" 2>/dev/null)
        if [ -n "$tmp" ] && [ -f "$tmp" ]; then
            if printf 'screener\n' > "$tmp" 2>/dev/null; then w=1; fi
            if e=$(dd if=/dev/zero of="$tmp" bs=4096 count=1 oflag=direct 2>&1); then
                d=1
            else
                case "$e" in *[Ii]nvalid\ argument*) d=0 ;; esac
            fi
            rm -f -- "$tmp"
        fi
        if [ -f "$4" ] && [ ! -L "$4" ]; then k=$(du -k -- "$4" 2>/dev/null | cut -f 1); fi
    else
        echo "private=0"
    fi
fi
echo "target_writable=$w"
echo "target_direct_io=$d"
echo "probe_file_kib=${k:-0}"
echo "done=1"
exit 0
"""
)


_RAM_FS = ("tmpfs", "ramfs")  # probing these measures memory, not the node's NVMe


@dataclass(frozen=True)
class Preflight:
    """What preflight found on a node that can run the probe."""

    # No fio version here: ``fio --version`` cost ~17 ms of CPU per node (0.09 s of every
    # 8-node probe round on the emulated cluster); fio's JSON output names its version.
    iostat: bool  # False: the probe runs without iostat monitoring
    free_mib: int  # free space on the target filesystem
    direct_io: bool | None = None  # None when it could not be determined
    probe_file_mib: int = 0  # space the existing probe file already takes (reused)
    notes: tuple[str, ...] = ()  # planted names found in the target and moved aside


def preflight_argv(target: str, fio: str = "fio") -> list[str]:
    """The remote command printing the preflight ``key=value`` lines for ``target``."""
    if not target.startswith("/") or any(c in target for c in "\0\n"):
        raise ConfigError(f"probe target must be an absolute path, got {target!r}")
    if not fio or fio.startswith("-") or any(c in fio for c in "\0\n"):
        raise ConfigError(f"invalid fio command {fio!r}")
    # "screener-preflight" becomes $0 (named in sh's own error messages).
    return [
        "sh",
        "-c",
        PREFLIGHT_SCRIPT,
        "screener-preflight",
        target,
        fio,
        PRIVATE_DIR,
        PROBE_FILE,
        LEGACY_PROBE_FILE,
    ]


def parse_preflight(text: str, exit_code: int, node: str, policy: ProbePolicy) -> Preflight:
    """Decide whether the probe can run; raise :class:`ProbeError` with the one-line reason.

    Fatal: script failure, fio missing, target missing / not a directory / not writable /
    on tmpfs or ramfs / without O_DIRECT, and free space below ``size_mib + min_free_mib``
    (less what an existing probe file already occupies, since fio reuses it).
    iostat missing is not fatal.
    """
    values = _key_values(text)
    if exit_code != 0 or values.get("done") != "1":
        raise ProbeError(node, f"preflight script failed (exit {exit_code})", text)
    target = policy.target
    if not values.get("fio"):
        raise ProbeError(node, "fio not found on PATH")
    if values.get("target_exists") != "1":
        raise ProbeError(node, f"probe target {target} does not exist")
    if values.get("target_dir") != "1":
        raise ProbeError(node, f"probe target {target} is not a directory")
    # A target another user owns is theirs to swap (rename our directory away, put a link
    # in its place); output without these keys (or a failed stat) says nothing either way.
    owners = {values.get("target_owner", ""), values.get("target_link_owner", "")}
    mine = ("0", values.get("uid", "0"))
    if bad := sorted(o for o in owners if o.isdigit() and o not in mine):
        raise ProbeError(
            node,
            f"probe target {target} (or its link) is owned by uid {bad[0]}, not root or the "
            f"probe user (uid {values.get('uid', '?')}): refused, its owner could swap what "
            "it holds; make it root's or the probe user's",
        )
    notes = planted_notes(text, node)
    if values.get("private") == "0" and any(n.endswith(": refused") for n in notes):
        raise ProbeError(node, notes[-1].removeprefix(f"{node}: "))
    if values.get("target_writable") != "1":
        raise ProbeError(node, f"probe target {target} is not writable")
    fstype = values.get("fstype", "")
    if fstype in _RAM_FS:
        raise ProbeError(node, f"probe target {target} is on {fstype} (RAM), not a disk")
    direct = {"1": True, "0": False}.get(values.get("target_direct_io", ""))
    if direct is False:
        raise ProbeError(node, f"probe target {target} does not support O_DIRECT (tmpfs?)")
    free_kib = _df_available_kib(values.get("df", ""))
    if free_kib is None:
        raise ProbeError(node, f"cannot read free space of {target}", values.get("df", ""))
    existing_mib = _int(values.get("probe_file_kib", "0")) // 1024
    free_mib = free_kib // 1024
    needed = policy.size_mib + policy.min_free_mib - min(existing_mib, policy.size_mib)
    if free_mib < needed:
        raise ProbeError(
            node,
            f"not enough free space on {target}: {free_mib} MiB free, {needed} MiB needed "
            f"(probe {policy.size_mib} MiB + headroom {policy.min_free_mib} MiB"
            + (f" - existing probe file {existing_mib} MiB)" if existing_mib else ")"),
        )
    return Preflight(
        iostat=bool(values.get("iostat")),
        free_mib=free_mib,
        direct_io=direct,
        probe_file_mib=existing_mib,
        notes=notes,
    )


def _key_values(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and key.strip().replace("_", "").isalnum():
            out[key.strip()] = value.strip()
    return out


def _df_available_kib(line: str) -> int | None:
    """'Available' of a ``df -Pk`` data line, found left of the 'NN%' capacity column.

    Counting from the capacity column keeps a filesystem name with spaces from shifting it.
    """
    fields = line.split()
    for i, field in enumerate(fields):
        if i >= 3 and field.endswith("%") and field[:-1].isdigit():
            avail = fields[i - 1]
            return int(avail) if avail.isdigit() else None
    return None


def _int(text: str) -> int:
    return int(text) if text.isdigit() else 0
