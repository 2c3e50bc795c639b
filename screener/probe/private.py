"""screener's private directory on a node: the only place its probe file, sentinels and
in-job iostat files live, so nothing a node user can create is ever followed as root.

Node-local scratch (and /tmp) is where users write. A name screener used directly there
(``/scratch/.screener-probe``) could be planted first: a symlink to a root-owned file was
written through by fio, a FIFO or a directory made the node UNKNOWN on every probe. Now
every node command runs inside ``TARGET/.screener`` (``/tmp/.screener`` for in-job
iostat): a directory of the probe user, mode 0700, that nobody else can create entries
in. Each command enters it through :data:`FUNCS` and works by relative names from there:

- ``ours D``: ``D`` itself (lstat, never followed) is a directory of this uid, mode 700.
- ``enter D``: ``cd`` into ``D`` and check that what was entered is ``D`` itself (same
  device and inode as the name, seen without following) and ours. The cwd then holds that
  directory whatever happens to the name afterwards.
- ``claim D``: ``enter D``, making it first if missing. Anything else found at the name (a
  link, FIFO, file, device, someone else's directory, a wrong mode) is **moved aside** to
  ``D.planted.XXXXXXXX``, never followed, read, written or deleted, and named on stdout
  (``planted=...``), so a planted name costs the user's trick, not the node's judgement.
  Moving aside needs the right to rename it (root has it; an unprivileged probe user in a
  sticky directory does not): then the command is refused with that line (UNKNOWN), and
  docs/security.md says to give such a user a target it owns.
"""

from __future__ import annotations

PRIVATE_DIR = ".screener"  # screener's own directory inside [probe] target
INJOB_PARENT = "/tmp/.screener"  # the in-job iostat's private parent on each node
NOT_OURS_EXIT = 96  # a wrapped command's exit when its directory could not be claimed

# POSIX sh + coreutils (stat, mktemp, mv, mkdir, id). stat without -L never follows the
# name; mkdir -m sets the mode exactly (umask aside) and fails on any existing name, a
# dangling symlink included; mv -T renames the name itself, whatever it is.
FUNCS = r"""
ours() { [ "$(stat -c %F:%u:%a -- "$1" 2>/dev/null)" = "directory:$(id -u):700" ]; }
enter() {
    ours "$1" && cd -P -- "$1" 2>/dev/null && ours . &&
        [ "$(stat -c %d:%i -- .)" = "$(stat -c %d:%i -- "$1" 2>/dev/null)" ]
}
claim() {
    mkdir -m 0700 -- "$1" 2>/dev/null
    enter "$1" && return 0
    if [ ! -e "$1" ] && [ ! -L "$1" ]; then echo "cannot create $1"; return 1; fi
    w=$(stat -c '%F owned by uid %u (mode %a)' -- "$1" 2>/dev/null) || w="name that vanished"
    a=$(mktemp -u -- "$1.planted.XXXXXXXX") || return 1
    if mv -T -- "$1" "$a" 2>/dev/null; then
        echo "planted=$1 was a $w, not screener's: moved aside to $a"
    else
        echo "planted=$1 is a $w, not screener's, and cannot be moved aside: refused"
        return 1
    fi
    mkdir -m 0700 -- "$1" 2>/dev/null
    enter "$1" && return 0
    echo "planted=$1 changed again while screener claimed it: refused"
    return 1
}
"""

# $1 the private directory, then the command: claimed (made, or a planted name moved
# aside), entered, and the command exec'd there under umask 077 (files mode 0600). A
# moved-aside name goes to stderr; preflight, which runs before every probe, reports it.
_WRAP = (
    FUNCS
    + r"""
claim "$1" >&2 || exit 96
shift
umask 077
exec "$@"
"""
)


def private_dir(target: str) -> str:
    """The private directory inside ``target`` (a checked, absolute probe target)."""
    return f"{target.rstrip('/')}/{PRIVATE_DIR}"


def in_private_dir(directory: str, argv: list[str]) -> list[str]:
    """``argv`` run inside ``directory`` once it is claimed as screener's (module doc).

    No shell sees ``argv``: it is "$@" after the directory, exec'd as it is.
    "screener-probe" becomes $0, named in sh's own error messages.
    """
    return ["sh", "-c", _WRAP, "screener-probe", directory, *argv]


def planted_notes(text: str, node: str) -> tuple[str, ...]:
    """The ``planted=`` lines a node command printed, as log lines naming the node."""
    return tuple(
        f"{node}: {line.partition('=')[2].strip()}"
        for line in text.splitlines()
        if line.startswith("planted=")
    )
