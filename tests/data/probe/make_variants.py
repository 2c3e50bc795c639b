"""Derive the hand-made old-format variants from real captures (run once, output committed).

    .venv/bin/python tests/data/probe/make_variants.py

* fio/fio-2.x_from_slow_read.json: fio-3.33_loop_slow_read.json rewritten the way fio 2.x
  printed json+: latencies in ``clat``/``slat``/``lat`` in microseconds, no ``bw_bytes``
  (only ``bw`` in KiB/s), ``io_bytes`` in KiB, and ``bins`` keyed by histogram bucket index
  with the FIO_IO_U_PLAT_* constants (fio 2.x stat.c), every index printed.
* iostat/sysstat-11.5_from_sigterm.json: sysstat-12.6.1_loop0_sigterm.json rewritten with
  the JSON field names of sysstat 11.5.1-11.5.6 (r, w, rkB, wkB, avgqu-sz, await, ...),
  still cut short the way SIGTERM leaves it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
PLAT_BITS, PLAT_VAL, PLAT_NR = 6, 64, 19 * 64


def plat_val_to_idx(val: int) -> int:
    """fio stat.c plat_val_to_idx (2.x constants)."""
    msb = val.bit_length() - 1 if val > 0 else 0
    if msb <= PLAT_BITS:
        return val
    error_bits = msb - PLAT_BITS
    base = (error_bits + 1) << PLAT_BITS
    offset = (PLAT_VAL - 1) & (val >> error_bits)
    return min(base + offset, PLAT_NR - 1)


def old_latency(block: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: block[k] / 1000 for k in ("min", "max", "mean", "stddev")}
    if "percentile" in block:
        out["percentile"] = {k: int(v // 1000) for k, v in block["percentile"].items()}
    if "bins" in block:
        bins = [0] * PLAT_NR
        for key, count in block["bins"].items():
            bins[plat_val_to_idx(int(key) // 1000)] += count
        out["bins"] = {str(i): n for i, n in enumerate(bins)}
        out["bins"].update(
            FIO_IO_U_PLAT_BITS=PLAT_BITS, FIO_IO_U_PLAT_VAL=PLAT_VAL, FIO_IO_U_PLAT_NR=PLAT_NR
        )
    return out


def old_side(side: dict[str, Any]) -> dict[str, Any]:
    return {
        "io_bytes": side["io_kbytes"],
        "bw": side["bw"],
        "iops": side["iops"],
        "runtime": side["runtime"],
        "total_ios": side["total_ios"],
        "short_ios": side["short_ios"],
        "drop_ios": side["drop_ios"],
        "slat": old_latency(side["slat_ns"]),
        "clat": old_latency(side["clat_ns"]),
        "lat": old_latency(side["lat_ns"]),
        **{k: side[k] for k in ("bw_min", "bw_max", "bw_agg", "bw_mean", "bw_dev")},
    }


def make_fio2() -> None:
    src = json.loads((HERE / "fio/fio-3.33_loop_slow_read.json").read_text())
    doc: dict[str, Any] = {
        "fio version": "fio-2.21",
        "timestamp": src["timestamp"],
        "time": src["time"],
        "global options": src["global options"],
        "jobs": [],
    }
    for job in src["jobs"]:
        doc["jobs"].append(
            {
                "jobname": job["jobname"],
                "groupid": job["groupid"],
                "error": job["error"],
                "eta": job["eta"],
                "elapsed": job["elapsed"],
                "job options": job["job options"],
                **{d: old_side(job[d]) for d in ("read", "write", "trim")},
                "usr_cpu": job["usr_cpu"],
                "sys_cpu": job["sys_cpu"],
            }
        )
    text = "fio: this platform does not support process shared mutexes, forcing use of threads\n"
    text += json.dumps(doc, indent=2).replace('": ', '" : ') + "\n"
    text += "fio: file hash not empty on exit\n"
    (HERE / "fio/fio-2.x_from_slow_read.json").write_text(text)


def old_disk(line: str) -> str:
    d = json.loads(line.strip().rstrip(","))
    ios = d["r/s"] + d["w/s"]
    old = {
        "disk_device": d["disk_device"],
        "rrqm": d["rrqm/s"],
        "wrqm": d["wrqm/s"],
        "r": d["r/s"],
        "w": d["w/s"],
        "rkB": d["rkB/s"],
        "wkB": d["wkB/s"],
        "avgrq-sz": round((d["rkB/s"] + d["wkB/s"]) * 2 / ios, 2) if ios else 0.0,
        "avgqu-sz": d["aqu-sz"],
        "await": round((d["r_await"] * d["r/s"] + d["w_await"] * d["w/s"]) / ios, 2)
        if ios
        else 0.0,
        "r_await": d["r_await"],
        "w_await": d["w_await"],
        "svctm": 0.0,
        "util": d["util"],
    }
    body = ", ".join(
        f'"{k}": {v:.2f}' if k != "disk_device" else f'"{k}": "{v}"' for k, v in old.items()
    )
    return "{" + body + "}" + ("," if line.rstrip().endswith(",") else "")


def make_sysstat115() -> None:
    text = (HERE / "iostat/sysstat-12.6.1_loop0_sigterm.json").read_text()
    out = []
    for line in text.splitlines():
        m = re.match(r"^(\s*)(\{\"disk_device\".*)$", line)
        out.append(m.group(1) + old_disk(m.group(2)) if m else line)
    (HERE / "iostat/sysstat-11.5_from_sigterm.json").write_text("\n".join(out))


if __name__ == "__main__":
    make_fio2()
    make_sysstat115()
