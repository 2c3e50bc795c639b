"""What a minicluster is: its requested shape (ClusterSpec), its derived layout (ClusterInfo),
and the fault vocabulary. Pure: validation and path arithmetic only, no I/O but load/save."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.slurmroot import SUITES, root_path
from screener.errors import ScreenerError

DEFAULT_STATE_DIR = Path(os.environ.get("SCREENER_MINICLUSTER_DIR", "/tmp/screener-minicluster"))
SCRATCH = "/scratch"
SSH_PORT = 2222
SPEC_FILE = "cluster.json"
# The host's own Slurm (Debian 12): a cluster without slurm_version runs it. Naming it as a
# version (--slurm-version 22.05, SCREENER_TEST_SLURM=22.05) means the same: no root.
HOST_SLURM = "22.05"
# Slurm client tools a versioned cluster gets a shim for (when its root ships them).
SHIM_TOOLS = ("sinfo", "squeue", "scontrol", "sbatch", "srun", "scancel", "sacct", "slurmrestd")

# Fault kinds and whether they take a numeric value.
FAULT_KINDS: dict[str, bool] = {
    "slow_read": True,  # blkio.throttle.read_bps_device, bytes/s
    "slow_randread": True,  # blkio.throttle.read_iops_device, IOPS
    "slow_write": True,  # blkio.throttle.write_bps_device, bytes/s
    "unreachable": False,  # the node's sshd is stopped
    "no_fio": False,  # fio hidden (overlay whiteout) in the node's mount namespace
    "full_scratch": False,  # the node's /scratch filled to < 1 MiB free
}
# Faults that need the node's loop device (absent with --sshd-only).
LOOP_FAULTS = frozenset({"slow_read", "slow_randread", "slow_write", "full_scratch"})

_PREFIX_RE = re.compile(r"^[a-z][a-z]{0,15}$")
_SUBNET_RE = re.compile(r"^127\.(\d{1,3})\.(\d{1,3})$")
_SAFE_PATH_RE = re.compile(r"^/[A-Za-z0-9._/-]+$")
_RATE_RE = re.compile(r"^(\d+)(?:([kKmMgG])(i?)B?)?$")
_UNITS = {"k": 1, "m": 2, "g": 3}
_MAX_SUN_PATH = 107  # AF_UNIX path limit, for munged's socket


class ClusterError(ScreenerError):
    """A minicluster operation failed; the message is the one line the user sees."""


class PreconditionError(ClusterError):
    """The machine cannot host a minicluster (not root, no loop devices, no blkio, ...)."""


@dataclass(frozen=True)
class ClusterSpec:
    """The arguments of `up` that define a cluster's identity (re-`up` must match them)."""

    nodes: int = 8
    prefix: str = "node"
    subnet: str = "127.0.10"
    slurm_port_base: int = 17000
    sshd_only: bool = False
    scratch_mib: int = 1024
    prolog: str | None = None
    epilog: str | None = None
    # /scratch on a loop device nested in another (DESIGN.md): slow_* throttle the lower
    # device, so the wait shows in the node's own device (iostat r_await, %util).
    nested_loop: bool = False
    # None: the host's Slurm (22.05). Else a release deploy.slurmroot builds (24.11, 26.05):
    # every daemon and client runs with that root's /usr (deploy/slurmroot, cluster.py).
    slurm_version: str | None = None
    # Every node's device paced at this read/write rate (bytes/s) and 4k read IOPS, 0 = off:
    # the device then sets a healthy node's rate, not the 2 shared cores (an unpaced probe
    # of 6 nodes burns both; paced at 300M/20000 IOPS, 0.7 of one). A slow_* fault
    # overrides its throttle; heal returns it to the pace, not to unthrottled.
    pace_bps: int = 0
    pace_iops: int = 0

    def __post_init__(self) -> None:
        validate_spec(self)

    def to_json(self) -> dict[str, Any]:
        """Plain dict for cluster.json (no slurm_version key for the host's Slurm: the file
        stays what it was before the option)."""
        data = dataclasses.asdict(self)
        if data["slurm_version"] is None:
            del data["slurm_version"]
        for key in ("pace_bps", "pace_iops"):  # likewise for an unpaced cluster
            if not data[key]:
                del data[key]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterSpec:
        """Inverse of to_json; unknown keys are an error (a state dir from another version)."""
        names = {f.name for f in dataclasses.fields(cls)}
        data = {"nested_loop": False, **data}  # cluster.json written before the option
        unknown = set(data) - names
        if unknown:
            raise ClusterError(f"cluster.json has unknown keys: {', '.join(sorted(unknown))}")
        return cls(**data)


