"""What a sweep job is given: the admin's mode (``SweepMode``, handed to the job as its
arguments, never through the submitter's environment) and the sbatch argv that submits the
sweep script over exactly the nodes it holds. The job (sweep/job.py), the nightly `--submit`
(sweep/submit.py), the rolling one (sweep/rolling.py) and the submitting host's run over the
screener-drained nodes (sweep/drained.py) all use it; it imports nothing of theirs, so none
of them needs a function-local import to reach another."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from screener.hostlist import fold_nodes
from screener.policy import Policy


@dataclass(frozen=True)
class SweepMode:
    """What the admin asked of this sweep: the job gets exactly this, as arguments."""

    dry_run: bool = False  # decide and record (would_drain / would_resume), change nothing
    deep: bool = False  # rounds until steady state or sweep.deep_max_rounds
    config: str | None = None  # the policy file in force (None: built-in defaults)
    rolling: bool = False  # the held nodes only (sweep/rolling.py)

    def job_args(self) -> list[str]:
        """`screener sweep` arguments that reproduce this mode inside the job."""
        return [
            *(["--config", self.config] if self.config else []),
            *(["--dry-run"] if self.dry_run else []),
            *(["--deep"] if self.deep else []),
            *(["--rolling"] if self.rolling else []),
        ]

    def describe(self, policy: Policy) -> str:
        """The job's first log line says this: 'dry run, deep (...), config /x.toml'."""
        sw = policy.sweep
        parts = [
            "dry run (nobody drained nor resumed)" if self.dry_run else "live",
            f"deep (steady over {sw.deep_window} rounds, at most {sw.deep_max_rounds})"
            if self.deep
            else "one round per node",
            *(
                ["rolling (the held nodes only: drained ones wait for the nightly sweep)"]
                if self.rolling
                else []
            ),
            f"config {self.config}" if self.config else "config: built-in defaults",
        ]
        return ", ".join(parts)

    def as_dict(self) -> dict[str, object]:
        """Stored with the run (runs.policy["sweep_mode"]), shown by `screener show RUN`."""
        return {
            "dry_run": self.dry_run,
            "deep": self.deep,
            "config": self.config,
            "rolling": self.rolling,
        }


def submit_argv(
    nodes: Sequence[str],
    script: str,
    job_args: Sequence[str] = (),
    name: str = "screener-sweep",
    options: Sequence[str] = (),
) -> list[str]:
    """sbatch the sweep script on exactly ``nodes``, held exclusively, with ``job_args``
    (``name`` and more sbatch ``options``: the rolling job's, sweep/rolling.py)."""
    return [
        "sbatch",
        "--parsable",  # print only the job id
        "--exclusive",  # no user job shares a node while it is probed
        f"--nodes={len(nodes)}",
        f"--nodelist={fold_nodes(nodes)}",  # the nodes that were idle just now
        f"--job-name={name}",  # squeue tells the nightly sweep from a rolling one
        *options,
        script,  # a path given by the admin, passed as one argv word
        *job_args,  # the script's own arguments: the mode, handed on to `screener sweep`
    ]
