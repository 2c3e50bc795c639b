"""Reading and selecting the job, what the prolog and the epilog share: the job
PrologSlurmctld/EpilogSlurmctld describe in their environment, and whether the policy asks
for it to be screened."""

from __future__ import annotations

import re
from collections.abc import Mapping

from screener.errors import ConfigError, SlurmError
from screener.hostlist import expand_nodeset
from screener.policy import PrologPolicy, shorten
from screener.slurm.client import SlurmJob, check_job_id

# Longest value read from a job's environment (Slurm bounds its own fields far below it):
# a hostile or corrupt 10 MB variable is refused, not logged whole.
MAX_ENV_VALUE = 65536


def job_from_env(env: Mapping[str, str]) -> SlurmJob:
    """The job PrologSlurmctld/EpilogSlurmctld describe in their environment (validated:
    ConfigError naming the variable, never another exception type)."""

    def get(name: str) -> str:
        value = env.get(name, "")
        if not isinstance(value, str) or len(value) > MAX_ENV_VALUE:
            raise ConfigError(f"{name} is longer than {MAX_ENV_VALUE} characters")
        return value

    job_id, nodelist = get("SLURM_JOB_ID"), get("SLURM_JOB_NODELIST")
    if not job_id or not nodelist:
        raise ConfigError("SLURM_JOB_ID and SLURM_JOB_NODELIST must be set (run as a Slurm hook)")
    try:
        check_job_id(job_id)
    except SlurmError:
        raise ConfigError(f"SLURM_JOB_ID is not a Slurm job id: {shorten(job_id)!r}") from None
    restarts = get("SLURM_JOB_RESTART_COUNT") or "0"
    if not (restarts.isascii() and restarts.isdigit() and len(restarts) <= 9):
        raise ConfigError(f"SLURM_JOB_RESTART_COUNT is not a count: {shorten(restarts)!r}")
    return SlurmJob(
        job_id=job_id,
        nodes=tuple(expand_nodeset(nodelist)),
        partition=get("SLURM_JOB_PARTITION"),
        name=get("SLURM_JOB_NAME"),
        comment=get("SLURM_JOB_COMMENT"),
        restarts=int(restarts),
    )


def selects(job: SlurmJob, policy: PrologPolicy) -> tuple[bool, str]:
    """Does the policy ask for this job to be screened? (yes/no, why) for the log line.

    Partition list (empty = any) AND (name regex OR comment token); with neither rule
    configured every job of the listed partitions is screened.
    """
    if policy.partitions and job.partition not in policy.partitions:
        return False, f"partition {job.partition!r} not in {list(policy.partitions)}"
    rules = []
    if policy.job_name_regex:
        if re.search(policy.job_name_regex, job.name):
            return True, f"job name {job.name!r} matches {policy.job_name_regex!r}"
        rules.append("name")
    if policy.comment_token:
        if policy.comment_token in re.split(r"[\s,;]+", job.comment):
            return True, f"comment has {policy.comment_token!r}"
        rules.append("comment")
    if rules:
        return False, f"job opted out ({' nor '.join(rules)} matches)"
    return True, "every job of the partition is screened"