def validate_spec(spec: ClusterSpec) -> None:
    """Reject specs that would produce invalid names, addresses, ports or hook paths."""
    if not 1 <= spec.nodes <= 254:
        raise ClusterError(f"--nodes must be between 1 and 254, got {spec.nodes}")
    if not _PREFIX_RE.match(spec.prefix):
        raise ClusterError(f"--prefix must be 1-16 lowercase letters, got {spec.prefix!r}")
    m = _SUBNET_RE.match(spec.subnet)
    if not m or not all(0 <= int(g) <= 255 for g in m.groups()):
        raise ClusterError(f"--subnet must look like 127.0.X (loopback only), got {spec.subnet!r}")
    if not spec.sshd_only and not 1024 < spec.slurm_port_base <= 65535 - spec.nodes:
        raise ClusterError(f"--slurm-port-base {spec.slurm_port_base} leaves no room for ports")
    if not 64 <= spec.scratch_mib <= 1024 * 1024:
        raise ClusterError(f"scratch size must be 64 MiB .. 1 TiB, got {spec.scratch_mib} MiB")
    if spec.pace_bps < 0 or spec.pace_iops < 0:
        raise ClusterError(f"--pace must be positive, got {spec.pace_bps}/{spec.pace_iops}")
    if (spec.pace_bps or spec.pace_iops) and spec.sshd_only:
        raise ClusterError("--pace needs /scratch, which --sshd-only does not create")
    if spec.nested_loop and spec.sshd_only:
        raise ClusterError("--nested-loop needs /scratch, which --sshd-only does not create")
    if spec.slurm_version is not None:
        if spec.slurm_version not in SUITES:
            known = ", ".join(sorted(SUITES))
            raise ClusterError(
                f"--slurm-version must be one of {known} (or {HOST_SLURM}/omitted: the "
                f"host's), got {spec.slurm_version!r}"
            )
        if spec.sshd_only:
            raise ClusterError("--slurm-version needs Slurm, which --sshd-only does not start")
        if spec.slurm_port_base + spec.nodes + 1 > 65535:  # slurmrestd's port (rest_port)
            raise ClusterError(f"--slurm-port-base {spec.slurm_port_base} leaves no room for ports")
    for flag, path in (("--prolog", spec.prolog), ("--epilog", spec.epilog)):
        if path is None:
            continue
        if spec.sshd_only:
            raise ClusterError(f"{flag} needs Slurm, which --sshd-only does not start")
        if not _SAFE_PATH_RE.match(path):
            raise ClusterError(f"{flag} must be an absolute path of [A-Za-z0-9._/-], got {path!r}")


def slurm_version_arg(text: str | None) -> str | None:
    """--slurm-version / SCREENER_TEST_SLURM -> ClusterSpec.slurm_version: empty, "host" or
    the host's release mean None (validated by ClusterSpec, not here)."""
    if text is None:
        return None
    text = text.strip()
    return None if text in ("", "host", HOST_SLURM) else text


def node_names(prefix: str, count: int) -> list[str]:
    """node01..nodeNN: zero-padded so names sort and Slurm hostlists compress."""
    width = max(2, len(str(count)))
    return [f"{prefix}{i:0{width}d}" for i in range(1, count + 1)]


def hostlist(names: list[str]) -> str:
    """Slurm hostlist for node_names() output: node[01-08] (or the single name)."""
    if len(names) == 1:
        return names[0]
    m0 = re.match(r"^([a-z]+)(\d+)$", names[0])
    m1 = re.match(r"^([a-z]+)(\d+)$", names[-1])
    if not m0 or not m1:
        raise ClusterError(f"not a minicluster node range: {names[0]}..{names[-1]}")
    return f"{m0.group(1)}[{m0.group(2)}-{m1.group(2)}]"


def cluster_id(state_dir: Path) -> str:
    """Short stable id from the state dir: names cgroups and the Slurm ClusterName."""
    digest = hashlib.sha1(str(state_dir).encode()).hexdigest()[:8]
    return f"mc{digest}"


def validate_state_dir(state_dir: Path) -> Path:
    """Absolute, and only characters safe in slurm.conf, sshd_config and overlay options."""
    path = Path(os.path.abspath(state_dir))
    if not _SAFE_PATH_RE.match(str(path)):
        raise ClusterError(f"state dir must be a path of [A-Za-z0-9._/-], got {str(path)!r}")
    if len(str(path / "munge" / "munge.socket")) > _MAX_SUN_PATH:
        raise ClusterError(f"state dir {path} is too long for a unix socket path")
    return path


