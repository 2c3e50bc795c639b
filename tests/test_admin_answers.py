"""What admins read tells the truth (issue 26): every query command answers an empty store
in one sentence with its criteria, and the figures a human table prints are the stored
ones in the unit their field declares. The store is seeded by real local screens (fio on
this machine, the same write path as the prolog)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests import cli_fork


def cli(tmp_path: Path, *args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    """A query command against tmp_path's SQLite store, as an admin's terminal of `columns`."""
    env = {
        **os.environ,
        "SCREENER_CONFIG": "",
        "SCREENER_DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite",
        "COLUMNS": str(columns),
    }
    return cli_fork.run(args, timeout=300, env=env)


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (("nodes",), "no node in the store yet: `screener screen NODESET` or the sweep adds them"),
        (("nodes", "--all"), "no node in the store yet"),
        (("flaky",), "no flaky node in the last 30d (>= 2 slow episodes)"),
        (("flaky", "--since", "2w", "--min-episodes", "3"), "no flaky node in the last 2w (>= 3"),
        (("runs",), "no run in the store yet"),
        (("accuracy",), "nothing to score since "),
        (("accuracy", "--by", "rule"), "nothing to score since "),
    ],
)
def test_an_empty_answer_is_one_sentence_with_its_criteria(
    tmp_path: Path, args: tuple[str, ...], sentence: str
) -> None:
    assert cli(tmp_path, "db", "upgrade").returncode == 0  # a new site's empty store
    res = cli(tmp_path, *args)
    assert res.returncode == 0, res.stderr
    text = " ".join(ln.strip() for ln in res.stdout.splitlines() if ln.strip())
    assert text.startswith(sentence.split(":")[0]) and sentence in text, res.stdout
    assert not set(res.stdout) & set("┃━│─┏┗"), res.stdout  # words, not an empty box
    assert all(len(ln) <= 80 for ln in res.stdout.splitlines()), res.stdout


def test_missing_run_and_job_are_one_line_errors(tmp_path: Path) -> None:
    assert cli(tmp_path, "db", "upgrade").returncode == 0
    for args, said in (
        (("show", "42"), "42"),
        (("job", "42"), "job 42 has not been ingested"),
        (("history", "node42"), "node node42 is not in the database"),
    ):
        res = cli(tmp_path, *args)
        assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert said in res.stderr and "Traceback" not in res.stderr


@pytest.fixture(scope="module")
def screened(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Two real local screens of this machine (fio on a tmp directory), stored. A small
    probe (what is checked is how stored figures print, not the probe's size): the default
    256 MiB, 2 s probe took this fixture 37-57 s on the real disk under the suite's load."""
    d = tmp_path_factory.mktemp("answers")
    target = d / "scratch"
    target.mkdir()
    small = d / "probe.toml"
    small.write_text("[probe]\nsize_mib = 32\nruntime_s = 0.5\nramp_s = 0.2\n")
    for _ in range(2):
        screen = ("--config", str(small), "screen", "--local", "--target", str(target))
        res = cli(d, *screen, "--no-confirm")
        assert res.returncode in (0, 3), res.stdout + res.stderr  # 3: this host judged slow
    return d, socket.gethostname()


def test_tables_print_the_stored_figures_in_their_declared_units(
    screened: tuple[Path, str],
) -> None:
    d, host = screened
    stored = json.loads(cli(d, "nodes", "--json").stdout)
    assert [r["node"] for r in stored] == [host]
    row = stored[0]
    table = cli(d, "nodes", "--all", columns=160).stdout
    assert "read MB/s" in table and "write MB/s" in table and " age " in table, table
    assert f"{row['read_mb_s']:,.1f}" in table and f"{row['write_mb_s']:,.1f}" in table, table
    history = json.loads(cli(d, "history", host, "--json").stdout)
    shown = cli(d, "history", host, columns=160).stdout
    assert len(history) == 2 and all(f"{h['read_mb_s']:,.1f}" in shown for h in history), shown
    run = history[0]["run_id"]
    detail = cli(d, "show", str(run), columns=160).stdout
    assert f"{history[0]['read_mb_s']:,.1f}" in detail and "read MB/s" in detail, detail
    runs = json.loads(cli(d, "runs", "--json").stdout)
    assert {r["id"] for r in runs} == {h["run_id"] for h in history}
    # nothing guessed: no bandwidth printed as a duration ("2m", "40m") anywhere
    for text in (table, shown, detail):
        assert " 40m " not in text and "MB/s" in text


def test_tables_fit_80_columns(screened: tuple[Path, str]) -> None:
    d, host = screened
    for args in (("nodes", "--all"), ("history", host), ("runs",), ("flaky",), ("accuracy",)):
        out = cli(d, *args, columns=80).stdout
        assert all(len(ln) <= 80 for ln in out.splitlines()), (args, out)
        assert out.strip(), args


def test_spool_and_doctor_answer_in_words(tmp_path: Path) -> None:
    config = tmp_path / "screener.toml"
    config.write_text(
        f'[store]\nurl = "sqlite:///{tmp_path}/db.sqlite"\nspool_dir = "{tmp_path}/sp"\n'
    )
    env_cfg = ("--config", str(config))
    # a terminal wide enough for both paths: at 80 columns a path wraps inside a word when
    # tmp_path is long (an xdist worker's popen-gwN adds 11 characters)
    listed = cli(tmp_path, *env_cfg, "spool", "list", columns=400)
    assert listed.returncode == 0, listed.stderr
    said = listed.stdout.strip()
    assert said == f"no run spooled for {tmp_path}/db.sqlite in {tmp_path}/sp"
    replayed = cli(tmp_path, *env_cfg, "spool", "replay")
    assert replayed.returncode == 0 and "no run spooled" in replayed.stdout, replayed.stdout
    narrow = cli(tmp_path, *env_cfg, "doctor")
    assert narrow.returncode == 0 and all(len(ln) <= 80 for ln in narrow.stdout.splitlines())
    doctor = cli(tmp_path, *env_cfg, "doctor", columns=250)
    facts = dict(ln.split(None, 1) for ln in doctor.stdout.splitlines() if ln[:1].strip())
    assert facts["config"] == str(config) and facts["database"].endswith("db.sqlite")
    assert facts["slurm_backend"] in ("cli", "pyslurm") and facts["why"]
