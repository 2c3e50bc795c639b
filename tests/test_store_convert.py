"""Pure parts of the store (no database): row mapping, flip counting, URL handling."""

from __future__ import annotations

import dataclasses

import pytest
from store_data import FACTS, error_probe, full_probe, verdict

from screener.errors import StoreError
from screener.probe_data import MdStatus, NodeFacts, Status
from screener.store import convert
from screener.store.engine import describe, parse_url, redact

OK, SR, SW, UNK, DEG = (
    Status.OK,
    Status.SLOW_READ,
    Status.SLOW_WRITE,
    Status.UNKNOWN,
    Status.DEGRADED,
)


@pytest.mark.parametrize(
    "facts",
    [FACTS, NodeFacts(), NodeFacts(md=MdStatus()), NodeFacts(device="loop0", scheduler="mq")],
)
def test_facts_round_trip(facts: NodeFacts) -> None:
    assert convert.facts_from_row(convert.facts_row(facts)) == facts


def test_probe_rows_round_trip() -> None:
    for probe in (full_probe(), error_probe()):
        rebuilt = convert.probe_from_rows(
            probe.node,
            convert.probe_row(probe),
            convert.job_rows(probe),
            list(reversed(convert.iostat_rows(probe))),  # order comes from seq, not row order
            None if probe.facts is None else convert.facts_row(probe.facts),
        )
        assert rebuilt == probe
    assert [r["kind"] for r in convert.job_rows(full_probe())] == [
        "seq_write",
        "seq_read",
        "rand_read",
    ]
    assert convert.job_rows(error_probe()) == []


def test_non_finite_job_figures_are_refused() -> None:
    probe = full_probe()
    assert probe.seq_read is not None
    bad = dataclasses.replace(
        probe, seq_read=dataclasses.replace(probe.seq_read, iops=float("inf"))
    )
    with pytest.raises(
        StoreError, match=r"probe of node01 has a non-finite value seq_read.iops=inf"
    ):
        convert.job_rows(bad)


def test_verdict_row_nan_is_null_inf_is_kept() -> None:
    v = verdict("node01", Status.SLOW_READ, 0.0, z_read=float("nan"), signals=("ratio",))
    row = convert.verdict_row(v)
    assert row["z_read"] is None and row["ratio"] == float("inf") and row["signals"] == ["ratio"]
    assert convert.verdict_from_row("node01", row) == verdict(
        "node01", Status.SLOW_READ, 0.0, signals=("ratio",)
    )


@pytest.mark.parametrize("name", ["node01", "gpu-a100.rack3_7", "n" * 255])
def test_node_names_accepted(name: str) -> None:
    assert convert.node_name(name) == name


@pytest.mark.parametrize("name", ["", "-n1", "n 1", "n1;id", "n1\n", "n" * 256, "../etc"])
def test_node_names_refused(name: str) -> None:
    with pytest.raises(StoreError, match="invalid node name"):
        convert.node_name(name)


def test_urls() -> None:
    assert redact("postgresql://u:p@ss@h/db") == "postgresql://u:***@h/db"
    assert redact("sqlite:////var/x.db") == "sqlite:////var/x.db"
    pg = parse_url("postgresql://screener@db1/screener")
    assert pg.drivername == "postgresql+psycopg"  # psycopg 3 is the driver we ship
    assert describe(pg) == "db1:5432/screener"
    assert describe(parse_url("sqlite:////var/lib/screener/s.db")) == "/var/lib/screener/s.db"
    assert describe(parse_url("sqlite://")) == ":memory:"
