"""Results database: SQLAlchemy 2 models, Alembic migrations, and the Store API.

SQLite is the embedded default, PostgreSQL the production backend; both are tested.
``screener db upgrade/current`` use screener.store.migrate (imported on demand: Alembic
is slow to import and a store at head never needs it).
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
