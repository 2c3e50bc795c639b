"""Table cells carry the unit their column declares (issue 19, item 10): `screener job`
printed throughput_bytes_s as a duration ("53226d13h"), and `nodes`/`history` printed
read_mb_s as minutes, because the formatter guessed seconds from a "_s" suffix.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from screener.ingest import accuracy
from screener.report import terminal
from screener.store import jobs, query_rows
from tests import cli_fork

DATA = Path(__file__).resolve().parent / "data" / "ior"
DURATION = re.compile(r"\b\d+d\d\dh\b|\b\d+h\d\dm\b")
ROW_CLASSES = [
    c
    for module in (query_rows, jobs, accuracy)
    for c in vars(module).values()
    if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == module.__name__
]


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return cli_fork.run(
        args, timeout=120, env={**os.environ, "SCREENER_CONFIG": "", "COLUMNS": "250", **env}
    )


def test_job_shows_throughput_as_bandwidth(tmp_path: Path) -> None:
    env = {"SCREENER_DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite"}
    files = [str(DATA / "ior-fpp-summary.json"), str(DATA / "ior-fpp-ranks.csv")]
    layout = ["--nodes", "node[01-04]", "--ranks-per-node", "1"]
    ingested = cli(env, "ingest", "9001", *files, *layout, "--json")
    assert ingested.returncode == 0, ingested.stderr
    shown = cli(env, "job", "9001")
    assert shown.returncode == 0, shown.stderr
    assert "throughput MB/s" in shown.stdout
    assert not DURATION.search(shown.stdout), shown.stdout
    as_json = cli(env, "job", "9001", "--json")
    first = json.loads(as_json.stdout)[0]
    expected = terminal._cell(first["throughput_bytes_s"], FIELDS["throughput_bytes_s"])
    assert expected == f"{first['throughput_bytes_s'] / 1e6:,.1f}"
    assert expected in shown.stdout


FIELDS = {f.name: f for c in ROW_CLASSES for f in dataclasses.fields(c)}


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("throughput_bytes_s", 4.6e12, "4,600,000.0"),
        ("read_mb_s", 3000.0, "3,000.0"),
        ("write_mb_s", 12.5, "12.5"),
        ("age_s", 7200.0, "2h00m"),
        ("ttr_max_s", 3 * 86400.0 + 3600, "3d01h"),
        ("seconds", 0.5, "0.50s"),
        ("read_p99_ms", 31.04, "31.0"),
        ("ratio", 5.904, "5.90"),
    ],
)
def test_cells_use_the_unit_their_field_declares(name: str, value: float, shown: str) -> None:
    assert terminal._cell(value, FIELDS[name]) == shown


def test_headers_carry_the_declared_unit() -> None:
    assert terminal.header(FIELDS["read_mb_s"]) == "read MB/s"
    assert terminal.header(FIELDS["throughput_bytes_s"]) == "throughput MB/s"
    assert terminal.header(FIELDS["read_p99_ms"]) == "read p99 ms"
    assert terminal.header(FIELDS["age_s"]) == "age"


def test_every_row_column_named_like_a_unit_declares_one() -> None:
    # A new "*_s" column must say whether it is seconds or a rate: never guessed again.
    assert ROW_CLASSES, "found no row dataclasses"
    undeclared = [
        f"{c.__name__}.{f.name}"
        for c in ROW_CLASSES
        for f in dataclasses.fields(c)
        if f.name.endswith(("_s", "_ms", "_iops", "ratio", "rate")) and "unit" not in f.metadata
    ]
    assert undeclared == []
