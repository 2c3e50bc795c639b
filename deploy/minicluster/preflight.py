"""Can this machine host a minicluster? Facts are gathered at the edge; the verdict is a pure
function so every missing precondition is one clear line (and unit-testable)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from deploy.minicluster import argv
from deploy.minicluster.procs import BLKIO
from deploy.minicluster.spec import PreconditionError
from deploy.slurmroot import tool_in_root

BASE_TOOLS = ("setsid", "sh", "unshare", "nsenter", "sleep", "hostname", "ssh-keygen", "sshd")
LOOP_TOOLS = ("losetup", "mkfs.ext4", "mount", "umount")
SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "sinfo", "squeue", "scancel", "scontrol")


@dataclass(frozen=True)
class HostFacts:
    """What the preconditions depend on."""

    euid: int
    loop_control: bool
    blkio: bool
    missing_tools: tuple[str, ...]


def needed_tools(sshd_only: bool) -> tuple[str, ...]:
    """Binaries a cluster of this kind runs."""
    return BASE_TOOLS if sshd_only else BASE_TOOLS + LOOP_TOOLS + SLURM_TOOLS


def gather(sshd_only: bool, slurm_root: Path | None = None) -> HostFacts:
    """Look at the machine (and at the root whose Slurm a versioned cluster runs: its munged,
    Slurm daemons and clients come from there, not from the host)."""

    def missing_tool(name: str) -> bool:
        if slurm_root is not None and name in SLURM_TOOLS:
            return tool_in_root(slurm_root, name) is None
        return not os.path.isabs(argv.tool(name))

    missing = tuple(t for t in needed_tools(sshd_only) if missing_tool(t))
    return HostFacts(
        euid=os.geteuid(),
        loop_control=Path("/dev/loop-control").exists(),
        blkio=(BLKIO / "cgroup.procs").exists()
        and (BLKIO / "blkio.throttle.read_bps_device").exists(),
        missing_tools=missing,
    )


def problems(facts: HostFacts, sshd_only: bool) -> list[str]:
    """Every unmet precondition, in the order a user should fix them."""
    found = []
    if facts.euid != 0:
        found.append(f"must run as root (uid is {facts.euid})")
    if not sshd_only and not facts.loop_control:
        found.append("no loop device support (/dev/loop-control missing; modprobe loop)")
    if not facts.blkio:
        found.append(f"no cgroup v1 blkio controller with throttling mounted at {BLKIO}")
    if facts.missing_tools:
        found.append(f"missing binaries: {', '.join(facts.missing_tools)}")
    return found


def check(sshd_only: bool = False, slurm_root: Path | None = None) -> None:
    """Raise PreconditionError (one line) if the machine cannot host the cluster."""
    found = problems(gather(sshd_only, slurm_root), sshd_only)
    if found:
        raise PreconditionError("minicluster cannot run here: " + "; ".join(found))
