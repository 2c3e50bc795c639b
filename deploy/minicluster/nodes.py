"""One emulated node: namespace holder, cgroup, loop-backed /scratch, sshd, slurmd; and the
faults that act on it. Every creation is recorded before the next step runs."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import pwd
import signal
import socket
import stat
import struct
import threading
from pathlib import Path

from deploy.minicluster import argv, render
from deploy.minicluster.procs import (
    Proc,
    alive,
    cgroup_create,
    cgroup_kill_all,
    cgroup_path,
    cgroup_remove,
    launch,
    loop_backing,
    loop_devnum,
    run,
    set_throttle,
    stop,
    tail,
    wait_until,
)
from deploy.minicluster.records import NodeRecord, Records
from deploy.minicluster.spec import (
    LOOP_FAULTS,
    ClusterError,
    ClusterInfo,
    PreconditionError,
)
from deploy.slurmroot import tool_in_root

# sshd's compiled-in privilege-separation directory (Debian: /run/sshd). sshd refuses to
# start unless it exists, is owned by root and is not group/world-writable. Debian creates
# it from the systemd unit (RuntimeDirectory=sshd), which never runs here, and /run is a
# tmpfs that a reboot empties: so the cluster creates it itself, every time sshd starts.
SSHD_PRIVSEP_DIR = Path("/run/sshd")
FILL_NAME = ".minicluster-full_scratch"  # the file full_scratch allocates
FULL_FREE_BYTES = 1 << 20  # full_scratch leaves less than this free
_LOOP_LOCK = threading.Lock()  # our own losetup --find calls never race each other
# Every emulated node's devices read ahead alike. A loop device keeps whatever read-ahead
# its previous user left (seen on one machine: 37 at 128 KiB, 21 at 2,560), and the probe's
# facts report a node whose read-ahead differs from its peers' as drift: one emulation
# variable fewer between nodes that are meant to be alike (issue 44). 128 KiB is the
# kernel's default for a new block device.
READ_AHEAD_KB = 128


def set_read_ahead(device: str, kib: int = READ_AHEAD_KB) -> None:
    """Set a loop device's read-ahead through sysfs, so every node's device reads alike."""
    queue = Path("/sys/block") / Path(device).name / "queue" / "read_ahead_kb"
    try:
        queue.write_text(f"{kib}\n")
    except OSError as exc:
        raise ClusterError(f"cannot set read-ahead of {device}: {exc}") from None


class Nodes:
    """Operations on the nodes of one cluster; safe to call for different nodes in threads."""

    def __init__(self, info: ClusterInfo, records: Records) -> None:
        self.info = info
        self.rec = records

    # -- bring-up ----------------------------------------------------------------------------
    def build(self, node: str, deadline: float) -> None:
        """Create the node up to a running sshd (slurmd comes later, once slurmctld listens)."""
        info = self.info
        nd = info.node_dir(node)
        nd.mkdir(parents=True, exist_ok=True)
        key = nd / "ssh_host_ed25519_key"
        if not key.exists():
            run(argv.keygen(key, f"{node}-hostkey"))
        cg = cgroup_create(info.cgroup_name(node))
        self.rec.update(node, cgroup=str(cg))
        holder = launch(
            "namespace holder",
            argv.holder(),
            cg,
            nd / "holder.pid",
            self._log(node, "holder"),
            deadline,
        )
        self.rec.set_proc(node, "holder", holder)
        # The launcher records its pid *before* it execs unshare: until unshare(2) has run,
        # nsenter -t <pid> would enter the host's namespaces and rename the host itself.
        wait_until(
            f"{node} namespace holder to unshare",
            lambda: unshared(holder.pid),
            deadline,
            lambda: tail(self._log(node, "holder")),
        )
        self.bind_root(node, holder)
        run(argv.in_node(holder.pid, argv.set_hostname(node)))
        self._quiet_login_shell(node, holder)
        if not info.spec.sshd_only:
            self._make_scratch(node, holder)
        self.start_sshd(node, deadline)

    def bind_root(self, node: str, holder: Proc) -> None:
        """A versioned cluster: the root's /usr (and ld.so.cache, alternatives) bound in the
        node before anything runs there, so its sshd, slurmd, job steps and every ssh
        command (fio, iostat, the venv's python under the root's glibc) are that version's.
        They go with the namespace: nothing to undo at teardown."""
        root = self.info.slurm_root
        if root is None:
            return
        for cmd in argv.root_binds(root):
            run(argv.in_node(holder.pid, cmd))
            self.rec.add_mount(node, cmd[-1])

    def exe(self, name: str) -> str | None:
        """A daemon's binary: the root's (a versioned cluster), None for the host's."""
        root = self.info.slurm_root
        if root is None:
            return None
        found = tool_in_root(root, name)
        if found is None:
            raise ClusterError(f"{root} has no {name}: rebuild it (make slurm-root)")
        return found

    def _quiet_login_shell(self, node: str, holder: Proc) -> None:
        """Hide this machine's ~root/.bashrc inside the node (an empty file bound over it).

        sshd runs every command through root's bash, which sources ~/.bashrc even when not
        interactive. A development machine's .bashrc (here: `pyenv init`, which rehashes
        under a lock file) then runs on every probe command: slower, and a session killed
        mid-rehash leaves a stale lock that stalls every later SSH command for 60 s. A real
        compute node has none of that, so the emulated one does not either.
        """
        rc = Path(pwd.getpwuid(0).pw_dir) / ".bashrc"
        if not rc.is_file():
            return
        empty = self.info.node_dir(node) / "empty-bashrc"
        empty.write_text("# the node's root has no .bashrc (deploy/minicluster/nodes.py)\n")
        run(argv.in_node(holder.pid, argv.bind_mount(empty, str(rc))))
        self.rec.add_mount(node, str(rc))

    def _make_scratch(self, node: str, holder: Proc) -> None:
        """Sparse image -> ext4 -> loop device -> mounted at /scratch inside the node only.

        nested_loop: the image lives on an ext4 of its own lower loop device (image in
        /dev/shm, mounted under the node dir on the host) and is attached with direct I/O."""
        if self.info.spec.nested_loop:
            image = self._make_outer(node)  # the lower loop device itself
            self.rec.update(node, image=str(image))
        else:
            image = self.info.node_dir(node) / "scratch.img"
            self.rec.update(node, image=str(image))
            image.unlink(missing_ok=True)
            with open(image, "wb") as f:
                f.truncate(self.info.spec.scratch_mib << 20)  # sparse: costs only what is written
        run(argv.mkfs(image, node))
        self._attach_and_mount(node, holder, image)

    def _make_outer(self, node: str) -> Path:
        """nested_loop: the lower loop device (image in /dev/shm) that backs /scratch's loop.

        No file system and no mount: the scratch loop is backed by the lower *device* with
        direct I/O. (A lower file system mounted on the host leaked into every mount
        namespace created meanwhile, other clusters' included, and kept the device busy.)"""
        outer = Path("/dev/shm") / f"{self.info.cluster_id}-{node}-outer.img"
        self.rec.update(node, outer_image=str(outer))
        outer.unlink(missing_ok=True)
        with open(outer, "wb") as f:
            f.truncate(self.info.spec.scratch_mib << 20)
        with _LOOP_LOCK:
            device = run(argv.losetup_attach(outer)).strip()
        self.rec.update(node, outer_loop=device)
        set_read_ahead(device)
        return Path(device)

    def throttle_device(self, node: str) -> str | None:
        """The loop device whose blkio throttle slows the node: the lower one when nested."""
        rec = self.rec.node(node)
        return rec.outer_loop if self.info.spec.nested_loop else rec.loop

    def _attach_and_mount(self, node: str, holder: Proc, image: Path) -> None:
        attach = argv.losetup_attach_direct if self.info.spec.nested_loop else argv.losetup_attach
        with _LOOP_LOCK:
            try:
                device = run(attach(image)).strip()
            except ClusterError as exc:
                raise PreconditionError(f"no loop device available: {exc}") from None
        self.rec.update(node, loop=device)
        set_read_ahead(device)
        run(argv.in_node(holder.pid, argv.mount_scratch(device, self.info.scratch)))
        self.rec.add_mount(node, self.info.scratch)

    def start_sshd(self, node: str, deadline: float) -> None:
        """(Re)start the node's sshd inside its namespaces and cgroup, same host key."""
        info = self.info
        nd = info.node_dir(node)
        conf = nd / "sshd_config"
        conf.write_text(render.sshd_config(info, node))
        addr = (info.addr(node), info.ssh_port)
        if listening(addr[1], addr[0]):
            raise ClusterError(
                f"{addr[0]}:{addr[1]} is already in use (another cluster on subnet "
                f"{info.spec.subnet}? pick another --subnet)"
            )
        ensure_privsep_dir()
        holder = self._holder(node)
        log = self._log(node, "sshd")
        proc = launch(
            "sshd",
            argv.in_node(holder.pid, argv.sshd(conf, self.exe("sshd"))),
            self._cgroup(node),
            nd / "sshd.pid",
            log,
            deadline,
        )
        self.rec.set_proc(node, "sshd", proc)

    def wait_sshd(self, node: str, deadline: float) -> None:
        """Until the node's sshd answers with an SSH banner (and is still our process)."""
        proc = self.rec.node(node).procs.get("sshd")
        addr = (self.info.addr(node), self.info.ssh_port)
        log = self._log(node, "sshd")

        def ready() -> bool:
            if not alive(proc):
                raise ClusterError(f"sshd of {node} exited: {tail(log)}")
            return _ssh_banner(addr)

        wait_until(f"sshd of {node} on {addr[0]}:{addr[1]}", ready, deadline, lambda: tail(log))

    def start_slurmd(self, node: str, deadline: float) -> None:
        """(Re)start the node's slurmd inside its namespaces and cgroup."""
        info = self.info
        (info.slurm_dir / "spool" / node).mkdir(parents=True, exist_ok=True)
        holder = self._holder(node)
        cmd = argv.in_node(holder.pid, argv.slurmd(node, info.slurm_conf, self.exe("slurmd")))
        log = self._log(node, "slurmd")
        proc = launch(
            "slurmd", cmd, self._cgroup(node), info.node_dir(node) / "slurmd.pid", log, deadline
        )
        self.rec.set_proc(node, "slurmd", proc)

    def host_key(self, node: str) -> str:
        return (self.info.node_dir(node) / "ssh_host_ed25519_key.pub").read_text()

    # -- repair / teardown -----------------------------------------------------------------
    def healthy_holder(self, node: str) -> bool:
        return alive(self.rec.node(node).procs.get("holder"))

    def scratch_mounted(self, node: str) -> bool:
        """Is /scratch mounted in the node's mount namespace (per the holder's mountinfo)?"""
        holder = self._holder(node)
        mountinfo = Path(f"/proc/{holder.pid}/mountinfo").read_text()
        return any(ln.split()[4] == self.info.scratch for ln in mountinfo.splitlines())

    def remount(self, node: str) -> None:
        """Re-attach (if needed) and mount the existing image."""
        rec = self.rec.node(node)
        image = Path(rec.image) if rec.image else self.info.node_dir(node) / "scratch.img"
        if rec.loop and loop_backing(rec.loop) == str(image):
            run(
                argv.in_node(
                    self._holder(node).pid, argv.mount_scratch(rec.loop, self.info.scratch)
                )
            )
            self.rec.add_mount(node, self.info.scratch)
        else:
            self._attach_and_mount(node, self._holder(node), image)

    def teardown(self, node: str, deadline: float) -> list[Proc]:
        """Undo exactly what the record says: processes (the whole cgroup), loop, image, cgroup.

        Killing every process in the node's cgroup (holder, sshd, slurmd, sessions, job steps)
        ends the mount namespace, which releases /scratch and any fault overlay with it.
        Returns the processes it killed (dead, but maybe not yet reaped by init)."""
        rec = self.rec.node(node)
        killed = list(rec.procs.values())
        for proc in rec.procs.values():
            if alive(proc):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
        if rec.cgroup:
            cg = Path(rec.cgroup)
            killed += cgroup_kill_all(cg, deadline)
            cgroup_remove(cg, deadline)
        wait_until(f"{node}'s processes to exit", lambda: not any(map(alive, killed)), deadline)
        if rec.loop and rec.image and loop_backing(rec.loop) == rec.image:
            device, image = rec.loop, rec.image
            with contextlib.suppress(ClusterError):  # raced with the kernel's autoclear
                run(argv.losetup_detach(device))
            wait_until(
                f"{device} to detach",
                lambda: loop_backing(device) != image,
                deadline,
                lambda: f"{image} still attached",
            )
        if rec.image and not rec.image.startswith("/dev/"):  # nested: the image is a device
            Path(rec.image).unlink(missing_ok=True)
        self._teardown_outer(rec, deadline)
        self.rec.forget(node)
        return killed

    def _teardown_outer(self, rec: NodeRecord, deadline: float) -> None:
        """nested_loop: detach the lower loop device, delete its image."""
        if rec.outer_loop and rec.outer_image and loop_backing(rec.outer_loop) == rec.outer_image:
            device, image = rec.outer_loop, rec.outer_image
            with contextlib.suppress(ClusterError):
                run(argv.losetup_detach(device))
            wait_until(f"{device} to detach", lambda: loop_backing(device) != image, deadline)
        if rec.outer_image:
            Path(rec.outer_image).unlink(missing_ok=True)

    # -- faults ------------------------------------------------------------------------------
    def inject(self, node: str, kind: str, value: int | None) -> None:
        """Apply one fault to a running node and record it (re-injecting updates the value)."""
        rec = self.rec.node(node)
        if kind in LOOP_FAULTS and self.info.spec.sshd_only:
            raise ClusterError(f"{kind} needs /scratch, which an --sshd-only cluster lacks")
        if not self.healthy_holder(node):
            raise ClusterError(f"{node} is not running (run `up` again to repair it)")
        already = kind in rec.faults
        if kind in ("slow_read", "slow_randread", "slow_write"):
            device = self.throttle_device(node)
            assert value is not None and device is not None
            set_throttle(self._cgroup(node), kind, loop_devnum(device), value)
        elif kind == "unreachable":
            stop(rec.procs.get("sshd"))
            self.rec.set_proc(node, "sshd", None)
        elif kind == "no_fio" and not already:
            fio_dir = _fio_dir()
            run(
                argv.in_node(
                    self._holder(node).pid, argv.mount_overlay_hide(self._hide_dir(), fio_dir)
                )
            )
            self.rec.add_mount(node, fio_dir)
        elif kind == "full_scratch":
            _fill(Path(f"/proc/{self._holder(node).pid}/root{self.info.scratch}"))
        self.rec.set_fault(node, kind, value)

    def baseline(self, kind: str) -> int:
        """A throttle's healthy value: the spec's pace (0 = none) for slow_* kinds."""
        spec = self.info.spec
        return spec.pace_iops if kind == "slow_randread" else spec.pace_bps

    def pace(self, node: str) -> None:
        """Set the node's unfaulted throttles to the spec's pace (nothing when unpaced)."""
        device = self.throttle_device(node)
        rec = self.rec.node(node)
        if device is None or not rec.cgroup:
            return
        for kind in ("slow_read", "slow_randread", "slow_write"):
            if self.baseline(kind) and kind not in rec.faults:
                set_throttle(Path(rec.cgroup), kind, loop_devnum(device), self.baseline(kind))

    def heal(self, node: str, deadline: float) -> list[str]:
        """Reverse every recorded fault of the node; returns the kinds healed."""
        rec = self.rec.node(node)
        healed = []
        holder_ok = self.healthy_holder(node)
        for kind in list(rec.faults):
            if kind in ("slow_read", "slow_randread", "slow_write"):
                device = self.throttle_device(node)
                if rec.cgroup and device and Path(rec.cgroup).exists():
                    set_throttle(Path(rec.cgroup), kind, loop_devnum(device), self.baseline(kind))
            elif kind == "unreachable" and holder_ok:
                self.start_sshd(node, deadline)
                self.wait_sshd(node, deadline)
            elif kind == "no_fio" and holder_ok:
                fio_dir = _fio_dir()
                run(argv.in_node(self._holder(node).pid, argv.umount_lazy(fio_dir)))
                self.rec.drop_mount(node, fio_dir)
            elif kind == "full_scratch" and holder_ok:
                root = Path(f"/proc/{self._holder(node).pid}/root{self.info.scratch}")
                (root / FILL_NAME).unlink(missing_ok=True)
            self.rec.set_fault(node, kind, None, present=False)
            healed.append(kind)
        return healed

    # -- helpers -----------------------------------------------------------------------------
    def _holder(self, node: str) -> Proc:
        proc = self.rec.node(node).procs.get("holder")
        if not alive(proc):
            raise ClusterError(f"{node}'s namespace holder is gone (run `up` again to repair)")
        assert proc is not None
        return proc

    def _cgroup(self, node: str) -> Path:
        return cgroup_path(self.info.cgroup_name(node))

    def _log(self, node: str, what: str) -> Path:
        return self.info.logs_dir / f"{node}.{what}.log"

    def _hide_dir(self) -> Path:
        """A layer holding one whiteout (char 0:0) named fio: overlaid, it hides fio."""
        hide = self.info.state_dir / "faults" / "no_fio"
        whiteout = hide / "fio"
        if not whiteout.exists():
            hide.mkdir(parents=True, exist_ok=True)
            os.mknod(whiteout, stat.S_IFCHR | 0o600, os.makedev(0, 0))
        return hide