def parse_fault_value(kind: str, value: str | int | None) -> int | None:
    """Check a fault's value: rates accept 20000000, 20M (10^6), 20MiB (2^20); flags take none."""
    if kind not in FAULT_KINDS:
        raise ClusterError(f"unknown fault {kind!r}; known: {', '.join(FAULT_KINDS)}")
    if not FAULT_KINDS[kind]:
        if value not in (None, ""):
            raise ClusterError(f"fault {kind} takes no value, got {value!r}")
        return None
    if value is None or value == "":
        raise ClusterError(f"fault {kind} needs a value (bytes/s or IOPS)")
    if isinstance(value, int):
        number = value
    else:
        m = _RATE_RE.match(value.strip())
        if not m:
            raise ClusterError(f"fault {kind}: bad rate {value!r} (use e.g. 20000000, 20M, 20MiB)")
        base = 1024 if m.group(3) else 1000
        number = int(m.group(1)) * base ** _UNITS.get((m.group(2) or "").lower(), 0)
    if number <= 0:
        raise ClusterError(f"fault {kind}: rate must be positive, got {value!r}")
    return number


def parse_fault_arg(text: str) -> tuple[str, str, int | None]:
    """`--fault NODE:KIND[=VALUE]` -> (node, kind, value)."""
    node, sep, rest = text.partition(":")
    if not sep or not node or not rest:
        raise ClusterError(f"--fault must be NODE:KIND[=VALUE], got {text!r}")
    kind, _, value = rest.partition("=")
    return node, kind, parse_fault_value(kind, value or None)


