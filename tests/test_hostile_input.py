"""Careless or hostile input: one line on stderr, exit 1, and no side effect (issue 11).

Each case here was found by trying it; the real `screener` console script runs (real fio,
real SQLite), and each test checks both the message and that nothing was touched.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from screener.cli.common import MAX_LIMIT
from screener.errors import ConfigError
from screener.hostlist import MAX_NODES, count_nodes, expand_nodeset, validate_node
from screener.policy import ProbePolicy, load_policy, target_problem
from screener.probe.fio import cleanup_argv, fio_argv, layout_argv

SCREENER = [sys.executable, "-m", "screener.cli"]


def screener(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SCREENER, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def one_line_error(res: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Assert exit 1 with exactly one `screener: error:` line (no traceback); return it."""
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("screener: error: "), lines[0]
    assert "Traceback" not in res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def small_config(tmp_path: Path, extra: str = "") -> Path:
    cfg = tmp_path / "screener.toml"
    spool = tmp_path / "spool"
    cfg.write_text(
        "[probe]\nsize_mib = 16\nruntime_s = 0.5\nramp_s = 0.2\n"
        + extra
        + f'\n[store]\nspool_dir = "{spool}"\n'
    )
    return cfg


# ------------------------------------------------------------------ fio and the target


@pytest.mark.parametrize("sep", [";", "#"])
def test_target_fio_would_cut_is_refused_and_the_victim_is_untouched(
    tmp_path: Path, sep: str
) -> None:
    # Old code: fio cut '--filename=<dir>/victim;x/.screener-probe' at ';' and wrote its
    # region over <dir>/victim, exiting 0 with the node OK.
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n" * 1000)
    before = digest(victim)
    (tmp_path / f"victim{sep}x").mkdir()
    db = tmp_path / "db.sqlite"
    res = screener(
        "--config",
        str(small_config(tmp_path)),
        "screen",
        "--local",
        "--target",
        f"{tmp_path}/victim{sep}x",
        env={"SCREENER_DATABASE_URL": f"sqlite:///{db}"},
    )
    one_line_error(res, "probe.target", repr(sep))
    assert digest(victim) == before and victim.stat().st_size == 9000
    assert not list((tmp_path / f"victim{sep}x").iterdir())
    assert not db.exists()  # refused before anything was opened


def test_config_target_with_hash_is_refused_naming_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[probe]\ntarget = "{tmp_path}/victim#x"\n')
    res = screener("--config", str(cfg), "screen", "--local", "--no-store")
    one_line_error(res, "probe.target", "'#'")


@pytest.mark.parametrize(
    "target", ["/a;b", "/a#b", "/a$HOME", "/a\\b", "/a b", "/a\nb", "/a'b", '/a"b', "/a*b", "/é"]
)
def test_every_fio_argv_refuses_unsafe_targets(target: str) -> None:
    policy = ProbePolicy(target=target)
    assert target_problem(target) is not None
    for build in (fio_argv, layout_argv, cleanup_argv):
        with pytest.raises(ConfigError, match=r"probe\.target"):
            build(policy)


def test_a_colon_target_never_reaches_fio(tmp_path: Path) -> None:
    policy = ProbePolicy(target="/scratch/a:b")
    (arg,) = [a for a in fio_argv(policy) if a.startswith("--filename=")]
    assert arg == "--filename=probe"  # relative to the private directory sh entered


def test_local_screen_on_a_colon_target_writes_inside_it(tmp_path: Path) -> None:
    target = tmp_path / "a:b"
    target.mkdir()
    (tmp_path / "a").write_text("not a target\n")
    res = screener(
        "--config",
        str(small_config(tmp_path)),
        "screen",
        "--local",
        "--no-store",
        "--json",
        "--target",
        str(target),
    )
    assert res.returncode in (0, 3), res.stderr
    probe = target / ".screener" / "probe"
    assert probe.stat().st_size == 16 * 1024 * 1024
    assert probe.stat().st_mode & 0o777 == 0o600  # created under umask 077
    assert (tmp_path / "a").read_text() == "not a target\n"


