"""The minicluster API: Cluster(state_dir).up(...) / .down() / .status() / .inject() / .heal().

A cluster is N emulated nodes (namespaces + loop /scratch + sshd + slurmd, see nodes.py) plus
one private munged and one slurmctld. All of it is recorded in the state dir (records.py);
`down` removes exactly what is recorded. Mutating calls hold a lock file in the state dir.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from deploy import slurmroot
from deploy.minicluster import argv, preflight, render
from deploy.minicluster.nodes import Nodes, listening, unshared
from deploy.minicluster.procs import (
    Proc,
    alive,
    cgroup_create,
    cgroup_kill_all,
    cgroup_remove,
    launch,
    reaped,
    run,
    stop,
    tail,
    wait_until,
)
from deploy.minicluster.records import CTL, RUNTIME_FILE, Records
from deploy.minicluster.spec import (
    DEFAULT_STATE_DIR,
    LOOP_FAULTS,
    SHIM_TOOLS,
    SPEC_FILE,
    ClusterError,
    ClusterInfo,
    ClusterSpec,
    parse_fault_arg,
    parse_fault_value,
    read_json,
    validate_state_dir,
)
from deploy.slurmroot import tool_in_root

T = TypeVar("T")
FaultArg = str | tuple[str, str, int | str | None]
READY_STATES = frozenset({"idle", "allocated", "mixed", "completing", "drained", "draining"})
# root's JWT for slurmrestd: a day, renewed by any up or repair after half of it has passed
REST_TOKEN_LIFESPAN_S = 86400
_REMOVED_ON_DOWN = ("ssh", "slurm", "munge", "nodes", "faults", "bin", RUNTIME_FILE, SPEC_FILE)


@dataclass(frozen=True)
class NodeStatus:
    """One node as `status` sees it."""

    name: str
    addr: str
    holder: bool
    sshd: bool
    slurmd: bool | None  # None: --sshd-only
    loop: str | None
    slurm_state: str | None
    faults: dict[str, int | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterStatus:
    """The whole cluster as `status` sees it; `healthy` means every daemon is running."""

    info: ClusterInfo
    munged: bool | None
    slurmctld: bool | None
    nodes: list[NodeStatus]
    controller_ns: bool | None = None  # None: no controller holder (the host's Slurm)

    @property
    def healthy(self) -> bool:
        return (
            self.munged is not False
            and self.slurmctld is not False
            and self.controller_ns is not False
            and all(
                n.holder and (n.sshd or "unreachable" in n.faults) and n.slurmd is not False
                for n in self.nodes
            )
        )


def parse_sinfo(text: str) -> dict[str, str]:
    """`sinfo --Node --format='%N %T'` -> {node: state} (state keeps a '*' if not responding)."""
    states = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1].lower()
    return states


class Cluster:
    """Handle on the cluster recorded in `state_dir` (which may not be up yet)."""

    def __init__(self, state_dir: Path | str = DEFAULT_STATE_DIR) -> None:
        self.state_dir = validate_state_dir(Path(state_dir))

    def info(self) -> ClusterInfo:
        """ClusterInfo of the cluster in the state dir (ClusterError if there is none)."""
        return ClusterInfo.load(self.state_dir)

    # -- up --------------------------------------------------------------------------------
    def up(
        self,
        nodes: int = 8,
        *,
        prefix: str = "node",
        subnet: str = "127.0.10",
        slurm_port_base: int = 17000,
        sshd_only: bool = False,
        scratch_mib: int = 1024,
        prolog: str | None = None,
        epilog: str | None = None,
        nested_loop: bool = False,
        faults: Sequence[FaultArg] = (),
        timeout: float = 180.0,
        slurm_version: str | None = None,
        pace: str | int | None = None,
        pace_iops: str | int | None = None,
    ) -> ClusterInfo:
        """Bring the cluster up, or check and repair it if it is up with the same arguments.

        ``slurm_version`` (24.11, 26.05): run that Slurm from deploy.slurmroot's root, which
        must be built already (ClusterError saying how otherwise); None: the host's.
        ``pace`` (bytes/s: 300M) and ``pace_iops``: every device's rate when healthy."""
        spec = ClusterSpec(
            nodes=nodes,
            prefix=prefix,
            subnet=subnet,
            slurm_port_base=slurm_port_base,
            sshd_only=sshd_only,
            scratch_mib=scratch_mib,
            prolog=_hook_path("--prolog", prolog),
            epilog=_hook_path("--epilog", epilog),
            nested_loop=nested_loop,
            slurm_version=slurm_version,
            pace_bps=_pace_value("--pace", pace),
            pace_iops=_pace_value("--pace-iops", pace_iops),
        )
        require_root(spec.slurm_version)
        wanted = [_fault_tuple(f) for f in faults]
        for node, kind, _ in wanted:  # refuse bad faults before building anything
            ClusterInfo(self.state_dir, spec).index(node)
            if sshd_only and kind in LOOP_FAULTS:
                raise ClusterError(f"{kind} needs /scratch, which an --sshd-only cluster lacks")
        preflight.check(sshd_only, ClusterInfo(self.state_dir, spec).slurm_root)
        deadline = time.monotonic() + timeout
        with self._locked():
            data = read_json(self.state_dir / SPEC_FILE)
            if data is not None:
                info = ClusterInfo.load(self.state_dir)
                if info.spec != spec:
                    raise ClusterError(
                        f"a different cluster is recorded in {self.state_dir} "
                        f"({_describe(info.spec)}); run `down` first or use another --state-dir"
                    )
                _Bringup(info).repair(deadline)
            else:
                info = ClusterInfo(self.state_dir, spec)
                info.save()
                try:
                    _Bringup(info).build(deadline)
                except BaseException:
                    self._down(info, time.monotonic() + 60)
                    raise
            recs = Records(self.state_dir)
            ops = Nodes(info, recs)
            for node in info.nodes:  # new or repaired nodes start at the pace
                ops.pace(node)
            for node, kind, value in wanted:
                ops.inject(node, kind, value)
        return info

    # -- down ------------------------------------------------------------------------------
    def down(self, timeout: float = 60.0) -> bool:
        """Remove everything recorded; False if there was nothing to remove. Logs are kept."""
        if (
            not (self.state_dir / SPEC_FILE).exists()
            and not (self.state_dir / RUNTIME_FILE).exists()
        ):
            return False
        with self._locked():
            try:
                info: ClusterInfo | None = ClusterInfo.load(self.state_dir)
            except ClusterError:
                info = None
            self._down(info, time.monotonic() + timeout)
        return True

    def _down(self, info: ClusterInfo | None, deadline: float) -> None:
        recs = Records(self.state_dir)
        ops = Nodes(info or ClusterInfo(self.state_dir, ClusterSpec()), recs)
        names = [n for n in list(recs.nodes) if n != CTL]
        killed = [
            p for procs in _parallel(lambda n: ops.teardown(n, deadline), names) for p in procs
        ]
        ctl = recs.node(CTL)
        for proc in ctl.procs.values():
            with contextlib.suppress(ClusterError):
                stop(proc, grace=2.0)
            killed.append(proc)
        if ctl.cgroup:
            killed += cgroup_kill_all(Path(ctl.cgroup), deadline)
            cgroup_remove(Path(ctl.cgroup), deadline)
        recs.forget(CTL)
        for name in _REMOVED_ON_DOWN:
            path = self.state_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        # Dead already; init reaps orphans about once a second here. Wait, so that `down`
        # returning means not even a <defunct> entry is left (bounded: zombies harm nothing).
        with contextlib.suppress(ClusterError):
            reap_by = min(deadline, time.monotonic() + 5.0)
            wait_until("init to reap", lambda: all(map(reaped, killed)), reap_by)

    # -- status ----------------------------------------------------------------------------
    def status(self) -> ClusterStatus:
        """Liveness of every recorded daemon, loop devices, Slurm node states, faults."""
        info = self.info()
        recs = Records(self.state_dir)
        ctl = recs.node(CTL)
        slurm_states: dict[str, str] = {}
        if info.slurm:
            cmd = argv.sinfo_states(info.client_bin)
            with contextlib.suppress(ClusterError, OSError):  # OSError: a shim not written yet
                slurm_states = parse_sinfo(run(cmd, timeout=15, env=info.env()))
        nodes = []
        for node in info.nodes:
            rec = recs.node(node)
            nodes.append(
                NodeStatus(
                    name=node,
                    addr=info.addr(node),
                    holder=alive(rec.procs.get("holder")),
                    sshd=alive(rec.procs.get("sshd")),
                    slurmd=alive(rec.procs.get("slurmd")) if info.slurm else None,
                    loop=rec.loop,
                    slurm_state=slurm_states.get(node),
                    faults=dict(rec.faults),
                )
            )
        return ClusterStatus(
            info=info,
            munged=alive(ctl.procs.get("munged")) if info.slurm else None,
            slurmctld=alive(ctl.procs.get("slurmctld")) if info.slurm else None,
            nodes=nodes,
            controller_ns=alive(ctl.procs.get("holder")) if info.slurm_root else None,
        )

    # -- faults ----------------------------------------------------------------------------
    def inject(self, node: str, kind: str, value: int | str | None = None) -> None:
        """Inject a fault into a running node (see spec.FAULT_KINDS) and record it."""
        parsed = parse_fault_value(kind, value)
        with self._locked():
            info = self.info()
            info.index(node)
            Nodes(info, Records(self.state_dir)).inject(node, kind, parsed)

    def heal(self, node: str | None = None, timeout: float = 60.0) -> dict[str, list[str]]:
        """Reverse the recorded faults of one node (or all); returns {node: [kinds healed]}."""
        deadline = time.monotonic() + timeout
        with self._locked():
            info = self.info()
            targets = [node] if node is not None else info.nodes
            for n in targets:
                info.index(n)
            ops = Nodes(info, Records(self.state_dir))
            healed = {n: ops.heal(n, deadline) for n in targets}
        return {n: kinds for n, kinds in healed.items() if kinds}

    # -- helpers ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise mutating operations on this state dir across processes."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield


