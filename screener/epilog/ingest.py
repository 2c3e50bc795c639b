"""The epilog's ingest: find the job's IOR/fio outputs, ingest them as `screener ingest`
would, and (only if configured) drain in-job read outliers with their own tag.

Where the outputs are: the job names its directory in its comment (``screener_out=/abs/dir``,
``[ingest] comment_key``), or the site sets ``[ingest] dir_pattern`` for screened jobs.
The directory is user input read by SlurmUser: it must be absolute, without ``..``, of
safe characters; each file is opened without following symlinks and must be a regular file
owned by the job's user (``SLURM_JOB_UID``), so a job cannot make the epilog read, or log
an excerpt of, a file only SlurmUser may read. Nothing here fails the epilog: every
problem is one log line.

Those files are still the user's word: their in-job outliers open an episode or drain
only where screener.ingest.trust trusts them (the job had its nodes to itself, or the
in-job iostat saw the same node slow); otherwise they are recorded only, and one line says so.

A database that does not answer (issue 45): the outputs are judged now, while Slurm still
knows the job's layout, and the ingest waits in the spool (``ingest-<tag>.json``) until a
hook finds the database up and replays it; nobody is drained from it.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from screener.errors import ConfigError, ScreenerError, StoreError
from screener.hooks.drain_rules import plan_drains
from screener.hooks.log import HookLog
from screener.hostlist import fold_nodes
from screener.ingest.files import MAX_BYTES, load_files, outputs_near
from screener.ingest.judge import TOO_SHORT, Figure, JobFigures
from screener.ingest.layout import SlurmLayout
from screener.ingest.results import Phase
from screener.ingest.trust import UNTRUSTED, Vetted, vet
from screener.policy import IngestPolicy, Policy, database_url
from screener.probe_data import Trigger
from screener.slurm.client import SlurmClient, SlurmJob, check_reason

if TYPE_CHECKING:  # the store (SQLAlchemy, ~0.3 s) is imported where it is used: most jobs
    # end with nothing to ingest, and the epilog runs after every job
    from screener.ingest.service import Ingested

_SAFE_DIR = re.compile(r"/[A-Za-z0-9_.+/-]{0,1023}")
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")


def check_dir(text: str) -> str:
    """An output directory named by a job: absolute, no '..', safe characters; else
    ConfigError."""
    if not _SAFE_DIR.fullmatch(text) or ".." in text.split("/"):
        shown = text[:80].encode("unicode_escape").decode()
        raise ConfigError(
            f"output directory {shown!r} refused: absolute path of letters, digits, "
            "'_.+-/' without '..' only"
        )
    return text


def comment_dir(comment: str, key: str) -> str | None:
    """``KEY=/abs/dir`` among the comment's whitespace/comma/semicolon separated tokens."""
    for token in re.split(r"[\s,;]+", comment):
        name, eq, value = token.partition("=")
        if eq and name == key:
            return check_dir(value)
    return None


def pattern_dir(pattern: str, user: str, job_id: str) -> str:
    """``[ingest] dir_pattern`` with {user} and {job_id} filled in (both validated)."""
    if not _USER.fullmatch(user):
        raise ConfigError(f"job user {user[:40]!r} is not a plain user name")
    return check_dir(pattern.replace("{user}", user).replace("{job_id}", job_id))


def output_dir(
    job: SlurmJob, env: Mapping[str, str], policy: IngestPolicy, screened: bool
) -> tuple[str | None, str]:
    """(directory or None, why) for the log line; ConfigError for a bad named directory."""
    named = comment_dir(job.comment, policy.comment_key)
    if named is not None:
        return named, f"comment names {policy.comment_key}={named}"
    if policy.dir_pattern and screened:
        found = pattern_dir(policy.dir_pattern, env.get("SLURM_JOB_USER", ""), job.job_id)
        return found, f"[ingest] dir_pattern gives {found}"
    return None, f"no {policy.comment_key}= in the comment" + (
        "" if policy.dir_pattern else " and no [ingest] dir_pattern"
    )


