"""Local spool: a screen's results survive a database that is down, and are replayed later.

While the DB answers, :class:`SpoolingStore` only keeps the run in memory. The first
StoreError switches it to the spool: everything of the run so far, then every later record,
is appended to ``<spool_dir>/run-<uid>.jsonl`` (one JSON object a line, fsync'd, mode 0600
in a 0700 directory). The decision never waits for the DB. A drain made while the DB is
down is journalled in the same file (:class:`SpooledDrains`: intent before ``scontrol``,
outcome after), and an epilog's ingest goes to ``ingest-<uid>.json``.

:func:`replay` stores each spooled file once, whoever calls it (`screener spool replay`, or
the next hook that finds the DB up: bounded to a few files and seconds there). Each file is
replayed under an exclusive ``flock`` (a second replayer skips it, and one that got the lock
after the first removed the file sees it gone) and in one database transaction under a lock
on its run tag (screener.store.replayed: a replay cut short leaves nothing); a run still
being written (its live marker's process alive) is left for later. A run the database holds
under its uid (``runs.policy["run_tag"]``: started before the DB failed mid-run) is
completed, not stored again: only its probes, verdicts and drain events not stored yet,
then its finish. So replaying twice, at once, or after a crash stores everything once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import fcntl
import json
import os
import time
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from screener.errors import StoreError
from screener.pipeline import RunStore
from screener.probe_data import FleetFigure, NodeProbe, RunSummary, Trigger
from screener.process import start_time

if TYPE_CHECKING:
    from screener.store import Store

UID_KEY = "run_tag"  # key in the stored policy dict: the run tag (= spool file uid)
PREFIX, SUFFIX = "run-", ".jsonl"
LIVE_PREFIX = "live-"  # <spool_dir>/live-<tag>.json: a run going on here (run_marker)
INGEST_PREFIX, INGEST_SUFFIX = "ingest-", ".json"  # an epilog's ingest, one JSON document
# What a hook replays after its decision, at most: files, and seconds before starting one
# more (each is a few short transactions); `screener spool replay` replays everything.
REPLAY_MAX_FILES = 8
REPLAY_BUDGET_S = 2.0
SPOOLED_NOTE = "results spooled to"  # in ScreenResult.store_error when nothing was lost


class _Store(RunStore, Protocol):
    """The store methods the spool writes through (screener.store.Store satisfies it)."""

    def spooled_run(self, uid: str, started_at: datetime | None) -> tuple[int, str] | None: ...

    def read_tails(
        self,
        nodes: Sequence[str],
        limit: int,
        recipe: str | None = None,
        since: datetime | None = None,
    ) -> dict[str, list[tuple[float, float]]]: ...


# ------------------------------------------------------------------ (de)serialisation


def to_json(obj: Any) -> Any:
    """Dataclasses, enums, tuples and datetimes as plain JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, tuple | list):
        return [to_json(v) for v in obj]
    if isinstance(obj, datetime):
        return obj.isoformat()
    return obj


