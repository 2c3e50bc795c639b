"""The DB goes away during a screen: results go to the local spool and are replayed once.

A PostgreSQL of the test's own (initdb in a temporary directory, pg_ctl on a free loopback
port, as the ``postgres`` user since initdb refuses root) is stopped mid-run and restarted;
the shared server on 5432 is never touched. Missing PostgreSQL server binaries fail these
tests with a line saying so (as the shared server does, tests/store_fixtures.py), unless
SCREENER_SKIP_PG=1 skips them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from screener import app, spool
from screener.policy import Policy, ProbePolicy, StorePolicy, VerdictPolicy
from screener.probe.facts import parse_facts
from screener.probe.fio import parse_fio
from screener.probe.iostat import parse_iostat
from screener.probe_data import NodeProbe, RunSummary
from screener.verdict.judge import evaluate
from tests import cli_fork

PG_ROOT = Path("/usr/lib/postgresql")  # Debian: one <major>/bin per installed server


def pg_bin(root: Path = PG_ROOT) -> Path | None:
    """The newest installed server's bin directory (the one holding initdb), None if none."""
    found = [p.parent for p in root.glob("*/bin/initdb") if p.parent.parent.name.isdigit()]
    return max(found, key=lambda b: int(b.parent.name), default=None)


PG_BIN = pg_bin()


def as_postgres(tool: str, *args: str) -> list[str]:
    """argv running a PostgreSQL tool as the postgres user (initdb refuses root)."""
    assert PG_BIN is not None  # the pg fixture failed or skipped before
    return ["runuser", "-u", "postgres", "--", str(PG_BIN / tool), *args]


@dataclass
class ScratchPg:
    data: Path
    port: int

    @property
    def url(self) -> str:
        # A password in the URL: trust auth ignores it, and it must never be stored.
        return f"postgresql+psycopg://postgres:s3cr%40t@127.0.0.1:{self.port}/postgres"

    def ctl(self, *args: str) -> None:
        subprocess.run(
            as_postgres("pg_ctl", "-D", str(self.data), *args),
            check=True,
            capture_output=True,
            timeout=60,
        )

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.ctl("-o", opts, "-l", str(self.data / "log"), "-w", "start")

    def stop(self) -> None:
        self.ctl("-m", "immediate", "-w", "stop")

    def count(self, table: str, where: str = "") -> int:
        engine = create_engine(self.url)
        try:
            with engine.connect() as conn:
                return int(conn.scalar(text(f"select count(*) from {table} {where}")) or 0)
        finally:
            engine.dispose()


