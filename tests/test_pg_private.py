"""tests/pg_private.py: a private cluster and its streaming standby, stop, start, promote, drop."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pg_private import PgPrivateError, private_cluster, standby_of

pytestmark = pytest.mark.postgres


def test_cluster_standby_failover_and_drop() -> None:
    with private_cluster("selftest", max_connections="15") as pg:
        assert pg.port != 5432 and pg.is_up()
        assert pg.url == f"postgresql+psycopg://postgres@127.0.0.1:{pg.port}/test"
        with pg.connect() as conn:
            assert conn.execute("SHOW max_connections").fetchone() == ("15",)
            assert conn.execute("SELECT current_database()").fetchone() == ("test",)
            conn.execute("CREATE TABLE t (x int)")
            conn.execute("INSERT INTO t VALUES (1)")
        with standby_of(pg, "selftest_sb") as sb:
            assert sb.port != pg.port and sb.in_recovery()
            with sb.connect() as conn:  # replayed up to now
                assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]
            pg.stop()
            assert not pg.is_up()
            sb.promote()
            with sb.connect() as conn:
                conn.execute("INSERT INTO t VALUES (2)")
                assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)
            pg.start()
            assert pg.is_up()
        conf = Path("/etc/postgresql") / sb.version / sb.name
        assert not conf.exists()  # the standby is dropped at its block's end
    assert not (Path("/etc/postgresql") / pg.version / pg.name).exists()
    assert not pg.is_up()


def test_dropped_even_on_failure() -> None:
    made: list[Path] = []
    with pytest.raises(RuntimeError, match="boom"), private_cluster("selfboom") as pg:
        made.append(Path("/etc/postgresql") / pg.version / pg.name)
        assert made[0].is_dir()
        raise RuntimeError("boom")
    assert made and not made[0].exists()


def test_bad_name_is_refused() -> None:
    with pytest.raises(ValueError, match="lower-case"), private_cluster("Bad Name"):
        pass
    assert issubclass(PgPrivateError, RuntimeError)