def _fio_dir() -> str:
    """Directory that provides `fio` on the host (and so in every node)."""
    path = argv.tool("fio")
    if not os.path.isabs(path):
        raise ClusterError("fio is not installed on this machine, so no_fio has nothing to hide")
    return os.path.dirname(os.path.realpath(path))


def _fill(scratch: Path) -> None:
    """Allocate a file until less than FULL_FREE_BYTES stay free (ENOSPC halves the step)."""
    fd = os.open(scratch / FILL_NAME, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(64):
            st = os.statvfs(scratch)
            free = st.f_bavail * st.f_frsize
            if free < FULL_FREE_BYTES:
                return
            step = max(4096, (free - FULL_FREE_BYTES // 4) // 4096 * 4096)
            while True:
                try:
                    os.posix_fallocate(fd, os.fstat(fd).st_size, step)
                    break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC or step <= 4096:
                        raise
                    step //= 2
    finally:
        os.close(fd)
    raise ClusterError(f"could not fill {scratch} below {FULL_FREE_BYTES} bytes free")


def listening(port: int, addr: str | None = None) -> bool:
    """Is a TCP socket listening on `port` (on `addr` or on the wildcard; any address when
    addr is None)? Read from /proc/net so probing never opens a connection (slurmctld logs
    every empty connection as an error)."""
    return any(p == port and (addr is None or a in (addr, "0.0.0.0", "::")) for a, p in listeners())


def listeners() -> set[tuple[str, int]]:
    """Every (address, port) in TCP LISTEN state on this machine (this network namespace)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A":
                ip_hex, port_hex = fields[1].rsplit(":", 1)
                found.add((_proc_net_ip(ip_hex), int(port_hex, 16)))
    return found


def _proc_net_ip(ip_hex: str) -> str:
    """/proc/net/tcp{,6} address (little-endian 32-bit words) -> text form."""
    raw = b"".join(struct.pack("<I", int(ip_hex[i : i + 8], 16)) for i in range(0, len(ip_hex), 8))
    return str(ipaddress.ip_address(raw))


def _ssh_banner(addr: tuple[str, int]) -> bool:
    """Does an SSH server answer at addr (banner `SSH-2.0-...`)?"""
    try:
        with socket.create_connection(addr, timeout=2.0) as s:
            return s.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def unshared(pid: int, namespaces: tuple[str, ...] = ("mnt", "uts")) -> bool:
    """True once ``pid`` lives in namespaces other than ours (mount and UTS for a node)."""
    try:
        return all(
            os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")
            for ns in namespaces
        )
    except OSError:
        return False


def ensure_privsep_dir(path: Path = SSHD_PRIVSEP_DIR) -> None:
    """Create sshd's privilege-separation directory as sshd checks it: root-owned, 0755.

    An existing directory with other owner or mode is corrected (sshd would refuse it);
    a non-directory in its place is an error, never silently removed.
    """
    try:
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
    except FileExistsError:
        raise ClusterError(f"{path} exists and is not a directory: sshd cannot start") from None
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode):
        raise ClusterError(f"{path} exists and is not a directory: sshd cannot start")
    if st.st_uid != 0 or st.st_gid != 0:
        os.chown(path, 0, 0)
    if stat.S_IMODE(st.st_mode) != 0o755:
        path.chmod(0o755)
