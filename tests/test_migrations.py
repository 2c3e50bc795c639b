"""Alembic migrations on both backends: empty -> head, no drift from the models, concurrent
upgrades, downgrade, and the `alembic` CLI through the repo-root alembic.ini."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from screener.store.engine import make_engine
from screener.store.migrate import alembic_config, current_revision, upgrade
from screener.store.revision import revision_graph, schema_head
from screener.store.tables import Base

REPO = Path(__file__).resolve().parent.parent
TABLES = set(Base.metadata.tables) | {"alembic_version"}

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_url, empty_db_url, pg_dbs, db_store


def tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_from_empty_to_head_is_idempotent(empty_db_url: str) -> None:
    assert current_revision(empty_db_url) is None
    assert upgrade(empty_db_url) == schema_head()
    assert tables(empty_db_url) == TABLES
    assert upgrade(empty_db_url) == schema_head()  # second run: nothing to do, no error
    assert current_revision(empty_db_url) == schema_head()


def test_models_and_migrations_do_not_drift(empty_db_url: str) -> None:
    upgrade(empty_db_url)
    engine = make_engine(empty_db_url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(ctx, Base.metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_downgrade_to_base_and_back(empty_db_url: str) -> None:
    upgrade(empty_db_url)
    cfg = alembic_config()
    engine = make_engine(empty_db_url)
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "base")
    finally:
        engine.dispose()
    assert tables(empty_db_url) == {"alembic_version"}
    assert current_revision(empty_db_url) is None
    assert upgrade(empty_db_url) == schema_head()
    assert tables(empty_db_url) == TABLES


def test_concurrent_upgrades_of_a_fresh_database(empty_db_url: str) -> None:
    """Prolog hooks meeting a new database at once (separate processes) plus threads of one
    process: one migrates, the rest wait and find the schema at head."""
    code = "import sys; from screener.store.migrate import upgrade; print(upgrade(sys.argv[1]))"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, empty_db_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for _ in range(3)
    ]
    results: list[str] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(upgrade(empty_db_url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outs]
    assert errors == []
    assert results + [out.strip() for out, _ in outs] == [schema_head()] * 6
    assert tables(empty_db_url) == TABLES


def alembic_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(REPO / "alembic.ini"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )


def test_alembic_cli_upgrade_and_check(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    up = alembic_cli("-x", f"url={url}", "upgrade", "head")
    assert up.returncode == 0, up.stderr
    assert current_revision(url) == schema_head()
    check = alembic_cli("-x", f"url={url}", "check")
    assert check.returncode == 0, check.stderr
    assert "No new upgrade operations detected" in check.stdout + check.stderr


def test_alembic_cli_offline_sql() -> None:
    out = alembic_cli("-x", "url=postgresql+psycopg://u@h/db", "upgrade", "head", "--sql")
    assert out.returncode == 0, out.stderr
    assert "CREATE TABLE verdicts" in out.stdout
    assert "CREATE INDEX ix_verdicts_node_id_started_at" in out.stdout


def test_revision_graph_read_without_alembic_matches_alembic() -> None:
    """revision.py parses the migration files (no Alembic import at start-up): it must agree
    with Alembic on the head and on every revision."""
    assert schema_head() == ScriptDirectory.from_config(alembic_config()).get_current_head()
    script = ScriptDirectory.from_config(alembic_config())
    assert revision_graph() == {s.revision: s.down_revision for s in script.walk_revisions()}


def test_opening_a_store_at_head_does_not_import_alembic(tmp_path: Path) -> None:
    """Prolog hooks open the store on every job: Alembic costs start-up time, load it only to
    migrate."""
    url = f"sqlite:///{tmp_path}/s.db"
    upgrade(url)
    code = (
        "import sys; from screener.store import open_store\n"
        "for up in (False, True):\n"
        "    open_store(sys.argv[1], upgrade=up).latest_runs(1)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, url], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert out.stdout.strip() == "[]", out.stderr
