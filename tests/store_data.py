"""Test data for the store tests: probes built from real captured fio/iostat output,
verdicts, and fixed timestamps. Plain helpers (fixtures live in store_fixtures.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from screener.probe_data import (
    FioJobResult,
    IostatSample,
    MdStatus,
    NodeFacts,
    NodeProbe,
    SmartLog,
    Status,
    Verdict,
)

DATA = Path(__file__).parent / "data" / "store"
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def real_fio() -> tuple[str, dict[str, FioJobResult]]:
    """A real fio 3.33 JSON output (with fio's text preamble) and its jobs' figures."""
    raw = (DATA / "fio-3.33-seq-rand.json").read_text()
    doc = json.loads(raw[raw.index("{") :])
    jobs = {}
    for j in doc["jobs"]:
        side = j["write"] if j["jobname"] == "seq_write" else j["read"]
        pct = side["clat_ns"]["percentile"]
        jobs[j["jobname"]] = FioJobResult(
            name=j["jobname"],
            rw=j["job options"]["rw"],
            bw_bytes=float(side["bw_bytes"]),
            iops=float(side["iops"]),
            total_ios=int(side["total_ios"]),
            runtime_ms=float(side["runtime"]),
            lat_mean_ns=float(side["clat_ns"]["mean"]),
            lat_p50_ns=float(pct["50.000000"]),
            lat_p99_ns=float(pct["99.000000"]),
            lat_p999_ns=float(pct["99.900000"]),
            slow_fraction=0.0,
            error=int(j["error"]),
        )
    return raw, jobs


def real_iostat() -> tuple[str, tuple[IostatSample, ...]]:
    """A real `iostat -x -d -t -o JSON` output and its samples."""
    raw = (DATA / "iostat-12.6.1-x-d-t.json").read_text()
    stats = json.loads(raw)["sysstat"]["hosts"][0]["statistics"]
    samples = tuple(
        IostatSample(
            device=d["disk_device"],
            timestamp=s.get("timestamp", ""),
            r_s=float(d["r/s"]),
            rkb_s=float(d["rkB/s"]),
            w_s=float(d["w/s"]),
            wkb_s=float(d["wkB/s"]),
            r_await_ms=float(d["r_await"]),
            w_await_ms=float(d["w_await"]),
            aqu_sz=float(d["aqu-sz"]),
            util_pct=float(d["util"]),
        )
        for s in stats
        for d in s["disk"]
    )
    return raw, samples


FACTS = NodeFacts(
    device="nvme0n1",
    pcie_speed="8.0 GT/s PCIe",
    pcie_max_speed="16.0 GT/s PCIe",
    pcie_width=4,
    pcie_max_width=4,
    scheduler="none",
    read_ahead_kb=128,
    nr_requests=1023,
    write_cache="write back",
    smart=SmartLog(critical_warning=0, temperature_c=41.0, media_errors=0, percentage_used=3),
    md=MdStatus(arrays=("md0",), degraded=(), rebuilding=("md0",)),
)


def full_probe(node: str = "node01") -> NodeProbe:
    """A healthy probe built from the captured outputs, with facts."""
    raw_fio, jobs = real_fio()
    raw_iostat, samples = real_iostat()
    return NodeProbe(
        node=node,
        seq_write=jobs["seq_write"],
        seq_read=jobs["seq_read"],
        rand_read=jobs["rand_read"],
        fio_version="fio-3.33",
        iostat=samples,
        facts=FACTS,
        duration_s=9.25,
        raw_fio=raw_fio,
        raw_iostat=raw_iostat,
    )


def error_probe(node: str = "node02") -> NodeProbe:
    """A node that could not be probed."""
    return NodeProbe(
        node=node,
        error="node02: unreachable: connection refused",
        error_kind="unreachable",
        duration_s=0.5,
    )


def verdict(node: str, status: Status, read_mb_s: float = 3000.0, **kw: object) -> Verdict:
    """A verdict with plausible figures."""
    return Verdict(
        node=node,
        status=status,
        reason=f"{node} {status.value}",
        read_mb_s=read_mb_s,
        write_mb_s=3100.0,
        ratio=3100.0 / read_mb_s if read_mb_s else float("inf"),
        **kw,  # type: ignore[arg-type]
    )


def at(hours: float) -> datetime:
    """A fixed timestamp ``hours`` after T0."""
    return T0 + timedelta(hours=hours)