# ------------------------------------------------------------------ config values


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[probe]\nmin_free_mib = -1\n", "probe.min_free_mib"),
        ("[probe]\niostat_interval_s = 0\n", "probe.iostat_interval_s"),
        ("[probe]\niostat_interval_s = -2\n", "probe.iostat_interval_s"),
        ('[probe]\nseq_bs = "banana"\n', "probe.seq_bs"),
        ('[probe]\nrand_bs = "4k;x"\n', "probe.rand_bs"),
        ('[prolog]\ntriage_seq_bs = "256k;x"\n', "prolog.triage_seq_bs"),
        ("[probe]\nruntime_s = 1e300\n", "probe.runtime_s"),
        ("[probe]\nruntime_s = nan\n", "probe.runtime_s"),
        ("[probe]\nramp_s = inf\n", "probe.ramp_s"),
        ("[probe]\nsize_mib = 0\n", "probe.size_mib"),
        ("[verdict]\nz_threshold = -1\n", "verdict.z_threshold"),
        ("[verdict]\nmax_slow_fraction = 0\n", "verdict.max_slow_fraction"),
        ("[verdict]\nmin_read_mb_s = -5\n", "verdict.min_read_mb_s"),
        ("[verdict]\nhistory_drop = 2\n", "verdict.history_drop"),
        ("[transport]\nconnect_timeout_s = 0\n", "transport.connect_timeout_s"),
        ("[transport]\ncommand_timeout_s = -1\n", "transport.command_timeout_s"),
        ("[transport]\nconcurrency = 0\n", "transport.concurrency"),
        ('[store]\nspool_dir = "relative"\n', "store.spool_dir"),
        ('[store]\nurl = ""\n', "store.url"),
        ("[probe]\nsize_mib = 1.5\n", "probe.size_mib"),
    ],
)
def test_bad_config_values_are_one_line_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_policy(cfg)
    # and through the CLI, with a node set: exit 1, not "done, every node UNKNOWN"
    res = screener("--config", str(cfg), "screen", "node[01-04]", "--no-store")
    one_line_error(res, key)