def from_json(tp: Any, data: Any) -> Any:
    """The inverse of :func:`to_json` for the probe_data dataclasses (driven by type hints)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if data is None:
            return None
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return from_json(inner, data)
    if origin is tuple:
        return tuple(from_json(typing.get_args(tp)[0], v) for v in data)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp)}
        return tp(**{k: from_json(hints[k], v) for k, v in data.items() if k in known})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(data)
    if tp is float and isinstance(data, int):
        return float(data)
    if tp is datetime and isinstance(data, str):
        return datetime.fromisoformat(data)
    return data


def run_path(spool_dir: str, uid: str) -> Path:
    """The spool file of the run tagged ``uid``."""
    return Path(spool_dir) / f"{PREFIX}{uid}{SUFFIX}"


def append_entries(path: Path, entries: Sequence[dict[str, Any]]) -> None:
    """Append ``entries`` (one JSON line each) in one fsync'd write, making the 0700
    directory and the 0600 file as needed; OSError when the disk refuses."""
    data = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, data.encode())
        os.fsync(fd)  # the DB is down: this file is the only copy of the results
    finally:
        os.close(fd)


# ------------------------------------------------------------------ writing


class SpoolingStore:
    """A RunStore that falls back to the spool when the DB fails (or was never reachable)."""

    def __init__(
        self,
        store: _Store | None,
        spool_dir: str,
        uid: str,
        reason: str = "",
        on_started: Callable[[int], None] | None = None,
        db: str = "",
    ) -> None:
        self.store = store
        self.dir = Path(spool_dir)
        self.uid = uid
        self.path = run_path(spool_dir, uid)
        self.reason = reason  # why the DB is not used ("" while it is)
        self.run_id: int | None = None  # the DB's id, once the DB accepted the run
        self._journal: list[dict[str, Any]] = []  # the run so far, dumped on first failure
        self._spooling = store is None
        self._on_started = on_started  # called with the DB run id (updates the live marker)
        self.db = db  # which database the run belongs to (describe(): no password)
        self.lost: StoreError | None = None  # set when even the spool could not be written

    @property
    def spooled(self) -> bool:
        """True once any of this run went to the spool file (and all of it could)."""
        return self._spooling and self.lost is None

    def _record(self, entry: dict[str, Any]) -> None:
        if self._spooling:
            self._append([entry])
        else:
            self._journal.append(entry)

    def _fail(self, exc: StoreError) -> None:
        """Switch to the spool: write the whole run so far, then keep appending."""
        self.reason = str(exc)
        self._spooling = True
        if self.run_id is not None and self._journal:  # replay closes this partial DB run
            self._journal[0]["db_run_id"] = self.run_id
        self._append(self._journal)
        self._journal = []

    def _append(self, entries: list[dict[str, Any]]) -> None:
        if not entries or self.lost is not None:
            return
        try:
            append_entries(self.path, entries)
        except OSError as exc:  # a full or read-only disk: say so, the figures are printed
            self.lost = StoreError(
                f"{self.reason}; and cannot spool to {self.path}: {exc.strerror or exc}"
            )

    def _try(self, fn: Any, *args: Any) -> Any:
        if self._spooling or self.store is None:
            return None
        try:
            return fn(*args)
        except StoreError as exc:
            self._fail(exc)
            return None

    def read_histories(
        self,
        nodes: Sequence[str],
        limit: int,
        recipe: str | None = None,
        since: datetime | None = None,
    ) -> dict[str, list[float]]:
        if self.store is None:
            return {}
        try:
            return self.store.read_histories(nodes, limit, recipe, since)
        except StoreError as exc:  # no history is a weaker verdict, not a lost one
            self._lose_reads(exc)
            return {}

    def read_tails(
        self,
        nodes: Sequence[str],
        limit: int,
        recipe: str | None = None,
        since: datetime | None = None,
    ) -> dict[str, list[tuple[float, float]]]:
        if self.store is None:
            return {}
        try:
            return self.store.read_tails(nodes, limit, recipe, since)
        except StoreError as exc:  # no usual tails: a short read's tail is the full probe's
            self._lose_reads(exc)
            return {}

    def read_fleet(
        self, exclude: Sequence[str], recipe: str | None, since: datetime, limit: int
    ) -> list[FleetFigure]:
        if self.store is None:
            return []
        try:
            return self.store.read_fleet(exclude, recipe, since, limit)
        except StoreError as exc:  # no fleet peers: a small allocation judges less, honestly
            self._lose_reads(exc)
            return []

    def _lose_reads(self, exc: StoreError) -> None:
        """The DB failed before the run started: spool everything from here on."""
        self.store, self.reason, self._spooling = None, str(exc), True

    def start_run(
        self,
        trigger: Trigger,
        nodes: Sequence[str],
        policy: dict[str, object],
        job_id: str | None,
        nodeset: str,
        started_at: datetime,
    ) -> int:
        policy = {**policy, UID_KEY: self.uid}
        entry = {
            "kind": "run",
            "uid": self.uid,
            "db": self.db,
            "trigger": Trigger(trigger).value,
            "nodes": list(nodes),
            "policy": policy,
            "job_id": job_id,
            "nodeset": nodeset,
            "started_at": started_at.isoformat(),
        }
        self._record(entry)
        if self.store is not None and not self._spooling:
            try:
                self.run_id = self.store.start_run(
                    trigger, nodes, policy, job_id, nodeset, started_at
                )
            except StoreError as exc:
                self._fail(exc)
        if self.run_id is not None and self._on_started is not None:
            self._on_started(self.run_id)
        return self.run_id if self.run_id is not None else -1

    def record_probe(self, run_id: int, probe: NodeProbe, round_no: int) -> None:
        self._record({"kind": "probe", "round": round_no, "probe": to_json(probe)})
        if self.store is not None and self.run_id is not None:
            self._try(self.store.record_probe, self.run_id, probe, round_no)

    def record_verdicts(self, run_id: int, summary: RunSummary) -> None:
        self._record({"kind": "verdicts", "summary": to_json(summary)})
        if self.store is not None and self.run_id is not None:
            self._try(self.store.record_verdicts, self.run_id, summary)

    def finish_run(self, run_id: int, finished_at: datetime, status: str = "done") -> None:
        self._record({"kind": "finish", "status": status, "finished_at": finished_at.isoformat()})
        if self.store is not None and self.run_id is not None:
            self._try(self.store.finish_run, self.run_id, finished_at, status)


# ------------------------------------------------------------------ drains and ingests


@dataclasses.dataclass(frozen=True)
class SpooledDrains:
    """The journal of drains made while the database is down, in the run's own spool file
    (replayed with it): the intent before ``scontrol`` and its outcome after, as the store's
    two phases (hooks/drains.py); each write fsync'd, OSError when the disk refuses (then no
    drain: one that could never be recorded is not made)."""

    path: Path
    trigger: Trigger
    job_id: str | None

    def _write(self, kind: str, node: str, **fields: Any) -> None:
        at = datetime.now(UTC).isoformat()
        append_entries(self.path, [{"kind": kind, "node": node, "at": at, **fields}])

    def intend(self, node: str, reason: str) -> None:
        self._write("drain_pending", node, reason=reason)

    def drained(self, node: str, reason: str) -> None:
        self._write("drain", node, reason=reason, trigger=self.trigger.value, job_id=self.job_id)

    def failed(self, node: str, reason: str, why: str) -> None:
        self._write("drain_failed", node, reason=reason, why=why)

    def guard(self, line: str, blocked: Sequence[str]) -> None:
        """The guard's line (``runs.guard_reason``) and a guard_trip per node it held."""
        at = datetime.now(UTC).isoformat()
        entries = [{"kind": "guard_reason", "text": line, "at": at}]
        entries += [{"kind": "guard_trip", "node": n, "why": line, "at": at} for n in blocked]
        append_entries(self.path, entries)