@dataclass(frozen=True)
class ClusterInfo:
    """Everything a client needs to use a running cluster; derivable from the state dir alone."""

    state_dir: Path
    spec: ClusterSpec

    @property
    def cluster_id(self) -> str:
        return cluster_id(self.state_dir)

    @property
    def nodes(self) -> list[str]:
        return node_names(self.spec.prefix, self.spec.nodes)

    def addr(self, node: str) -> str:
        """The node's sshd address (127.0.X.i)."""
        return f"{self.spec.subnet}.{self.index(node) + 1}"

    def index(self, node: str) -> int:
        """Position of node in nodes; ClusterError for names that are not ours."""
        try:
            return self.nodes.index(node)
        except ValueError:
            raise ClusterError(
                f"unknown node {node!r} (this cluster has {self.hostlist})"
            ) from None

    @property
    def hostlist(self) -> str:
        return hostlist(self.nodes)

    @property
    def ssh_port(self) -> int:
        return SSH_PORT

    @property
    def scratch(self) -> str:
        return SCRATCH

    @property
    def slurm(self) -> bool:
        """True when Slurm runs (not --sshd-only)."""
        return not self.spec.sshd_only

    @property
    def slurm_root(self) -> Path | None:
        """The root whose /usr every daemon and client runs with; None: the host's Slurm."""
        version = self.spec.slurm_version
        return None if version is None else root_path(version)

    @property
    def client_bin(self) -> Path | None:
        """The Slurm client shims (sinfo, sbatch, ... run in the controller's namespace) of a
        versioned cluster; None: the host's own tools serve the cluster."""
        return None if self.spec.slurm_version is None else self.state_dir / "bin"

    # -- layout of the state dir ---------------------------------------------------------
    @property
    def ssh_dir(self) -> Path:
        return self.state_dir / "ssh"

    @property
    def ssh_config(self) -> Path:
        return self.ssh_dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    @property
    def client_key(self) -> Path:
        return self.ssh_dir / "client_key"

    @property
    def authorized_keys(self) -> Path:
        return self.ssh_dir / "authorized_keys"

    @property
    def slurm_dir(self) -> Path:
        return self.state_dir / "slurm"

    @property
    def slurm_conf(self) -> Path:
        return self.slurm_dir / "slurm.conf"

    @property
    def munge_dir(self) -> Path:
        return self.state_dir / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    def node_dir(self, node: str) -> Path:
        return self.state_dir / "nodes" / node

    def slurmd_port(self, node: str) -> int:
        return self.spec.slurm_port_base + 1 + self.index(node)

    @property
    def slurmctld_port(self) -> int:
        return self.spec.slurm_port_base

    # -- slurmrestd (a versioned cluster: its root ships it; docs/slurm.md) ------------------
    @property
    def rest(self) -> bool:
        """True when the cluster runs slurmrestd (24.11, 26.05; the host's 22.05 has none)."""
        return self.slurm and self.spec.slurm_version is not None

    @property
    def rest_port(self) -> int:
        """slurmrestd's loopback TCP port (JWT auth): the first port after the slurmds'."""
        return self.spec.slurm_port_base + self.spec.nodes + 1

    @property
    def rest_url(self) -> str:
        """slurmrestd as screener's rest backend reaches it in production: TCP with a JWT
        (rest_token_file). slurmrestd runs as nobody (26.05 will not run as root), so only
        JWT makes its requests root's: drain, resume and release."""
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def rest_unix_url(self) -> str:
        """The same slurmrestd on a unix socket (JWT too; without one, rest_auth/local makes a
        request nobody's, which slurmctld lets read but not write)."""
        return f"unix:{self.rest_socket}"

    @property
    def rest_socket(self) -> Path:
        """slurmrestd's unix socket, in a directory its user (nobody) may write."""
        return self.slurm_dir / "rest" / "rest.sock"

    @property
    def jwt_key(self) -> Path:
        """The cluster's HS256 key (AuthAltParameters=jwt_key=; 0600, made at up): slurmctld
        signs `scontrol token` with it and checks every JWT slurmrestd forwards."""
        return self.slurm_dir / "jwt_hs256.key"

    @property
    def rest_token_file(self) -> Path:
        """root's JWT (`scontrol token username=root`), rewritten at every up and repair:
        slurm.rest_token_file for screener's rest backend."""
        return self.slurm_dir / "rest.jwt"

    @property
    def first_job_id(self) -> int:
        """1 for the demo's port base; 100,000 ids apart per 100 ports above it. Clusters
        side by side share the host's /tmp (each real node has its own), so per-job names
        there (the in-job iostat's /tmp/.screener/iostat-JOB-NODE) must not repeat: two
        test workers' job 6 on node01 once stopped each other's monitor."""
        return 1 + 100_000 * max(0, (self.spec.slurm_port_base - 17000) // 100)

    def cgroup_name(self, node: str | None) -> str:
        """blkio cgroup of a node (`<id>-<node>`) or of the controller daemons (`<id>-ctl`)."""
        return f"{self.cluster_id}-{node if node is not None else 'ctl'}"

    def env(self, inherit: bool = True) -> dict[str, str]:
        """Environment for sinfo/srun/sbatch and screener against this cluster."""
        env = dict(os.environ) if inherit else {}
        env.update(
            SCREENER_SSH_CONFIG=str(self.ssh_config),
            SCREENER_KNOWN_HOSTS=str(self.known_hosts),
            SCREENER_CLIENT_KEY=str(self.client_key),
            SCREENER_MINICLUSTER_DIR=str(self.state_dir),
        )
        if self.slurm:
            env["SLURM_CONF"] = str(self.slurm_conf)
        if self.rest:  # slurm.rest_url for screener's rest backend (docs/slurm.md)
            env["SCREENER_MINICLUSTER_REST_URL"] = self.rest_url
            env["SCREENER_MINICLUSTER_REST_UNIX_URL"] = self.rest_unix_url
            env["SCREENER_MINICLUSTER_REST_TOKEN_FILE"] = str(self.rest_token_file)
        if self.client_bin is not None:  # the version's sinfo/sbatch/... first on PATH
            path = env.get("PATH") or os.environ.get("PATH") or os.defpath
            first = str(self.client_bin)
            if path.split(os.pathsep)[0] != first:
                path = os.pathsep.join([first, path])
            env["PATH"] = path
        return env

    # -- persistence -----------------------------------------------------------------------
    def save(self) -> None:
        """Write cluster.json (the spec); everything else is derived from it."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        write_json(self.state_dir / SPEC_FILE, {"spec": self.spec.to_json()})

    @classmethod
    def load(cls, state_dir: Path | str = DEFAULT_STATE_DIR) -> ClusterInfo:
        """Attach to a cluster that is up (or was): reads <state_dir>/cluster.json."""
        path = validate_state_dir(Path(state_dir))
        data = read_json(path / SPEC_FILE)
        if data is None:
            raise ClusterError(f"no minicluster in {path} (run `python -m deploy.minicluster up`)")
        spec = data.get("spec")
        if not isinstance(spec, dict):
            raise ClusterError(f"{path / SPEC_FILE} is not a minicluster spec")
        return cls(state_dir=path, spec=ClusterSpec.from_json(spec))


def write_json(path: Path, data: Any) -> None:
    """Atomic JSON write (tmp + rename) so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """Parsed JSON, or None when the file does not exist; ClusterError when corrupt."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClusterError(f"{path} is corrupt: {exc}") from None
