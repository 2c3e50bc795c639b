"""The pyslurm backend: used only when pyslurm imports and its version matches libslurm.

pyslurm builds against one Slurm release (PyPI: 25.11.x, 18.08, 17.11; Debian 12 ships
Slurm 22.05), so it cannot be tested here. It sits behind the same Protocol; nothing
claims it works until it runs against a matching Slurm (docs/slurm.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from screener.errors import SlurmError
from screener.hostlist import fold_nodes
from screener.slurm.client import SlurmJob, SlurmNode, check_job_id, check_reason


def probe_pyslurm(slurm_version: Callable[[], str | None]) -> tuple[Any | None, str]:
    """(module, why): the module when importable and matching the Slurm release (major.minor).

    ``slurm_version`` is only called once pyslurm imports (it runs ``sinfo --version``)."""
    try:
        mod = importlib.import_module("pyslurm")
    except Exception as exc:  # ImportError, or a libslurm load failure inside the import
        return None, f"pyslurm not importable ({type(exc).__name__})"
    version = str(getattr(mod, "__version__", ""))
    release = slurm_version()
    if not release:
        return None, f"pyslurm {version} imports but the Slurm version is unknown"
    if version.split(".")[:2] != release.split(".")[:2]:
        return None, f"pyslurm {version} does not match Slurm {release}"
    return mod, f"pyslurm {version} matches Slurm {release}"


class PyslurmClient:
    """SlurmClient over pyslurm's Node/Job API (untested: no matching pair here)."""

    name = "pyslurm"

    def __init__(self, mod: Any) -> None:
        self.mod = mod

    def nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        try:
            every = self.mod.Nodes.load()
        except Exception as exc:
            raise SlurmError(f"pyslurm: cannot load nodes: {exc}") from None
        out = []
        for name, node in every.items():
            if names is not None and name not in names:
                continue
            states = {str(node.state).upper(), *(str(f).upper() for f in node.state_flags or [])}
            out.append(SlurmNode(name, frozenset(states), node.reason or ""))
        return sorted(out, key=lambda n: n.name)

    def job(self, job_id: str) -> SlurmJob | None:
        check_job_id(job_id)
        try:
            j = self.mod.Job.load(int(job_id.split("_")[0].split("+")[0]))
        except Exception:
            return None
        nodes = tuple(self.mod.nodelist_from_range_str(j.nodes or "")) if j.nodes else ()
        return SlurmJob(job_id, nodes, j.partition or "", j.name or "", j.comment or "", j.state)

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        self._update(nodes, state="DRAIN", reason=check_reason(reason))

    def resume(self, nodes: Sequence[str]) -> None:
        self._update(nodes, state="RESUME")

    def release(self, job_id: str) -> None:
        raise SlurmError("pyslurm backend: releasing a requeued job is not implemented")

    def _update(self, nodes: Sequence[str], **changes: str) -> None:
        if not nodes:
            return
        try:
            self.mod.Node(**changes).modify(fold_nodes(nodes))
        except Exception as exc:
            raise SlurmError(f"pyslurm: cannot update {fold_nodes(nodes)}: {exc}") from None