def test_negative_min_free_is_refused_before_any_probe(tmp_path: Path) -> None:
    target = tmp_path / "t"
    target.mkdir()
    cfg = tmp_path / "c.toml"
    cfg.write_text("[probe]\nmin_free_mib = -100000\n")
    res = screener("--config", str(cfg), "screen", "--local", "--no-store", "--target", str(target))
    one_line_error(res, "probe.min_free_mib")
    assert not list(target.iterdir())


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"\x00\x01\x02\xff\xfe binary", "not UTF-8"),
        ("[probe]\ntarget = '/caf\xe9'\n".encode("latin-1"), "not UTF-8"),
        (b"[probe\n", "not valid TOML"),
        (b"[probe]\nsize_mib = 'big'\n", "wrong type"),
        (b"[nosuch]\n", "unknown config section"),
    ],
)
def test_unusable_config_files_are_one_line(tmp_path: Path, content: bytes, why: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(content)
    one_line_error(screener("--config", str(cfg), "runs"), why)


def test_config_directory_and_empty_path_are_one_line(tmp_path: Path) -> None:
    one_line_error(screener("--config", str(tmp_path), "runs"), "is a directory")
    one_line_error(screener("--config", "", "runs"), "config path is empty")
    one_line_error(screener("--config", str(tmp_path / "nope.toml"), "runs"), "does not exist")


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_unreadable_config_is_one_line(tmp_path: Path) -> None:
    # root reads every file: drop the capabilities that let it, on a mode-000 file.
    cfg = tmp_path / "c.toml"
    cfg.write_text("[probe]\nsize_mib = 16\n")
    cfg.chmod(0)
    caps = "-dac_override,-dac_read_search"
    drop = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", "--"]
    res = subprocess.run(
        [*drop, *SCREENER, "--config", str(cfg), "runs"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    one_line_error(res, "not readable")


# ------------------------------------------------------------------ query arguments


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["runs", "--limit", "-1"], "--limit"),
        (["runs", "--limit", "0"], "--limit"),
        (["runs", "--limit", str(2**64)], "--limit"),
        (["show", str(2**63)], "RUN"),
        (["history", "node01", "--since", "1e309d"], "--since"),
        (["flaky", "--since", "nan"], "--since"),
        (["flaky", "--since", "10000000000d"], "--since"),
        (["flaky", "--since=-3d"], "--since"),
        (["nodes", "--stale", "0h"], "--stale"),
        (["flaky", "--min-episodes", "-1"], "--min-episodes"),
    ],
)
def test_query_arguments_out_of_range_are_one_line(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    db = tmp_path / "db.sqlite"
    res = screener(*args, env={"SCREENER_DATABASE_URL": f"sqlite:///{db}"})
    line = one_line_error(res, needle)
    assert len(line) < 120
    assert not db.exists()
    assert MAX_LIMIT < 2**63


def test_history_with_sql_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    res = screener("history", "node1' OR '1'='1", env={"SCREENER_DATABASE_URL": f"sqlite:///{db}"})
    one_line_error(res, "invalid node name")


# ------------------------------------------------------------------ node lists


@pytest.mark.parametrize(
    ("pattern", "needle"),
    [
        ("node[1-1000000000]", "expands to 1000000000 nodes"),
        ("node[1-10000000]", "expands to 10000000 nodes"),
        ("node[1-100000]", "expands to 100000 nodes"),
        ("node[01-", "missing bracket"),
        ("node[5-1]", "reversed"),
        ("node[1-3]]", "missing bracket"),
        ("node[a-b]", "bad range"),
        ("node;touch /tmp/x", "unexpected"),
        ("$(reboot)", "unexpected"),
        ("node`id`", "unexpected"),
        ("node\nnode2", "unexpected"),
        ("nœud1", "unexpected"),
        ("@all", "unexpected"),
        ("node[1-3]!node2", "unexpected"),
    ],
)
def test_bad_node_lists_are_refused_quickly(pattern: str, needle: str) -> None:
    started = time.monotonic()
    with pytest.raises(ConfigError, match=needle):
        expand_nodeset(pattern)
    assert time.monotonic() - started < 0.5  # no 1.7 GB / 8.5 s expansion first


def test_count_nodes_is_arithmetic() -> None:
    assert count_nodes("node[01-08],gpu[1-2,5]") == 11
    assert count_nodes("r[1-2]n[1-3]") == 6
    assert count_nodes(f"n[1-{MAX_NODES}]") == MAX_NODES
    assert len(expand_nodeset(f"n[1-{MAX_NODES}]")) == MAX_NODES


def test_long_node_name_is_not_echoed_whole() -> None:
    with pytest.raises(ConfigError) as err:
        validate_node("x" * 5000)
    assert len(str(err.value)) < 200


def test_node_list_with_shell_metacharacters_has_no_side_effect(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for nodeset in (f"n1;touch {marker}", f"$(touch {marker})", f"n1`touch {marker}`"):
        res = screener("screen", nodeset, "--no-store")
        one_line_error(res, "invalid node list")
    res = screener("screen", "x" * 5000, "--no-store")
    assert len(one_line_error(res, "invalid node")) < 300
    assert not marker.exists()


def test_job_fields_are_carried_as_data(tmp_path: Path) -> None:
    # A job id `screener job` would refuse is refused at input (it was stored, then every
    # later `job`/`accuracy` refused it); nothing runs, nothing is stored.
    db = tmp_path / "db.sqlite"
    target = tmp_path / "t"
    target.mkdir()
    for job in ("1'; DROP TABLE runs;--$(touch x)\u00e9", "x;y", "9" * 30):
        res = screener(
            "--config",
            str(small_config(tmp_path)),
            "screen",
            "--local",
            "--target",
            str(target),
            "--job-id",
            job,
            env={"SCREENER_DATABASE_URL": f"sqlite:///{db}"},
        )
        one_line_error(res, "invalid --job-id")
    assert not db.exists() and not list(target.iterdir())
    assert not Path("x").exists()


# ------------------------------------------------------------------ CLI inputs (issue 19 item 6)

IOR = Path(__file__).resolve().parent / "data" / "ior"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["accuracy", "--since", "1000000d"], "--since"),
        (["accuracy", "--since", "99999999999h"], "--since"),
        (["accuracy", "--since", "nan"], "--since"),
        (["history", "node01", "--since", "99999999999h"], "--since"),
        (["report", str(2**70), "--html", "/tmp/never-written.html"], "RUN"),
        (["show", str(2**70)], "RUN"),
        (["job", "x;y"], "invalid job id"),
    ],
)
def test_cli_values_that_overflowed_are_one_line(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    db = tmp_path / "db.sqlite"
    res = screener(*args, env={"SCREENER_DATABASE_URL": f"sqlite:///{db}"})
    one_line_error(res, needle)
    assert not db.exists()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--ranks-per-node", "99999999999999999999"], "--ranks-per-node"),
        (["--ranks-per-node", "60000", "--nodes", "n[1-60000]"], "ranks"),
        (["--ranks-per-node", "1", "--observed-at", "0001-01-01T00:00:00+23:59"], "--observed-at"),
        (["--ranks-per-node", "1", "--observed-at", "9999-12-31T23:59:59-23:59"], "--observed-at"),
        (["--ranks-per-node", "1", "--observed-at", "1900-01-01T00:00:00+00:00"], "--observed-at"),
    ],
)
def test_ingest_values_that_crashed_or_allocated_are_one_line(
    tmp_path: Path, extra: list[str], needle: str
) -> None:
    db = tmp_path / "db.sqlite"
    files = [str(IOR / "ior-fpp-summary.json"), str(IOR / "ior-fpp-ranks.csv")]
    nodes = [] if "--nodes" in extra else ["--nodes", "node[01-04]"]
    res = screener(
        "ingest",
        "9001",
        *nodes,
        *extra,
        *files,
        env={"SCREENER_DATABASE_URL": f"sqlite:///{db}"},
        timeout=60,
    )
    one_line_error(res, needle)
    assert not db.exists()