class _Bringup:
    """The ordered steps of `up` (fresh build or repair) for one cluster."""

    def __init__(self, info: ClusterInfo) -> None:
        self.info = info
        self.recs = Records(info.state_dir)
        self.nodes = Nodes(info, self.recs)

    def build(self, deadline: float) -> None:
        info = self.info
        for d in (info.ssh_dir, info.logs_dir, info.slurm_dir / "state", info.munge_dir):
            d.mkdir(parents=True, exist_ok=True)
        self._check_ports_free()
        Path(info.scratch).mkdir(exist_ok=True)  # empty mount point; each node mounts its own
        if not info.client_key.exists():
            run(argv.keygen(info.client_key, f"minicluster-{info.cluster_id}"))
        info.authorized_keys.write_text(Path(f"{info.client_key}.pub").read_text())
        self._start_controller(deadline)
        _parallel(lambda n: self.nodes.build(n, deadline), info.nodes)
        self._write_client_files()
        if info.slurm:
            self._wait_controller(deadline)
            self._start_rest(deadline)
            _parallel(lambda n: self.nodes.start_slurmd(n, deadline), info.nodes)
        self._wait_ready(deadline, fresh=True)

    def repair(self, deadline: float) -> None:
        """Restart what died; rebuild nodes whose namespace is gone. Faults are respected."""
        info = self.info
        ctl = self.recs.node(CTL)
        if info.slurm and not (
            alive(ctl.procs.get("munged"))
            and alive(ctl.procs.get("slurmctld"))
            and (info.slurm_root is None or alive(ctl.procs.get("holder")))
        ):
            self._start_controller(deadline, only_dead=True)

        def fix(node: str) -> None:
            if not self.nodes.healthy_holder(node):
                self.nodes.teardown(node, deadline)
                self.nodes.build(node, deadline)
                return
            rec = self.recs.node(node)
            if not info.spec.sshd_only and not self.nodes.scratch_mounted(node):
                self.nodes.remount(node)
            if "unreachable" not in rec.faults and not alive(rec.procs.get("sshd")):
                self.nodes.start_sshd(node, deadline)

        _parallel(fix, info.nodes)
        self._write_client_files()
        if info.slurm:
            self._wait_controller(deadline)
            self._start_rest(deadline, only_dead=True)
            dead = [n for n in info.nodes if not alive(self.recs.node(n).procs.get("slurmd"))]
            _parallel(lambda n: self.nodes.start_slurmd(n, deadline), dead)
        self._wait_ready(deadline, fresh=False)

    def _check_ports_free(self) -> None:
        info = self.info
        if not info.slurm:
            return
        ports = [info.slurmctld_port] + [info.slurmd_port(n) for n in info.nodes]
        for port in ports + ([info.rest_port] if info.rest else []):
            if listening(port):
                raise ClusterError(
                    f"port {port} is already in use (another cluster? pick another "
                    f"--slurm-port-base than {info.spec.slurm_port_base})"
                )

    def _start_controller(self, deadline: float, only_dead: bool = False) -> None:
        """Controller-side cgroup; with Slurm: munge key, slurm.conf, munged, slurmctld."""
        info = self.info
        cg = cgroup_create(info.cgroup_name(None))
        self.recs.update(CTL, cgroup=str(cg))
        if not info.slurm:
            return
        key = info.munge_dir / "munge.key"
        if not key.exists():
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(1024))
        if info.rest and not info.jwt_key.exists():  # kept across repairs: tokens stay valid
            fd = os.open(info.jwt_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(64))  # HS256: slurm.conf(5) wants at least 32 random bytes
        hooks = {}
        for name, script in (("prolog", info.spec.prolog), ("epilog", info.spec.epilog)):
            if script is not None:
                wrapper = info.slurm_dir / f"{name}_slurmctld.sh"
                wrapper.write_text(render.hook_wrapper(info, script))
                wrapper.chmod(0o755)
                hooks[name] = wrapper
        info.slurm_conf.write_text(
            render.slurm_conf(info, os.cpu_count() or 1, hooks.get("prolog"), hooks.get("epilog"))
        )
        ctl = self.recs.node(CTL)
        enter = self._controller_namespace(cg, deadline)
        if not (only_dead and alive(ctl.procs.get("munged"))):
            log = info.logs_dir / "munged.log"
            exe = self.nodes.exe("munged")
            cmd = enter(argv.munged(info.munge_socket, key, info.munge_dir, exe))
            proc = launch("munged", cmd, cg, info.munge_dir / "launch.pid", log, deadline)
            self.recs.set_proc(CTL, "munged", proc)
            wait_until(
                "munged's socket",
                lambda: info.munge_socket.exists() or _dead("munged", proc, log),
                deadline,
            )
        if not (only_dead and alive(ctl.procs.get("slurmctld"))):
            log = info.logs_dir / "slurmctld.out"
            cmd = enter(argv.slurmctld(info.slurm_conf, self.nodes.exe("slurmctld")))
            proc = launch("slurmctld", cmd, cg, info.slurm_dir / "launch.pid", log, deadline)
            self.recs.set_proc(CTL, "slurmctld", proc)

    def _controller_namespace(self, cg: Path, deadline: float) -> Callable[[list[str]], list[str]]:
        """How a controller daemon is started: as is (the host's Slurm), or inside the
        controller holder's mount namespace with the root's binds (a versioned cluster; the
        holder is started, and bound, if it is not running)."""
        info = self.info
        root = info.slurm_root
        if root is None:
            return lambda cmd: cmd
        ctl = self.recs.node(CTL)
        holder = ctl.procs.get("holder")
        if not alive(holder):
            # Daemons of a namespace nobody can enter any more: restarted in the new one.
            for role in ("slurmrestd", "slurmctld", "munged"):
                stop(ctl.procs.get(role), grace=2.0)
                self.recs.set_proc(CTL, role, None)
            log = info.logs_dir / "controller.holder.log"
            pidfile = info.slurm_dir / "holder.pid"
            what = "controller namespace holder"
            holder = launch(what, argv.holder(uts=False), cg, pidfile, log, deadline)
            self.recs.set_proc(CTL, "holder", holder)
            pid = holder.pid
            wait_until(
                "the controller namespace holder to unshare",
                lambda: unshared(pid, ("mnt",)),
                deadline,
                lambda: tail(log),
            )
            for cmd in argv.root_binds(root):
                run(argv.in_controller(pid, cmd))
                self.recs.add_mount(CTL, cmd[-1])
        assert holder is not None
        pid = holder.pid
        return lambda cmd: argv.in_controller(pid, cmd)

    def _start_rest(self, deadline: float, only_dead: bool = False) -> None:
        """A versioned cluster's slurmrestd, in the controller's namespace, as nobody, on its
        unix socket and a loopback port, plus root's JWT in rest_token_file (fresh at every
        up and repair past half its lifespan: the rotation an admin's timer does, docs/slurm.md)."""
        info = self.info
        if not info.rest:
            return
        ctl = self.recs.node(CTL)
        cg = Path(ctl.cgroup or info.cgroup_name(None))
        enter = self._controller_namespace(cg, deadline)
        self._write_token(enter)
        if only_dead and alive(ctl.procs.get("slurmrestd")):
            return
        stop(ctl.procs.get("slurmrestd"), grace=2.0)
        info.rest_socket.parent.mkdir(exist_ok=True)
        os.chown(info.rest_socket.parent, 65534, 65534)  # it binds the socket as nobody
        info.rest_socket.unlink(missing_ok=True)  # a dead one's socket: bind() fails on it
        listen = [f"unix:{info.rest_socket}", f"127.0.0.1:{info.rest_port}"]
        exe = self.nodes.exe("slurmrestd")
        assert exe is not None  # a versioned cluster: the root's
        cmd = enter(argv.slurmrestd(info.slurm_conf, listen, exe))
        log = info.logs_dir / "slurmrestd.log"
        pidfile = info.slurm_dir / "rest.launch.pid"
        proc = launch("slurmrestd", cmd, cg, pidfile, log, deadline)
        self.recs.set_proc(CTL, "slurmrestd", proc)
        wait_until(
            f"slurmrestd on port {info.rest_port}",
            lambda: (
                (listening(info.rest_port) and info.rest_socket.exists())
                or _dead("slurmrestd", proc, log)
            ),
            deadline,
            lambda: tail(log),
        )

    def _write_token(self, enter: Callable[[list[str]], list[str]]) -> None:
        """root's JWT from the root's `scontrol token` (slurmctld signs it), written 0600 and
        atomically: a client reading it mid-rotation sees the old token or the new one.
        Kept while younger than half its lifespan."""
        info = self.info
        with contextlib.suppress(FileNotFoundError):
            age = time.time() - info.rest_token_file.stat().st_mtime
            if 0 <= age < REST_TOKEN_LIFESPAN_S / 2:
                return
        exe = self.nodes.exe("scontrol")
        assert exe is not None
        out = run(enter(argv.scontrol_token(info.slurm_conf, REST_TOKEN_LIFESPAN_S, exe)))
        token = out.strip().removeprefix("SLURM_JWT=")
        if not token or not token.isascii() or any(c.isspace() for c in token):
            raise ClusterError(f"scontrol token printed no token: {out.strip()[:80]!r}")
        tmp = info.rest_token_file.with_name(f".{info.rest_token_file.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.replace(tmp, info.rest_token_file)

    def _wait_controller(self, deadline: float) -> None:
        info = self.info
        proc = self.recs.node(CTL).procs.get("slurmctld")
        log = info.logs_dir / "slurmctld.log"
        wait_until(
            f"slurmctld on port {info.slurmctld_port}",
            lambda: listening(info.slurmctld_port) or _dead("slurmctld", proc, log),
            deadline,
            lambda: tail(log),
        )

    def _write_client_files(self) -> None:
        info = self.info
        keys = {n: self.nodes.host_key(n) for n in info.nodes}
        info.known_hosts.write_text(render.known_hosts(info, keys))
        info.ssh_config.write_text(render.ssh_config(info))
        self._write_shims()

    def _write_shims(self) -> None:
        """A versioned cluster: <state_dir>/bin/<tool> for each Slurm client its root ships,
        each entering the controller holder (pid as recorded now; rewritten by every `up`).
        Written atomically: a client may be running one while a repair rewrites it."""
        info = self.info
        root, bin_dir = info.slurm_root, info.client_bin
        if root is None or bin_dir is None:
            return
        holder = self.recs.node(CTL).procs.get("holder")
        if not alive(holder):
            raise ClusterError("the controller namespace holder is not running")
        assert holder is not None
        bin_dir.mkdir(exist_ok=True)
        for name in SHIM_TOOLS:
            path = bin_dir / name
            found = tool_in_root(root, name)
            if found is None:
                path.unlink(missing_ok=True)
                continue
            tmp = bin_dir / f".{name}.tmp"
            tmp.write_text(render.slurm_shim(argv.tool("nsenter"), holder.pid, found))
            tmp.chmod(0o755)
            os.replace(tmp, path)

    def _wait_ready(self, deadline: float, fresh: bool) -> None:
        """sshd answers on every reachable node; sinfo shows every node idle (or usable)."""
        info = self.info
        reachable = [n for n in info.nodes if "unreachable" not in self.recs.node(n).faults]
        _parallel(lambda n: self.nodes.wait_sshd(n, deadline), reachable)
        if not info.slurm:
            return
        last: dict[str, str] = {}

        def all_idle() -> bool:
            nonlocal last
            for n in info.nodes:
                proc = self.recs.node(n).procs.get("slurmd")
                if not alive(proc):
                    _dead(f"slurmd of {n}", proc, info.logs_dir / f"{n}.slurmd.log")
            last = parse_sinfo(run(argv.sinfo_states(info.client_bin), timeout=30, env=info.env()))
            ok = {"idle"} if fresh else READY_STATES
            return all(last.get(n) in ok for n in info.nodes)

        wait_until(
            "every slurmd to register idle",
            all_idle,
            deadline,
            lambda: ", ".join(f"{n}={s}" for n, s in sorted(last.items()) if s != "idle"),
        )


def _dead(what: str, proc: Proc | None, log: Path) -> bool:
    """For readiness polls: raise at once if the daemon died instead of waiting it out."""
    if alive(proc):
        return False
    raise ClusterError(f"{what} exited: {tail(log)}")


def _parallel(fn: Callable[[str], T], items: Iterable[str]) -> list[T]:
    """Run fn over nodes on a small pool; the first failure is raised after all finish."""
    todo = list(items)
    if not todo:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(todo))) as pool:
        futures = [pool.submit(fn, item) for item in todo]
    return [fut.result() for fut in futures]


