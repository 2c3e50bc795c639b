"""open_store / current_revision: one clear StoreError line for every way a database is unusable."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import create_engine, text

from screener.errors import StoreError
from screener.store import open_store
from screener.store.migrate import current_revision, upgrade
from screener.store.revision import schema_head

if TYPE_CHECKING:
    from store_fixtures import PgDatabases

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_url, empty_db_url, pg_dbs, db_store


def refused(url: str, *, upgrade: bool = False) -> str:
    """The StoreError line open_store gives for ``url``."""
    with pytest.raises(StoreError) as err:
        open_store(url, upgrade=upgrade)
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("not a url", "database URL 'not a url' is not valid; expected sqlite:///"),
        ("", "database URL '' is not valid"),
        ("postgresql://u:sekrit@db1:notaport/x", "database URL 'postgresql://u:***@db1:"),
        ("mysql://root@localhost/screener", "database driver 'mysql' is not supported"),
        ("postgresql+psycopg2://u@h/db", "database driver 'postgresql+psycopg2' is not supported"),
    ],
)
def test_bad_urls(url: str, expected: str) -> None:
    msg = refused(url)
    assert msg.startswith(expected) and "sekrit" not in msg


def test_unreachable_port_names_host_and_port_not_password() -> None:
    msg = refused("postgresql+psycopg://screener:sekrit@127.0.0.1:1/screener")
    assert msg.startswith("cannot connect to database at 127.0.0.1:1/screener: ")
    assert "refused" in msg.lower() and "sekrit" not in msg


@pytest.mark.postgres
def test_missing_postgres_database(pg_dbs: PgDatabases) -> None:
    url = pg_dbs.url("screener_test_does_not_exist")
    assert 'database "screener_test_does_not_exist" does not exist' in refused(url)


def test_not_initialised(empty_db_url: str) -> None:
    msg = refused(empty_db_url)
    assert msg.startswith("database at ") and msg.endswith(
        "is not initialised: run `screener db upgrade`"
    )
    assert current_revision(empty_db_url) is None


def test_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "screener.db"
    assert refused(f"sqlite:///{db}") == (
        f"database at {db} is not initialised: run `screener db upgrade`"
    )
    assert current_revision(f"sqlite:///{db}") is None
    assert not db.exists()


def test_sqlite_directory_missing_then_created_by_upgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/var/lib/screener/screener.db"
    assert refused(url) == (
        f"database directory {tmp_path}/var/lib/screener does not exist: run `screener db upgrade`"
    )
    with open_store(url, upgrade=True) as s:
        assert s.latest_runs(1) == []
    with open_store(url, upgrade=True) as s:  # idempotent
        assert s.latest_runs(1) == []
    assert current_revision(url) == schema_head()


def test_sqlite_paths_that_cannot_work(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    assert refused(f"sqlite:///{tmp_path}/afile/screener.db", upgrade=True) == (
        f"database directory {tmp_path}/afile is not a directory"
    )
    assert refused(f"sqlite:///{tmp_path}/afile/sub/screener.db", upgrade=True) == (
        f"cannot create database directory {tmp_path}/afile/sub: Not a directory"
    )
    assert (
        refused(f"sqlite:///{tmp_path}") == f"database path {tmp_path} is a directory, not a file"
    )
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not an sqlite database" * 100)
    assert refused(f"sqlite:///{garbage}") == (
        f"cannot open database at {garbage}: file is not a database"
    )


def test_sqlite_directory_not_writable(tmp_path: Path) -> None:
    """As an unprivileged user (root may write anywhere, so drop to nobody when root)."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        assert refused(f"sqlite:///{locked}/s.db", upgrade=True) == (
            f"database directory {locked} is not writable"
        )
        return
    top = Path(tempfile.mkdtemp(prefix="screener-store-"))  # not under root's 0700 pytest dir
    try:
        top.chmod(0o755)
        (top / "locked").mkdir(mode=0o555)
        (top / "private").mkdir(mode=0o700)
        expected = {
            f"{top}/locked/s.db": f"database directory {top}/locked is not writable",
            f"{top}/private/s.db": f"cannot use database path {top}/private/s.db: "
            "Permission denied",
        }
        code = (
            "import sys\n"
            "from screener.store import open_store\n"
            "for path in sys.argv[1:]:\n"
            "    try:\n"
            "        open_store('sqlite:///' + path, upgrade=True)\n"
            "    except Exception as e:\n"
            "        print(type(e).__name__, e)\n"
        )
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        out = subprocess.run(
            [*nobody, sys.executable, "-c", code, *expected],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).parent.parent,
            check=False,
        )
        assert out.stdout.splitlines() == [f"StoreError {m}" for m in expected.values()], out.stderr
    finally:
        shutil.rmtree(top)


