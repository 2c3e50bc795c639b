"""An emulated Slurm cluster on one machine: real slurmctld/slurmd/munged, one sshd and one
loop-backed /scratch per node (mount + UTS namespaces), per-node blkio throttles for faults.

    info = Cluster("/tmp/mc").up(nodes=8)      # or ClusterInfo.load("/tmp/mc") to attach
    Cluster("/tmp/mc").inject("node03", "slow_read", "20M")
    Cluster("/tmp/mc").down()

See docs/minicluster.md.
"""

from deploy.minicluster.cluster import Cluster, ClusterStatus, NodeStatus
from deploy.minicluster.handle import ClusterHandle
from deploy.minicluster.spec import (
    DEFAULT_STATE_DIR,
    FAULT_KINDS,
    ClusterError,
    ClusterInfo,
    ClusterSpec,
    PreconditionError,
)

__all__ = [
    "DEFAULT_STATE_DIR",
    "FAULT_KINDS",
    "Cluster",
    "ClusterError",
    "ClusterHandle",
    "ClusterInfo",
    "ClusterSpec",
    "ClusterStatus",
    "NodeStatus",
    "PreconditionError",
]