def spool_ingest(spool_dir: str, db: str, uid: str, doc: dict[str, Any]) -> Path:
    """Keep an ingest the database could not take (``doc``: its head, rows and slow nodes as
    to_json made them) as ``ingest-<uid>.json``; OSError when the disk refuses."""
    path = Path(spool_dir) / f"{INGEST_PREFIX}{uid}{INGEST_SUFFIX}"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps({"kind": "ingest", "db": db, **doc}).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(path)  # whole or absent: a replayer never reads half a document
    return path


# ------------------------------------------------------------------ replaying


@dataclasses.dataclass(frozen=True)
class Replayed:
    """What :func:`replay` did with one spool file."""

    path: str
    run_id: int | None
    outcome: str  # "stored", "already stored", "skipped: ...", "error: ..."


def _spooled(d: Path, prefix: str, suffix: str) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.startswith(prefix) and p.name.endswith(suffix))


def spool_files(spool_dir: str, db: str | None = None) -> list[Path]:
    """Spooled runs (of database ``db`` if given), oldest first (names sort by time)."""
    d = Path(spool_dir)
    if not d.is_dir():
        return []
    return _of_db(_spooled(d, PREFIX, SUFFIX), db)


def ingest_files(spool_dir: str, db: str | None = None) -> list[Path]:
    """Spooled epilog ingests (of database ``db`` if given), oldest first."""
    d = Path(spool_dir)
    if not d.is_dir():
        return []
    return _of_db(_spooled(d, INGEST_PREFIX, INGEST_SUFFIX), db)


def _of_db(files: list[Path], db: str | None) -> list[Path]:
    if db is None:
        return files
    out = []
    for p in files:
        with contextlib.suppress(OSError, ValueError):
            if _spooled_for(p) == db:
                out.append(p)
    return out


def waiting(path: Path) -> dict[str, int]:
    """What one spool file holds for the DB: "run" 1 and its drain events, or "ingest" 1."""
    if path.name.startswith(INGEST_PREFIX):
        return {"ingest": 1}
    kinds = [json.loads(line)["kind"] for line in path.read_text().splitlines() if line.strip()]
    return {"run": 1, "drain events": sum(k.startswith("drain") for k in kinds)}