def owned_reader(uid: int) -> Callable[[Path], str]:
    """A file reader that refuses symlinks, non-regular files, files not owned by ``uid``
    and huge files (checked on the opened descriptor: no check-then-open race)."""

    def read(path: Path) -> str:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError(f"{path} is not a regular file")
            if st.st_uid != uid:
                raise ConfigError(f"{path} is owned by uid {st.st_uid}, not the job's {uid}")
            if st.st_size > MAX_BYTES:
                raise ConfigError(f"{path}: {st.st_size} bytes is too large")
            chunks: list[bytes] = []
            left = MAX_BYTES  # a file growing while read is cut here, then fails to parse
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
        finally:
            os.close(fd)
        return b"".join(chunks).decode("utf-8", errors="replace")

    return read


def ingest_after_job(
    policy: Policy,
    job: SlurmJob,
    env: Mapping[str, str],
    screened: bool,
    log: HookLog,
    client: SlurmClient | None = None,
    confirmed: Collection[str] = (),
) -> Ingested | None:
    """Ingest the job's outputs if it says where they are; never raises. ``confirmed``:
    the nodes the job's in-job iostat found slow (trusted even on a shared allocation)."""
    if not policy.ingest.epilog:
        return None
    try:
        directory, why = output_dir(job, env, policy.ingest, screened)
        if directory is None:
            if screened:  # an unscreened job naming nothing is every other job: no line
                log(f"job {job.job_id}: no outputs to ingest ({why})")
            return None
        from screener.ingest.service import ingest

        uid = env.get("SLURM_JOB_UID", "")
        if not uid.isdigit():
            raise ConfigError("SLURM_JOB_UID is not set: cannot check who owns the outputs")
        now = datetime.now(UTC)
        source = SlurmLayout(policy.slurm.command_timeout_s, job.nodes)

        def trust(figures: JobFigures) -> Vetted:
            # exclusivity from the record the layout read (None if it read none: unknown)
            known = replace(job, exclusive=source.record.exclusive if source.record else None)
            return vet(figures, known, confirmed)

        paths, read = outputs_near(Path(directory), job.job_id), owned_reader(int(uid))

        def run(store_results: bool) -> Ingested:
            return ingest(
                job.job_id,
                paths,
                policy,
                nodes=None,
                ranks_per_node=None,
                partition=job.partition or None,
                observed_at=now,
                now=now,
                store_results=store_results,
                replace=True,  # a requeued job's last attempt wrote the files that are there
                slurm=source,
                read=read,
                trust=trust,
            )

        try:
            done = run(True)
        except StoreError as exc:
            if database_url(policy).startswith("sqlite"):  # a local file: not an outage
                raise
            return _spool_ingest(policy, job, run(False), paths, read, now, log, exc)
    except (ScreenerError, OSError) as exc:  # OSError: e.g. a directory SlurmUser may not read
        log(f"job {job.job_id}: outputs not ingested: {exc}")
        return None
    log(ingested_line(done, why))
    note = next((n for n in done.figures.notes if n.startswith(UNTRUSTED)), None)
    if note is not None:
        log(f"job {job.job_id}: ingested {note}")
    if policy.ingest.drain and done.figures.slow:
        try:
            drain_outliers(policy, job, done, log, client)
        except ScreenerError as exc:
            log(f"job {job.job_id}: in-job drain not done: {exc}")
    return done


