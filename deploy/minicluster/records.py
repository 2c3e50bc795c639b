"""runtime.json: everything `up` created (pids, cgroups, images, loop devices, mounts) and
every injected fault. Written after each creation, so `down` can undo even a half-done `up`."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.minicluster.procs import Proc
from deploy.minicluster.spec import read_json, write_json

RUNTIME_FILE = "runtime.json"
CTL = "_ctl"  # pseudo-node key for the controller side (munged, slurmctld)


@dataclass
class NodeRecord:
    """What exists for one node (or, under CTL, for the controller daemons)."""

    cgroup: str | None = None
    image: str | None = None
    loop: str | None = None
    mounts: list[str] = field(default_factory=list)
    # nested_loop: the lower loop device and its image (in /dev/shm)
    outer_image: str | None = None
    outer_loop: str | None = None
    procs: dict[str, Proc] = field(default_factory=dict)
    faults: dict[str, int | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "cgroup": self.cgroup,
            "image": self.image,
            "loop": self.loop,
            "mounts": list(self.mounts),
            "outer_image": self.outer_image,
            "outer_loop": self.outer_loop,
            "procs": {k: p.to_json() for k, p in self.procs.items()},
            "faults": dict(self.faults),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeRecord:
        return cls(
            cgroup=data.get("cgroup"),
            image=data.get("image"),
            loop=data.get("loop"),
            mounts=list(data.get("mounts", [])),
            outer_image=data.get("outer_image"),
            outer_loop=data.get("outer_loop"),
            procs={k: Proc.from_json(v) for k, v in data.get("procs", {}).items()},
            faults=dict(data.get("faults", {})),
        )


class Records:
    """Thread-safe runtime records; every mutation is persisted before it returns."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / RUNTIME_FILE
        self._lock = threading.Lock()
        data = read_json(self.path) or {}
        self.nodes: dict[str, NodeRecord] = {
            k: NodeRecord.from_json(v) for k, v in data.get("nodes", {}).items()
        }

    def node(self, name: str) -> NodeRecord:
        """The record for a node (CTL for the controller); created empty if missing."""
        with self._lock:
            return self.nodes.setdefault(name, NodeRecord())

    def update(self, name: str, **fields: Any) -> None:
        """Set fields of a node record and persist."""
        with self._lock:
            rec = self.nodes.setdefault(name, NodeRecord())
            for key, value in fields.items():
                setattr(rec, key, value)
            self._save()

    def set_proc(self, name: str, role: str, proc: Proc | None) -> None:
        """Record (or forget, with None) a daemon of a node and persist."""
        with self._lock:
            procs = self.nodes.setdefault(name, NodeRecord()).procs
            if proc is None:
                procs.pop(role, None)
            else:
                procs[role] = proc
            self._save()

    def add_mount(self, name: str, path: str) -> None:
        with self._lock:
            mounts = self.nodes.setdefault(name, NodeRecord()).mounts
            if path not in mounts:
                mounts.append(path)
            self._save()

    def drop_mount(self, name: str, path: str) -> None:
        with self._lock:
            mounts = self.nodes.setdefault(name, NodeRecord()).mounts
            if path in mounts:
                mounts.remove(path)
            self._save()

    def set_fault(self, name: str, kind: str, value: int | None, present: bool = True) -> None:
        """Record (present) or forget an injected fault and persist."""
        with self._lock:
            faults = self.nodes.setdefault(name, NodeRecord()).faults
            if present:
                faults[kind] = value
            else:
                faults.pop(kind, None)
            self._save()

    def forget(self, name: str) -> None:
        """Drop a node's record entirely (after it was torn down)."""
        with self._lock:
            self.nodes.pop(name, None)
            self._save()

    def save(self) -> None:
        with self._lock:
            self._save()

    def _save(self) -> None:
        write_json(self.path, {"nodes": {k: v.to_json() for k, v in self.nodes.items()}})