def is_live(spool_dir: str, uid: str) -> bool:
    """Is the run tagged ``uid`` still going here (its marker's process alive)? Its spool
    file may still grow: a replayer leaves it for later."""
    try:
        doc = json.loads((Path(spool_dir) / f"{LIVE_PREFIX}{uid}.json").read_text())
        pid = int(doc["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    start = start_time(pid)
    return start is not None and start == doc.get("start")


def _key(path: Path) -> str:
    """Replay order: by the tag after the prefix (time first), runs before ingests."""
    return path.name.split("-", 1)[1]


def replay(
    store: Store,
    spool_dir: str,
    db: str,
    *,
    max_files: int | None = REPLAY_MAX_FILES,
    budget_s: float | None = REPLAY_BUDGET_S,
) -> list[Replayed]:
    """Store every spooled run and ingest of database ``db`` not stored yet, then remove its
    file (idempotent, safe beside other replayers). At most ``max_files`` files, none started
    after ``budget_s`` seconds (None: no bound). Files spooled for another database stay."""
    t0 = time.monotonic()
    out: list[Replayed] = []
    files = sorted(spool_files(spool_dir) + ingest_files(spool_dir), key=_key)
    done = 0
    for path in files:
        if max_files is not None and done >= max_files:
            break
        if budget_s is not None and time.monotonic() - t0 >= budget_s:
            break
        uid = _key(path).rsplit(".", 1)[0]
        try:
            if _spooled_for(path) != db:
                continue
            if path.name.startswith(PREFIX) and is_live(spool_dir, uid):
                out.append(Replayed(str(path), None, "skipped: its run is still going"))
                continue
            with _locked(path) as mine:
                if not mine:  # another replayer has it, or had it and removed it
                    continue
                done += 1
                if path.name.startswith(INGEST_PREFIX):
                    run_id, outcome = _replay_ingest(store, path)
                else:
                    run_id, outcome = _replay_file(store, path)
                path.unlink()  # under the lock: a replayer waiting on it then sees it gone
        except FileNotFoundError:
            continue  # removed by another replayer since we listed it
        except StoreError as exc:  # the DB went away again: keep the file for next time
            out.append(Replayed(str(path), None, f"error: {exc}"))
            break
        except (ValueError, KeyError, TypeError) as exc:
            out.append(Replayed(str(path), None, f"error: unreadable spool file ({exc})"))
            continue
        out.append(Replayed(str(path), run_id, outcome))
    return out


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[bool]:
    """An exclusive flock on ``path`` for the block: True when held and the file is still
    there (not removed by a replayer that held it before), False when another process has it
    or it is gone. The lock goes with the descriptor (and with the process, if killed)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield os.fstat(fd).st_nlink > 0
    finally:
        os.close(fd)


def _spooled_for(path: Path) -> str:
    """The database a spool file belongs to (from its first line)."""
    with path.open() as fh:
        return str(json.loads(fh.readline()).get("db", ""))


def _replay_file(store: Store, path: Path) -> tuple[int | None, str]:
    """Store what the database lacks of one spooled run, in one transaction."""
    from screener.store.replayed import one_transaction

    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    # A torn last line (killed mid-write) cannot happen with one os.write per batch, but a
    # file cut short by a full disk can: json.loads raises ValueError and the file is kept.
    head = next(e for e in lines if e["kind"] == "run")
    uid = str(head["uid"])
    with one_transaction(store, f"replay the spooled run {uid}", uid) as tx:
        run_id, wrote = _complete_run(tx, head, lines)
    return run_id, "stored" if wrote else "already stored"


def _complete_run(
    store: Store, head: dict[str, Any], lines: list[dict[str, Any]]
) -> tuple[int, bool]:
    """Store the spooled run, or complete the one the database holds under its tag (started
    before the DB failed mid-run, or by a replay cut short): only its probes, verdicts and
    drain events not stored yet, then its finish. Found by tag, never by the spooled
    ``db_run_id``: a promoted standby may have lost that row and given its id to another
    run. True when anything was written."""
    from screener.store import convert
    from screener.store.replayed import has_verdicts, run_finish, stored_probes

    started = datetime.fromisoformat(head["started_at"])
    found = store.spooled_run(str(head["uid"]), started)
    if found is None:
        run_id = store.start_run(
            Trigger(head["trigger"]),
            head["nodes"],
            head["policy"],
            head["job_id"],
            head["nodeset"],
            started,
        )
    else:
        run_id = found[0]
    wrote = found is None
    have = stored_probes(store, run_id)
    judged = has_verdicts(store, run_id)
    finish: dict[str, Any] | None = None
    for e in lines:
        if e["kind"] == "probe":
            probe = from_json(NodeProbe, e["probe"])
            key = (convert.node_name(probe.node), int(e["round"]))
            if key not in have:
                store.record_probe(run_id, probe, key[1])
                have.add(key)
                wrote = True
        elif e["kind"] == "verdicts" and not judged:
            store.record_verdicts(run_id, from_json(RunSummary, e["summary"]))
            judged = wrote = True
        elif e["kind"] == "finish":
            finish = e
    wrote = _replay_drains(store, run_id, head, lines) or wrote
    status, finished_at = run_finish(store, run_id)
    if finish is not None:  # the spool's finish wins (over a killed run's 'failed' guess too)
        want = (str(finish["status"]), datetime.fromisoformat(finish["finished_at"]))
        if (status, finished_at) != want:
            store.finish_run(run_id, want[1], want[0])
            wrote = True
    elif status == "running":  # the run died before it finished: it will never finish now
        store.finish_run(run_id, started, "failed")
        wrote = True
    return run_id, wrote


def _replay_drains(
    store: Store, run_id: int, head: dict[str, Any], lines: list[dict[str, Any]]
) -> bool:
    """The run's journalled drains as the store's own records: the intent, then the drain
    with its slow episode (or drain_failed); guard trips and the guard's line. An intent
    with no outcome stays pending: the next run settles it against Slurm (finish_pending).
    True when an event was not stored yet."""
    from screener.store.replayed import record_event_once
    from screener.store.slurm_records import SlurmRecords

    wrote = False
    for e in lines:
        kind = e["kind"]
        if kind == "guard_reason":
            SlurmRecords(store).set_guard_reason(run_id, e["text"])
            continue
        if kind not in ("drain_pending", "drain", "drain_failed", "guard_trip"):
            continue
        at = datetime.fromisoformat(e["at"])
        node, reason = str(e["node"]), str(e.get("reason") or "")
        slurm_reason: str | None = reason
        if kind == "drain_pending":
            why = "about to drain (database down)"
        elif kind == "drain":
            trigger = Trigger(e.get("trigger") or head["trigger"])
            wrote = (
                record_event_once(
                    store, node, kind, reason, at, run_id, reason, e.get("job_id"), trigger
                )
                or wrote
            )
            continue
        else:  # drain_failed (with the drain's reason), guard_trip (none)
            why = str(e["why"])
            slurm_reason = reason if kind == "drain_failed" else None
        wrote = record_event_once(store, node, kind, why, at, run_id, slurm_reason) or wrote
    return wrote


def _replay_ingest(store: Store, path: Path) -> tuple[int | None, str]:
    """An epilog's spooled ingest: stored unless the job has an ingest of the same or a
    later observation already (this one replayed before, or a later attempt's)."""
    from screener.store.jobs import IngestHead, ResultRow, SlowRow, record_ingest
    from screener.store.replayed import newest_ingest, one_transaction

    doc = json.loads(path.read_text())
    head = from_json(IngestHead, doc["head"])
    rows = [from_json(ResultRow, r) for r in doc["rows"]]
    slow = [from_json(SlowRow, r) for r in doc["slow"]]
    now = datetime.fromisoformat(doc["ingested_at"])
    doing, key = f"replay the ingest of job {head.job_id}", f"job {head.job_id}"
    with one_transaction(store, doing, key) as tx:
        newest = newest_ingest(tx, head.job_id)
        if newest is not None and newest >= head.observed_at:
            return None, "already stored"
        return record_ingest(tx, head, rows, slow, now=now, replace=True), "stored"


def spooled_since(spool_dir: str, since: float) -> bool:
    """Did a run or ingest go to the spool at or after ``since`` (Unix time)? Then the
    database failed for someone just now: a hook does not replay into it."""
    d = Path(spool_dir)
    if not d.is_dir():
        return False
    for path in _spooled(d, PREFIX, SUFFIX) + _spooled(d, INGEST_PREFIX, INGEST_SUFFIX):
        with contextlib.suppress(OSError):
            if path.stat().st_mtime >= since:
                return True
    return False


def replayed_line(done: Sequence[Replayed]) -> str:
    """One log line for a replay: how many files were stored, already there, skipped, failed."""
    counts: dict[str, int] = {}
    for r in done:
        word = r.outcome.split(":", 1)[0]
        counts[word] = counts.get(word, 0) + 1
    failed = next((r.outcome for r in done if r.outcome.startswith("error")), None)
    said = ", ".join(f"{n} {w}" for w, n in counts.items())
    return said + (f" ({failed})" if failed else "")