@pytest.mark.parametrize("deadline", ["inf", "nan", "-1", "0", "1e300"])
def test_screen_deadline_out_of_range_is_one_line(tmp_path: Path, deadline: str) -> None:
    res = screener("screen", "--local", "--no-store", "--deadline", deadline)
    one_line_error(res, "--deadline")


# ------------------------------------------------------------------ database URLs and files


def test_unencoded_at_in_password_is_refused_without_showing_it(tmp_path: Path) -> None:
    url = "postgresql+psycopg://screener:se@cretpart@127.0.0.1:9/db"
    res = screener("runs", env={"SCREENER_DATABASE_URL": url})
    line = one_line_error(res, "%40")
    assert "cretpart" not in line and "se@" not in line


def test_read_only_query_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    # Old code ran PRAGMA journal_mode=WAL on every connect, which waits for any writer's
    # lock: `runs` stalled as long as a prolog held its transaction (7-10 s seen).
    db = tmp_path / "db.sqlite"
    env = {"SCREENER_DATABASE_URL": f"sqlite:///{db}"}
    assert screener("db", "upgrade", env=env).returncode == 0
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("UPDATE alembic_version SET version_num = version_num")
    try:
        started = time.monotonic()
        res = screener("runs", "--json", env=env, timeout=60)
        took = time.monotonic() - started
    finally:
        holder.execute("COMMIT")
        holder.close()
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
    assert took < 5, took


def test_read_only_query_leaves_an_empty_file_alone(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    res = screener("runs", env={"SCREENER_DATABASE_URL": f"sqlite:///{db}"})
    one_line_error(res, "not initialised")
    assert db.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_runs_reads_a_database_on_a_read_only_mount(tmp_path: Path) -> None:
    src, ro = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    env = {"SCREENER_DATABASE_URL": f"sqlite:///{src}/db.sqlite"}
    assert screener("db", "upgrade", env=env).returncode == 0
    mounted = subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        res = screener("runs", "--json", env={"SCREENER_DATABASE_URL": f"sqlite:///{ro}/db.sqlite"})
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "[]"
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_unwritable_spool_dir_neither_blocks_a_screen_nor_loses_silently(tmp_path: Path) -> None:
    target = tmp_path / "t"
    target.mkdir()
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        "[probe]\nsize_mib = 16\nruntime_s = 0.5\nramp_s = 0.2\nrand_read = false\n"
        '[store]\nspool_dir = "/proc/no-spool-here"\n'
    )
    base = ["--config", str(cfg), "screen", "--local", "--target", str(target)]
    ok = screener(*base, "--no-store")
    assert ok.returncode in (0, 3), ok.stderr
    # DB down and nowhere to spool: the figures are printed, the line says both.
    down = screener(*base, env={"SCREENER_DATABASE_URL": "postgresql+psycopg://u:pw@127.0.0.1:1/x"})
    line = one_line_error(down, "cannot spool to /proc/no-spool-here", "127.0.0.1:1")
    assert "pw" not in line.replace("spool", "")
    assert "1 nodes:" in down.stdout
