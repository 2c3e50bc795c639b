"""Slots for throw-away clusters (test sessions, benchmarks): each slot has its own state
dir, subnet and Slurm ports, held by an flock for as long as its user runs, so concurrent
pytest sessions (and the demo cluster on 127.0.10 / 17000) never collide."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from deploy.minicluster.cluster import Cluster
from deploy.minicluster.nodes import listeners
from deploy.minicluster.spec import SSH_PORT, ClusterError

SLOTS = 24  # room for 3 workers on 22.05 and 2 on each other release at once (`make test`)
SLOT_ROOT = Path("/tmp")
SUBNET_BASE = 200  # slot k uses 127.0.(200+k).i; the demo default is 127.0.10
PORT_BASE = 18000  # slot k uses 18000+100k (slurmctld) .. +99 (slurmd); demo uses 17000+
MAX_NODES = 99


@dataclass(frozen=True)
class Slot:
    """Where a throw-away cluster lives and listens."""

    index: int
    state_dir: Path
    subnet: str
    slurm_port_base: int


def slot(index: int) -> Slot:
    """The fixed layout of slot `index`."""
    return Slot(
        index=index,
        state_dir=SLOT_ROOT / f"screener-testcluster-{index}",
        subnet=f"127.0.{SUBNET_BASE + index}",
        slurm_port_base=PORT_BASE + 100 * index,
    )


def in_use(s: Slot) -> bool:
    """Does anything listen on the slot's sshd subnet or its Slurm ports?"""
    prefix = f"{s.subnet}."
    ports = range(s.slurm_port_base, s.slurm_port_base + MAX_NODES + 1)
    return any(
        (addr.startswith(prefix) and port == SSH_PORT) or port in ports
        for addr, port in listeners()
    )


@contextlib.contextmanager
def claim_slot() -> Iterator[Slot]:
    """Hold the first free slot until the block ends, with nothing left running in it.

    A cluster a previous holder left behind (a session killed before its teardown) is
    stale: it is taken down first. A slot whose addresses some other program uses (a
    cluster started by hand on the same subnet) is skipped."""
    for index in range(SLOTS):
        with open(SLOT_ROOT / f"screener-testcluster-{index}.lock", "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            s = slot(index)
            Cluster(s.state_dir).down()
            if in_use(s):
                continue
            yield s
            return
    raise ClusterError(f"no free minicluster slot under {SLOT_ROOT} (all {SLOTS} in use)")
