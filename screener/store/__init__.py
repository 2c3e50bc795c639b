"""Results database: SQLAlchemy 2 models, Alembic migrations, and the Store API.

SQLite is the embedded default, PostgreSQL the production backend; both are tested.
The public surface, by subject (everything else in this package is how it is done):

- **open**: ``open_store(url)`` -> ``Store`` (opening.py: migrates an embedded SQLite on
  first use, refuses a database not at this code's schema head).
- **writes**: ``Store.start_run/record_probe/record_verdicts/finish_run/record_event``
  (store.py, one transaction each); ``bulk.record_round/record_verdicts`` (a whole sweep per
  transaction); ``jobs.record_ingest``; ``SlurmRecords`` (slurm_records.py: episodes,
  two-phase drains, fast path, guard reason).
- **queries by subject**: what a screen compares with, a run's verdicts and probes, a
  node's events -> ``Store`` (reads.py, with history.py's SQL); nodes, a node's history,
  runs, flaky episodes, the exporter's figures -> ``views`` (run_views.py re-exported);
  a job and screening accuracy -> ``jobs``; Slurm bookkeeping -> ``SlurmRecords``.
- **schema**: ``tables`` (ORM tables), ``query_rows`` (the frozen rows queries return).
- **migrations**: ``migrate`` (``screener db upgrade/current``; imported on demand: Alembic
  is slow to import and a store at head never needs it), ``revision`` (the head, no Alembic).
- **locks**: ``locks.actions_lock`` (drains and resumes), ``locks.probe_locks`` (per node).
- **transactions**: ``Store.writing(doing)`` and ``Store.reading(doing)``, for the modules
  of this package; callers outside it use the methods and functions above.
"""

from screener.store.opening import open_store
from screener.store.query_rows import EventRow, NodeHistoryRow, RunRow
from screener.store.store import Store

__all__ = [
    "EventRow",
    "NodeHistoryRow",
    "RunRow",
    "Store",
    "open_store",
]
