"""Pick the Slurm backend the policy asks for and say why (doctor, the prolog's first line)."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence

from screener.errors import ScreenerError, SlurmError
from screener.policy import SlurmPolicy
from screener.slurm.cli_backend import CliSlurm
from screener.slurm.client import SlurmClient, SlurmJob, SlurmNode
from screener.slurm.pyslurm_backend import PyslurmClient
from screener.slurm.pyslurm_probe import judge, probe_pyslurm
from screener.slurm.rest_backend import RestSlurm


def select_client(policy: SlurmPolicy) -> tuple[SlurmClient, str]:
    """(client, why). ``rest``: slurmrestd at slurm.rest_url, unasked. ``auto``: slurmrestd
    when rest_url is set and its ping answers (a controller UP); else as _select_local."""
    if policy.backend == "rest":
        client = RestSlurm.from_policy(policy)
        return client, f"rest: configured (slurm.backend = rest, {policy.rest_url})"
    if policy.backend != "auto" or not policy.rest_url:
        return _select_local(policy)
    try:
        client = RestSlurm.from_policy(policy)
        answer = client.ping()
    except SlurmError as exc:
        local, why = _select_local(policy)
        return local, f"{why} (rest: {policy.rest_url} did not answer: {exc})"
    return client, f"rest: {policy.rest_url} answers ({answer})"


def _select_local(policy: SlurmPolicy) -> tuple[SlurmClient, str]:
    """(client, why). ``auto``: pyslurm only when it imports in a child process, matches the
    Slurm it was built for and that pair is contract-tested; else the CLI."""
    if policy.backend == "cli":
        return CliSlurm(policy.command_timeout_s), "cli: configured (slurm.backend = cli)"
    forced = policy.backend == "pyslurm"
    ok, why = judge(probe_pyslurm(policy.command_timeout_s), forced)
    if ok:
        try:
            mod = importlib.import_module("pyslurm")  # safe: the child imported it
        except Exception as exc:
            ok, why = False, f"import pyslurm: {type(exc).__name__}: {exc}"
        else:
            return PyslurmClient(mod), f"pyslurm: {why}"
    if forced:
        raise SlurmError(f"slurm.backend = pyslurm but {why}")
    return CliSlurm(policy.command_timeout_s), f"cli: {why}; using sinfo/squeue/scontrol"


class ChosenLater:
    """A SlurmClient chosen in a thread started at once, waited for on first use: the child
    that imports pyslurm (~60 ms a prolog) runs while the prolog reads the store and the
    nodes read their sentinels; a fast path that asks Slurm nothing waits only at its end
    (``chosen``), to say which backend it would have used or what failed."""

    def __init__(self, policy: SlurmPolicy) -> None:
        self._done = threading.Event()
        self._client: SlurmClient | None = None
        self._why = ""
        self._error: ScreenerError | None = None
        thread = threading.Thread(target=self._choose, args=(policy,), name="slurm-backend")
        thread.daemon = True  # a hung child is bounded by its own timeout; never block exit
        thread.start()

    def _choose(self, policy: SlurmPolicy) -> None:
        try:
            self._client, self._why = select_client(policy)
        except ScreenerError as exc:
            self._error = exc
        except Exception as exc:  # a bug: raised on use as a SlurmError, like a failed choice
            self._error = SlurmError(f"choosing the Slurm backend: {type(exc).__name__}: {exc}")
        finally:
            self._done.set()

    def chosen(self) -> tuple[SlurmClient, str]:
        """(client, why) once chosen; raises what choosing raised."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._client is not None
        return self._client, self._why

    @property
    def name(self) -> str:
        return self.chosen()[0].name

    def nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        return self.chosen()[0].nodes(names)

    def job(self, job_id: str) -> SlurmJob | None:
        return self.chosen()[0].job(job_id)

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        self.chosen()[0].drain(nodes, reason)

    def resume(self, nodes: Sequence[str]) -> None:
        self.chosen()[0].resume(nodes)

    def release(self, job_id: str) -> None:
        self.chosen()[0].release(job_id)