def require_root(version: str | None) -> Path | None:
    """The built root of a Slurm version (None: the host's Slurm); a one-line ClusterError
    naming the command that builds it. Never a silent fall back to the host's Slurm."""
    if version is None:
        return None
    try:
        return slurmroot.find(version).path
    except slurmroot.SlurmRootError as exc:
        raise ClusterError(str(exc)) from None


def _hook_path(flag: str, path: str | None) -> str | None:
    """Absolute path of an executable hook script, or a one-line error."""
    if path is None:
        return None
    full = os.path.abspath(path)
    if not os.path.isfile(full) or not os.access(full, os.X_OK):
        raise ClusterError(f"{flag} {path}: not an executable file")
    return full


def _pace_value(flag: str, value: str | int | None) -> int:
    """A pace as a number (300M -> 300000000; None or "" -> 0, unpaced); one-line errors."""
    if value is None or value == "":
        return 0
    try:
        return parse_fault_value("slow_read", value) or 0
    except ClusterError:
        raise ClusterError(f"{flag}: bad rate {value!r} (use e.g. 300M, 20000)") from None


def _fault_tuple(fault: FaultArg) -> tuple[str, str, int | None]:
    if isinstance(fault, str):
        return parse_fault_arg(fault)
    node, kind, value = fault
    return node, kind, parse_fault_value(kind, value)


def _describe(spec: ClusterSpec) -> str:
    kind = "sshd-only" if spec.sshd_only else "slurm"
    if spec.slurm_version is not None:
        kind += f" {spec.slurm_version}"
    return (
        f"{spec.nodes} x {spec.prefix}, subnet {spec.subnet}, "
        f"slurm ports {spec.slurm_port_base}+, {kind}"
    )
