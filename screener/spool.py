"""Local spool: a screen's results survive a database that is down, and are replayed later.

While the DB answers, :class:`SpoolingStore` only keeps the run in memory. The first
StoreError switches it to the spool: everything of the run so far, then every later record,
is appended to ``<spool_dir>/run-<uid>.jsonl`` (one JSON object a line, fsync'd, mode 0600
in a 0700 directory). The decision never waits for the DB. :func:`replay` stores each
spooled run once: the run carries its uid in ``runs.policy["run_tag"]``, and a run already
stored with that uid is not stored again, so replaying twice stores once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import os
import types
import typing
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from screener.errors import StoreError
from screener.pipeline import RunStore
from screener.probe_data import FleetFigure, NodeProbe, RunSummary, Trigger

UID_KEY = "run_tag"  # key in the stored policy dict: the run tag (= spool file uid)
PREFIX, SUFFIX = "run-", ".jsonl"
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
    return data


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
        self.path = self.dir / f"{PREFIX}{uid}{SUFFIX}"
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
        data = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries)
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, data.encode())
                os.fsync(fd)  # the DB is down: this file is the only copy of the results
            finally:
                os.close(fd)
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


# ------------------------------------------------------------------ replaying


@dataclasses.dataclass(frozen=True)
class Replayed:
    """What :func:`replay` did with one spool file."""

    path: str
    run_id: int | None
    outcome: str  # "stored", "already stored", "error: ..."


def spool_files(spool_dir: str, db: str | None = None) -> list[Path]:
    """Spooled runs (of database ``db`` if given), oldest first (names sort by time)."""
    d = Path(spool_dir)
    if not d.is_dir():
        return []
    files = sorted(p for p in d.iterdir() if p.name.startswith(PREFIX) and p.suffix == ".jsonl")
    if db is None:
        return files
    out = []
    for p in files:
        with contextlib.suppress(OSError, ValueError):
            if _spooled_for(p) == db:
                out.append(p)
    return out


def replay(store: _Store, spool_dir: str, db: str) -> list[Replayed]:
    """Store every spooled run of database ``db`` not stored yet, then remove its file
    (idempotent). Runs spooled for another database stay (they are not this one's)."""
    out = []
    for path in spool_files(spool_dir):
        try:
            if _spooled_for(path) != db:
                continue
            run_id, outcome = _replay_file(store, path)
        except StoreError as exc:  # the DB went away again: keep the file for next time
            out.append(Replayed(str(path), None, f"error: {exc}"))
            break
        except (ValueError, KeyError, TypeError) as exc:
            out.append(Replayed(str(path), None, f"error: unreadable spool file ({exc})"))
            continue
        path.unlink()
        out.append(Replayed(str(path), run_id, outcome))
    return out


def _spooled_for(path: Path) -> str:
    """The database a spool file belongs to (from its first line)."""
    with path.open() as fh:
        return str(json.loads(fh.readline()).get("db", ""))


def _replay_file(store: _Store, path: Path) -> tuple[int | None, str]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    # A torn last line (killed mid-write) cannot happen with one os.write per batch, but a
    # file cut short by a full disk can: json.loads raises ValueError and the file is kept.
    head = next(e for e in lines if e["kind"] == "run")
    started = datetime.fromisoformat(head["started_at"])
    found = store.spooled_run(head["uid"], started)
    if found is not None and found[1] != "running":
        return found[0], "already stored"
    for stale in (found[0] if found else None, head.get("db_run_id")):
        if stale is not None:  # half-stored before the DB (or an earlier replay) died
            with contextlib.suppress(StoreError):
                store.finish_run(int(stale), started, "failed")
    run_id = store.start_run(
        Trigger(head["trigger"]),
        head["nodes"],
        head["policy"],
        head["job_id"],
        head["nodeset"],
        started,
    )
    finished = False
    for e in lines:
        if e["kind"] == "probe":
            store.record_probe(run_id, from_json(NodeProbe, e["probe"]), int(e["round"]))
        elif e["kind"] == "verdicts":
            store.record_verdicts(run_id, from_json(RunSummary, e["summary"]))
        elif e["kind"] == "finish":
            store.finish_run(run_id, datetime.fromisoformat(e["finished_at"]), e["status"])
            finished = True
    if not finished:  # the run died before it finished: it will never finish now
        store.finish_run(run_id, started, "failed")
    return run_id, "stored"