def test_schema_from_a_newer_screener(db_url: str) -> None:
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff9999'"))
    engine.dispose()
    msg = refused(db_url)
    assert msg.startswith("database at ") and "schema revision ffff9999, unknown to screener" in msg
    with pytest.raises(StoreError) as err:
        upgrade(db_url)
    assert str(err.value).startswith("cannot upgrade the database at ")
    assert "ffff9999" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("postgresql://u@db1/x", "db1:5432/x"),
        ("postgresql://u@db1:6432/x", "db1:6432/x"),
        ("postgresql+psycopg://u:pw@/x?host=a:5433&host=b:5434", "a:5433,b:5434/x"),
        ("postgresql://u@/x?host=a,b&port=5433,5434", "a:5433,b:5434/x"),
        ("postgresql://u@/x?host=a,b&port=6000", "a:6000,b:6000/x"),
        ("postgresql://u@/x?host=[::1]:5433&host=h2", "[::1]:5433,h2:5432/x"),
        ("postgresql://u@/x?host=/var/run/postgresql", "/var/run/postgresql:5432/x"),
    ],
)
def test_describe_names_every_host_never_a_password(url: str, where: str) -> None:
    from screener.store.engine import describe, multi_host, parse_url

    assert describe(parse_url(url)) == where
    assert multi_host(parse_url(url)) == ("," in where)


def test_redact_hides_userinfo_and_query_passwords() -> None:
    from screener.store.engine import redact

    multi = "postgresql+psycopg://u:sekrit@/x?host=a:1&host=b:2&target_session_attrs=read-write"
    assert redact(multi) == multi.replace("sekrit", "***")
    assert redact("postgresql://u@h/x?sslmode=require&PASSWORD=sekrit&a=b") == (
        "postgresql://u@h/x?sslmode=require&PASSWORD=***&a=b"
    )


def test_unreachable_multi_host_names_every_host() -> None:
    msg = refused("postgresql+psycopg://u:sekrit@/x?host=127.0.0.1:1&host=127.0.0.1:2")
    assert msg.startswith("cannot connect to database at 127.0.0.1:1,127.0.0.1:2/x: ")
    assert "sekrit" not in msg


def test_store_limits_from_policy() -> None:
    from screener.policy import policy_from_dict
    from screener.store.limits import StoreLimits

    p = policy_from_dict({"store": {"connect_wait_s": 3, "pool_size": 2}})
    assert StoreLimits.from_policy(p.store) == StoreLimits(connect_wait_s=3, pool_size=2)


def test_the_loaded_policys_store_limits_reach_the_engine(
    pg_dbs: PgDatabases, pg_template: str, tmp_path: Path
) -> None:
    """Every command and hook loads its policy with load_policy: the [store] keys of that
    file bound the engines it opens (pool, connect timeout, retry wait), with no caller
    passing them."""
    from screener.policy import database_url, load_policy
    from screener.store.engine import set_limits
    from screener.store.limits import StoreLimits
    from screener.store.pg_connect import PgConnection

    url = pg_dbs.create(pg_template)
    cfg = tmp_path / "screener.toml"
    cfg.write_text(
        f'[store]\nurl = "{url}"\nconnect_timeout_s = 3\nconnect_wait_s = 1.5\n'
        "pool_size = 3\npool_timeout_s = 2.5\n"
    )
    set_limits(None)
    try:
        policy = load_policy(cfg)
        with open_store(database_url(policy)) as store:
            assert store.engine.pool.size() == 3  # type: ignore[attr-defined]
            assert store.engine.pool.timeout() == 2.5  # type: ignore[attr-defined]
            with store.engine.connect() as conn:
                pg = conn.connection.driver_connection
                assert isinstance(pg, PgConnection)
                assert pg.limits == StoreLimits(3, 1.5, 3, 2.5)
                assert pg.info.get_parameters()["connect_timeout"] == "3"
    finally:
        (tmp_path / "empty.toml").write_text("")
        load_policy(tmp_path / "empty.toml")  # later tests in this process: the defaults