def _spool_ingest(
    policy: Policy,
    job: SlurmJob,
    done: Ingested,
    paths: list[Path],
    read: Callable[[Path], str],
    now: datetime,
    log: HookLog,
    exc: StoreError,
) -> Ingested:
    """The database did not answer: the judged ingest goes to the spool, replayed later."""
    from screener import spool
    from screener.ingest.service import store_rows
    from screener.run.inputs import new_run_tag
    from screener.store.engine import describe, parse_url
    from screener.store.jobs import IngestHead

    figures = done.figures
    mapped = sorted({f.node for f in figures.figures if f.node is not None})
    head = IngestHead(
        job_id=job.job_id,
        partition=job.partition or None,
        nodeset=fold_nodes(mapped) if mapped else "",
        layout=done.layout,
        files=tuple(f"{f.kind.value}:{f.name}" for f in load_files(paths, read)),
        notes=figures.notes,
        observed_at=now,
    )
    rows, slow = store_rows(figures)
    doc = {
        "head": spool.to_json(head),
        "rows": spool.to_json(rows),
        "slow": spool.to_json(slow),
        "ingested_at": now.isoformat(),
    }
    where = describe(parse_url(database_url(policy)))
    try:
        path = spool.spool_ingest(policy.store.spool_dir, where, new_run_tag(), doc)
    except OSError as err:
        log(f"job {job.job_id}: outputs not ingested: {exc}; and cannot spool: {err}")
        return done
    log(f"job {job.job_id}: database unavailable ({exc}): ingest spooled to {path}; no drain")
    return done


def ingested_line(done: Ingested, why: str) -> str:
    """The epilog's line for an ingest: where from, the in-job slow nodes, and which phases
    were too short to judge (so "none" is not read as "all judged fine")."""
    few = next((n for n in done.figures.notes if "no outlier judgement" in n), None)
    judged = [s.node for s in done.figures.slow] + [f"{s.node} (recorded only)" for s in done.held]
    slow = ", ".join(judged) or (
        f"too few nodes to compare ({few.split(':')[0]})" if few else "none"
    )
    short = "".join(f"; {n.split(':')[0]}" for n in done.figures.notes if TOO_SHORT in n)
    return (
        f"job {done.job_id}: ingested ({why}) as ingest {done.ingest_id}; "
        f"in-job slow: {slow}{short}"
    )


def job_drain_reason(tag: str, job_id: str, reads: list[Figure]) -> str:
    """e.g. ``screener-job: rd 0.01x job 4242``: the node's worst read ratio in the job."""
    ratios = [f.ratio for f in reads if f.ratio is not None]
    figure = f"{min(ratios):.2f}x" if ratios and min(ratios) >= 0.01 else "<0.01x"
    return check_reason(f"{tag} rd {figure if ratios else 'slow'} job {job_id}")


def drain_outliers(
    policy: Policy, job: SlurmJob, done: Ingested, log: HookLog, client: SlurmClient | None
) -> list[str]:
    """Drain the job's in-job read outliers: the prolog's mass-drain guard, its drain
    records (so the sweep's resume rule applies), never a node someone else drained."""
    from screener.hooks.drains import DrainContext, acting, apply_drains
    from screener.slurm import select_client
    from screener.store import open_store
    from screener.store.slurm_records import SlurmRecords

    if client is None:
        client, _ = select_client(policy.slurm)
    now = datetime.now(UTC)
    slow = [s.node for s in done.figures.slow]
    state = {n.name: n for n in client.nodes()}
    partition = [n for n, s in state.items() if job.partition in s.partitions]
    todo = []
    for node in slow:
        if node in state and state[node].drained:
            log(f"{node}: already drained ({state[node].reason!r}): left alone")
            continue
        reads = [f for f in done.figures.figures if f.node == node and f.phase is Phase.READ]
        todo.append((node, job_drain_reason(policy.ingest.drain_tag, job.job_id, reads)))
    url = database_url(policy)
    with open_store(url, upgrade=url.startswith("sqlite")) as store:
        records = SlurmRecords(store)
        # Under the actions lock, as the prolog: the guard counts concurrent runs' drains
        # and no two runs drain the same node (the count and the drains go together).
        with acting(records):
            since = now - timedelta(seconds=policy.slurm.partition_window_s)
            recent = records.drains_since(partition, since) if todo and partition else set()
            plan = plan_drains(todo, len(job.nodes), len(partition), recent, policy.slurm)
            ctx = DrainContext(
                client, records, None, Trigger.JOB, job.job_id, now, policy.slurm.dry_run, log
            )
            return apply_drains(plan, ctx)