@pytest.fixture
def pg() -> Iterator[ScratchPg]:
    if os.environ.get("SCREENER_SKIP_PG") == "1":
        pytest.skip("SCREENER_SKIP_PG=1")
    if PG_BIN is None:
        pytest.fail(
            f"no PostgreSQL server (initdb) under {PG_ROOT}: install Debian's postgresql "
            "(`make postgres` needs it too), or set SCREENER_SKIP_PG=1",
            pytrace=False,
        )
    root = Path(tempfile.mkdtemp(prefix="screener-pg-"))
    root.chmod(0o755)
    data = root / "data"
    data.mkdir()
    shutil.chown(data, "postgres", "postgres")
    subprocess.run(
        as_postgres("initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"),
        check=True,
        capture_output=True,
        timeout=120,
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cluster = ScratchPg(data, port)
    cluster.start()
    try:
        yield cluster
    finally:
        subprocess.run(
            as_postgres("pg_ctl", "-D", str(data), "-m", "immediate", "stop"),
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


def screener(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return cli_fork.run(args, timeout=300, env={**os.environ, **env})


def policy(tmp_path: Path, url: str) -> Policy:
    target = tmp_path / "target"
    target.mkdir(exist_ok=True)
    return Policy(
        probe=ProbePolicy(
            target=str(target), size_mib=16, runtime_s=0.5, ramp_s=0.2, rand_read=False
        ),
        store=StorePolicy(url=url, spool_dir=str(tmp_path / "spool")),
    )


def local(p: Policy) -> Policy:
    return app.screen_policy(p, local=True)


def test_db_stopped_mid_run_spools_then_replays_once(pg: ScratchPg, tmp_path: Path) -> None:
    env = {"SCREENER_DATABASE_URL": pg.url}
    assert screener("db", "upgrade", env=env).returncode == 0
    p = app.screen_policy(policy(tmp_path, pg.url), local=True, confirm=False)
    nodes = app.resolve_nodes(None, True)
    stopped: list[int] = []

    def stop_db(round_no: int, _probe: NodeProbe) -> None:
        if not stopped:  # the run is open in the DB; the probe and verdicts cannot be written
            pg.stop()
            stopped.append(round_no)

    result = app.run_screen(app.ScreenRequest(tuple(nodes), p, on_done=stop_db))
    assert result.store_error and spool.SPOOLED_NOTE in result.store_error
    (path,) = spool.spool_files(p.store.spool_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    kinds = [json.loads(line)["kind"] for line in path.read_text().splitlines()]
    assert kinds == ["run", "probe", "verdicts", "finish"]
    assert "s3cr" not in path.read_text()  # the spooled policy has no password either

    pg.start()
    assert pg.count("runs", "where status = 'running'") == 1  # the half-written run
    copy = tmp_path / "copy.jsonl"
    shutil.copy(path, copy)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[store]\nspool_dir = "{p.store.spool_dir}"\n')
    first = screener("--config", str(cfg), "spool", "replay", "--json", env=env)
    assert first.returncode == 0, first.stderr
    assert [r["outcome"] for r in json.loads(first.stdout)] == ["stored"]
    shutil.copy(copy, path)  # the same file again: must not be stored twice
    second = screener("--config", str(cfg), "spool", "replay", "--json", env=env)
    assert second.returncode == 0, second.stderr
    assert [r["outcome"] for r in json.loads(second.stdout)] == ["already stored"]
    assert spool.spool_files(p.store.spool_dir) == []
    assert pg.count("runs") == 1  # the half-written run completed, not stored again
    assert pg.count("runs", "where status = 'done'") == 1
    assert pg.count("verdicts") == 1
    assert pg.count("node_probes") == 1
    assert pg.count("runs", "where policy::text like '%s3cr%'") == 0


def test_db_down_from_the_start_is_replayed_by_the_next_run(pg: ScratchPg, tmp_path: Path) -> None:
    env = {"SCREENER_DATABASE_URL": pg.url}
    assert screener("db", "upgrade", env=env).returncode == 0
    pg.stop()
    target = tmp_path / "target"
    target.mkdir()
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        "[probe]\nsize_mib = 16\nruntime_s = 0.5\nramp_s = 0.2\nrand_read = false\n"
        f'[store]\nspool_dir = "{tmp_path}/spool"\n'
    )
    down = screener("--config", str(cfg), "screen", "--local", "--target", str(target), env=env)
    # The decision is made and printed; the results are kept, with one warning line.
    assert down.returncode in (0, 3), down.stderr
    assert "1 nodes:" in down.stdout
    assert down.stderr.startswith("screener: warning: database unavailable")
    assert "s3cr" not in down.stderr
    assert len(spool.spool_files(str(tmp_path / "spool"))) == 1
    pg.start()
    up = screener("--config", str(cfg), "screen", "--local", "--target", str(target), env=env)
    assert up.returncode in (0, 3), up.stderr
    assert spool.spool_files(str(tmp_path / "spool")) == []
    assert pg.count("runs", "where status = 'done'") == 2
    assert pg.count("verdicts") == 2


def test_spooled_probe_and_summary_round_trip_through_json() -> None:
    data = Path(__file__).parent / "data" / "probe"
    fio = (data / "fio" / "fio-3.33_loop_ok.json").read_text()
    iostat = (data / "iostat" / "sysstat-12.6.1_loop0_sigint.json").read_text()
    run = parse_fio(fio, "node01")
    probe = NodeProbe(
        node="node01",
        seq_write=run.job("seq_write"),
        seq_read=run.job("seq_read"),
        rand_read=run.job("rand_read"),
        fio_version=run.fio_version,
        iostat=parse_iostat(iostat, "node01"),
        facts=parse_facts((data / "facts" / "loop.txt").read_text(), "node01"),
        duration_s=1.5,
        raw_fio=fio,
        raw_iostat=iostat,
    )
    summary = evaluate(
        [probe, NodeProbe(node="node02", error="x", error_kind="probe")], {}, VerdictPolicy()
    )
    for obj, cls in ((probe, NodeProbe), (summary, RunSummary)):
        again = spool.from_json(cls, json.loads(json.dumps(spool.to_json(obj))))
        assert again == obj


def test_stored_policy_names_the_db_in_use_without_password(pg: ScratchPg, tmp_path: Path) -> None:
    env = {"SCREENER_DATABASE_URL": pg.url}
    assert screener("db", "upgrade", env=env).returncode == 0
    # The config names another DB; the environment's wins and is what the run records.
    p = local(replace(policy(tmp_path, "sqlite:////nonexistent/other.db")))
    os.environ["SCREENER_DATABASE_URL"] = pg.url
    try:
        app.run_screen(app.ScreenRequest(tuple(app.resolve_nodes(None, True)), p))
    finally:
        del os.environ["SCREENER_DATABASE_URL"]
    engine = create_engine(pg.url)
    with engine.connect() as conn:
        stored = conn.scalar(text("select policy from runs"))
    engine.dispose()
    assert (
        stored["store"]["url"] == f"postgresql+psycopg://postgres:***@127.0.0.1:{pg.port}/postgres"
    )


def test_a_run_spooled_for_another_database_is_not_replayed_here(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from screener.probe_data import Trigger
    from screener.store import open_store

    spool_dir = str(tmp_path / "spool")
    other = spool.SpoolingStore(None, spool_dir, "20261122000000-aaaa", "down", db="db01:5432/x")
    other.start_run(Trigger.MANUAL, ["node01"], {}, None, "node01", datetime.now(UTC))
    other.finish_run(-1, datetime.now(UTC), "done")
    url = f"sqlite:///{tmp_path}/here.db"
    with open_store(url, upgrade=True) as store:
        assert spool.replay(store, spool_dir, str(tmp_path / "here.db")) == []
        assert store.latest_runs(10) == []
    assert len(spool.spool_files(spool_dir)) == 1  # kept for the database it belongs to
    with open_store(url) as store:
        done = spool.replay(store, spool_dir, "db01:5432/x")  # as if that DB were back
        assert [r.outcome for r in done] == ["stored"]
        assert [(r.status, r.node_count) for r in store.latest_runs(10)] == [("done", 1)]
