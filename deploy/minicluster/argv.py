"""Every external command the minicluster runs, as an argv list built by a pure function.

Nothing here goes through a shell with untrusted text: node names are validated by spec.py,
paths come from the validated state dir, and the one `sh -c` script is a constant that
only uses its positional parameters.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
from pathlib import Path

from deploy.slurmroot import bind_argvs

# Root's sbin directories are often missing from PATH when run from a venv or a hook.
_EXTRA_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

# Joins a cgroup, records its own pid, then becomes the daemon: the daemon is in the node's
# blkio cgroup from its first instruction (nsenter does not change cgroups), and the pid we
# record is the daemon's own (exec keeps it; nsenter -m -u and unshare without --fork too).
LAUNCH_SCRIPT = 'echo $$ > "$1" && echo $$ > "$2" && shift 2 && exec "$@"'


@functools.cache
def tool(name: str) -> str:
    """Absolute path of a binary (PATH plus the sbin dirs), or the bare name if not found."""
    search = os.pathsep.join([os.environ.get("PATH", ""), *_EXTRA_PATH])
    return shutil.which(name, path=search) or name


def launch(cgroup_procs: Path, pidfile: Path, cmd: list[str]) -> list[str]:
    """Start cmd as a detached daemon inside a blkio cgroup, recording its pid in pidfile."""
    return [
        tool("setsid"),
        "-f",  # fork: the daemon is re-parented to init, never our zombie; own session too
        "/bin/sh",
        "-c",
        LAUNCH_SCRIPT,  # constant; the values below are positional parameters, never parsed
        "minicluster-launch",  # $0
        str(cgroup_procs),  # $1
        str(pidfile),  # $2
        *cmd,
    ]


def holder(uts: bool = True) -> list[str]:
    """The process that owns a node's mount + UTS namespaces for the node's lifetime
    (``uts=False``: a versioned cluster's controller, a mount namespace with the root's
    /usr bound in it, which keeps the host's hostname: SlurmctldHost=localhost)."""
    return [
        tool("unshare"),
        "--mount",  # own mount table: the node's /scratch exists only here
        *(["--uts"] if uts else []),  # own hostname (= node name)
        "--propagation",
        "private",  # mounts made in the node never leak to the host, nor the reverse
        "--",
        tool("sleep"),
        "infinity",  # no --fork: the recorded pid is the namespace owner itself
    ]


def in_controller(holder_pid: int, cmd: list[str]) -> list[str]:
    """Run cmd inside the controller's mount namespace (same pid, no fork)."""
    return [tool("nsenter"), "-t", str(holder_pid), "-m", "--", *cmd]


def root_binds(root: Path) -> list[list[str]]:
    """deploy.slurmroot's read-only binds (ld.so.cache, alternatives, then /usr), with the
    host's mount by absolute path (run each via in_node / in_controller)."""
    return [[tool("mount"), *cmd[1:]] for cmd in bind_argvs(root)]


def client(name: str, bin_dir: Path | None) -> str:
    """A Slurm client for a cluster: its shim when it has one dir of them (a versioned
    cluster: never the host's tool, which speaks another Slurm protocol), else the host's."""
    return str(bin_dir / name) if bin_dir is not None else tool(name)


def in_node(holder_pid: int, cmd: list[str]) -> list[str]:
    """Run cmd inside a node's namespaces (same pid, no fork: no pid namespace is entered)."""
    return [
        tool("nsenter"),
        "-t",
        str(holder_pid),
        "-m",  # the node's mounts (/scratch, fault overlays)
        "-u",  # the node's hostname
        "--",
        *cmd,
    ]


def set_hostname(node: str) -> list[str]:
    """Name the node's UTS namespace (run via in_node)."""
    return [tool("hostname"), node]


def keygen(path: Path, comment: str) -> list[str]:
    """A fresh ed25519 key pair without passphrase."""
    return [
        tool("ssh-keygen"),
        "-q",
        "-t",
        "ed25519",  # fast to generate and to verify
        "-N",
        "",  # no passphrase: daemons and tests use it unattended
        "-C",
        comment,
        "-f",
        str(path),
    ]


def mkfs(image: Path, label: str) -> list[str]:
    """ext4 on the sparse image file, fast to create and with no reserved blocks."""
    return [
        tool("mkfs.ext4"),
        "-q",
        "-F",  # the target is a regular file, not a block device
        "-m",
        "0",  # no root reserve: full_scratch can really leave < 1 MiB free
        "-E",
        "lazy_itable_init=1,lazy_journal_init=1,nodiscard",  # seconds, not minutes, for 32 nodes
        "-L",
        label[:16],  # ext4 label limit; makes `lsblk -f` readable
        str(image),
    ]


def losetup_attach(image: Path) -> list[str]:
    """Attach the image to the first free loop device and print its name."""
    return [tool("losetup"), "--find", "--show", str(image)]


def losetup_attach_direct(image: Path) -> list[str]:
    """Attach with direct I/O, so reads reach the lower loop device (nested_loop)."""
    return [tool("losetup"), "--find", "--show", "--direct-io=on", str(image)]


def losetup_detach(device: str) -> list[str]:
    """Detach a loop device (the kernel defers it if something still holds it)."""
    return [tool("losetup"), "--detach", device]


def mount_scratch(device: str, scratch: str) -> list[str]:
    """Mount the node's loop device at the shared scratch path (run via in_node)."""
    return [tool("mount"), "-t", "ext4", "-o", "noatime", device, scratch]


def bind_mount(source: Path, target: str) -> list[str]:
    """Bind ``source`` over ``target`` inside the node only (run via in_node)."""
    return [tool("mount"), "--bind", str(source), target]


def mount_overlay_hide(whiteout_dir: Path, target: str) -> list[str]:
    """Overlay `target` with a layer whose whiteouts hide files (no_fio; run via in_node)."""
    return [
        tool("mount"),
        "-t",
        "overlay",
        "overlay",
        "-o",
        f"lowerdir={whiteout_dir}:{target}",  # read-only overlay; upper layer's whiteout wins
        target,
    ]


def umount_lazy(target: str) -> list[str]:
    """Unmount even if a shell started under the overlay still has a binary open."""
    return [tool("umount"), "--lazy", target]


def sshd(conf: Path, exe: str | None = None) -> list[str]:
    """A node's sshd in the foreground (the launcher detaches it); `exe`: the root's."""
    return [
        exe or tool("sshd"),  # absolute path: sshd re-executes itself per connection
        "-D",  # do not daemonise: the launcher's pid is sshd's pid
        "-e",  # log to stderr, which goes to the node's log file
        "-f",
        str(conf),
    ]


def munged(socket: Path, key: Path, munge_dir: Path, exe: str | None = None) -> list[str]:
    """The cluster's private munged, on its own socket (never the system one)."""
    return [
        exe or tool("munged"),
        "--foreground",  # the launcher's pid is munged's pid
        "--force",  # run as root with the key under /tmp
        f"--socket={socket}",
        f"--key-file={key}",
        f"--pid-file={munge_dir / 'munged.pid'}",
        f"--seed-file={munge_dir / 'munged.seed'}",
        f"--log-file={munge_dir / 'munged.log'}",
        "--num-threads=4",  # every slurmd and srun authenticates through it
    ]


def slurmctld(conf: Path, exe: str | None = None) -> list[str]:
    """The controller, in the foreground."""
    return [exe or tool("slurmctld"), "-D", "-f", str(conf)]


def slurmrestd(conf: Path, listen: list[str], exe: str) -> list[str]:
    """slurmrestd in the foreground on ``listen`` (unix:/path, host:port), v0.0.42 only, as
    nobody (uid/gid numbers: the root's NSS cannot resolve names here): 26.05 will not run
    as root. JWT only: SLURM_JWT=daemon makes auth/jwt its own auth plugin (under auth/munge
    it rejects every token: "Rejecting thread config token"), so each request is its JWT's
    user's (root's for root's token); rest_auth/local needs auth/munge and is left out."""
    return [
        tool("env"),
        "SLURM_JWT=daemon",
        exe,
        "-u",
        "65534",
        "-g",
        "65534",
        "-f",
        str(conf),
        "-a",
        "rest_auth/jwt",
        "-s",
        "openapi/slurmctld",  # no slurmdbd here: openapi/slurmdbd would fail to load
        "-d",
        "v0.0.42",  # the one version screener's rest backend speaks (24.11 .. 26.05)
        *listen,
    ]


def scontrol_token(conf: Path, lifespan_s: int, exe: str) -> list[str]:
    """A JWT for root from slurmctld (signed with jwt_key): prints ``SLURM_JWT=<token>``."""
    return [
        tool("env"),
        f"SLURM_CONF={conf}",
        exe,
        "token",
        "username=root",
        f"lifespan={lifespan_s}",
    ]


def slurmd(node: str, conf: Path, exe: str | None = None) -> list[str]:
    """One node's slurmd, in the foreground (run via in_node so steps see the node)."""
    return [
        exe or tool("slurmd"),
        "-D",  # foreground: the launcher records the daemon itself
        "-N",
        node,  # which NodeName= entry this slurmd is
        "-f",
        str(conf),
    ]


# The Slurm clients below: `bin_dir` is ClusterInfo.client_bin (None: the host's tools).
def sinfo_states(bin_dir: Path | None = None) -> list[str]:
    """One `<node> <state>` line per node (SLURM_CONF comes from the environment)."""
    return [client("sinfo", bin_dir), "--noheader", "--Node", "--format=%N %T"]


def squeue_jobs(bin_dir: Path | None = None) -> list[str]:
    """Ids of all jobs still known to the controller that are not finished."""
    states = "--states=PD,R,CG,CF,S,RQ,RS,SE"
    return [client("squeue", bin_dir), "--noheader", "--format=%i", states]


def scancel_all(bin_dir: Path | None = None) -> list[str]:
    """Cancel every root job of this cluster (tests leave none behind)."""
    return [client("scancel", bin_dir), "--user=root"]


def resume_nodes(hostlist: str, bin_dir: Path | None = None) -> list[str]:
    """Return drained/down nodes to service."""
    return [client("scontrol", bin_dir), "update", f"nodename={hostlist}", "state=resume"]


def ssh(ssh_config: Path, node: str, cmd: list[str]) -> list[str]:
    """Run argv on a node through the cluster's ssh_config (strict host keys).

    ssh hands the remote command to the login shell as one string, so each argument is
    quoted: the remote side sees exactly `cmd`.
    """
    return [
        tool("ssh"),
        "-F",
        str(ssh_config),  # only this file: cluster keys, known_hosts, strict checking
        node,
        "--",
        shlex.join(cmd),
    ]
