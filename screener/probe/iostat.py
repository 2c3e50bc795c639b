"""iostat recipe and parser: per-device extended statistics sampled while fio runs.

How iostat ends matters (measured with sysstat 12.6.1, see tests/data/probe/README.md):

* SIGINT: since sysstat 12.1.4 (backported to 12.0.4) iostat catches it and closes the
  JSON document properly (exit 0). Prefer it to stop a monitor early.
* SIGTERM, SIGHUP (ssh session gone), SIGKILL (timeout): no handler, the document is left
  open. stdout is unbuffered (one write per printf), and iostat spends the interval asleep,
  so the text almost always stops right after the last complete interval object (``...}``)
  without the closing ``]}]}}`` (the comma before an interval is printed with that
  interval); a kill while a report is being printed cuts it mid-line.

:func:`parse_iostat` therefore reads the ``statistics`` array one interval at a time and
keeps every complete interval, whichever way iostat stopped.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from screener.errors import ConfigError, ProbeError
from screener.probe_data import IostatSample

_DEVICE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:!/-]{0,63}$")
_STATS_RE = re.compile(r'"statistics"\s*:\s*\[')


def iostat_argv(interval_s: int, count: int, devices: Sequence[str] = ()) -> list[str]:
    """``iostat`` sampling extended device statistics every ``interval_s`` for ``count`` reports.

    Devices are block device names (``nvme0n1``); empty means every device.
    """
    if isinstance(interval_s, bool) or not isinstance(interval_s, int) or interval_s < 1:
        raise ConfigError("iostat interval must be a whole number of seconds >= 1")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError("iostat count must be >= 1")
    for dev in devices:
        if not _DEVICE_RE.match(dev):
            raise ConfigError(f"invalid block device name {dev!r}")
    return [
        "env",
        # C locale: a decimal point in numbers whatever the node's locale (sysstat < 11.4.2
        # printed "0,00" in JSON under e.g. de_DE, which is not JSON).
        "LC_ALL=C",
        # ISO 8601 timestamps with zone, so samples line up with fio's jobs and other nodes.
        "S_TIME_FORMAT=ISO",
        "iostat",
        # Extended statistics: r_await/w_await, aqu-sz and util are only in -x.
        "-x",
        # Device report only, no CPU report.
        "-d",
        # kB/s whatever POSIXLY_CORRECT says (it would switch to 512-byte blocks).
        "-k",
        # Timestamp each report.
        "-t",
        # Skip the first report, which averages everything since boot: it would dilute a
        # slow episode into months of history. Each report then covers one interval.
        "-y",
        # JSON (sysstat >= 11.5.1) instead of a column layout that changed across versions.
        "-o",
        "JSON",
        *devices,
        str(interval_s),
        str(count),
    ]


# What a fio run takes beyond its ramps and runtimes before its I/O ends: its start
# (process, a fixed 100 ms wait for its job thread) and the drain of in-flight I/O; fio
# 3.33 takes 0.29 s in all for a 10 ms read, some of it after the I/O (its exit).
FIO_EDGES_S = 0.25


def iostat_count(duration_s: float, interval_s: int) -> int:
    """Reports that cover a fio run of ``duration_s`` (ramps + runtimes) and its edges; with
    -y each report covers one interval. No more: the probe waits for iostat to end, so an
    interval past fio's end was a second of every short probe spent on idle samples
    (issue 22: the prolog's 1.5 s triage waited 3 s for its iostat, a 0.75 s confirmation
    read 2 s)."""
    return max(1, math.ceil((duration_s + FIO_EDGES_S) / interval_s))


def parse_iostat(text: str, node: str) -> tuple[IostatSample, ...]:
    """Samples of every complete interval in ``iostat -x -d -o JSON`` output.

    Accepts documents cut short by a signal (see module doc). Raises :class:`ProbeError`
    for output that is not iostat JSON or holds no complete interval with a device.
    """
    m = _STATS_RE.search(text)
    if m is None:
        what = "empty iostat output" if not text.strip() else "no iostat JSON statistics"
        raise ProbeError(node, what, text)
    samples: list[IostatSample] = []
    intervals = 0
    for interval in _intervals(text, m.end()):
        if not isinstance(interval, dict):
            raise ProbeError(node, "iostat interval is not an object", repr(interval))
        intervals += 1
        stamp = interval.get("timestamp", "")
        disks = interval.get("disk", [])
        if not isinstance(disks, list):
            raise ProbeError(node, "iostat 'disk' is not a list", repr(disks))
        for disk in disks:
            samples.append(_sample(disk, stamp if isinstance(stamp, str) else "", node))
    if not intervals:
        raise ProbeError(node, "iostat output has no complete interval", text[m.start() :])
    if not samples:
        raise ProbeError(node, "iostat reported no devices")
    return tuple(samples)


def _intervals(text: str, pos: int) -> list[Any]:
    """Decode the statistics array element by element; stop at ']' or a cut-off element."""
    decoder = json.JSONDecoder()
    out: list[Any] = []
    n = len(text)
    while True:
        # Whitespace and commas between elements; a stray extra comma is skipped too
        # (sysstat's changelog lists invalid "-y" JSON fixed in 11.6.1 and 12.0.5).
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n or text[pos] == "]":
            return out
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return out  # the interval being printed when iostat died
        out.append(obj)


# Field name variants. sysstat 11.5.1-11.5.6 JSON: r, w, rkB, wkB, await, avgqu-sz, util.
# sysstat 11.5.7+ (and 12.x): r/s, w/s, rkB/s, wkB/s, r_await, w_await, aqu-sz, util.
# Units follow -k/-m/default: rkB/s, rMB/s, or rsec/s (512-byte sectors).
_RATE = {"r": ("r/s", "r"), "w": ("w/s", "w")}
_KB = {
    "r": (("rkB/s", 1.0), ("rkB", 1.0), ("rMB/s", 1024.0), ("rsec/s", 0.5)),
    "w": (("wkB/s", 1.0), ("wkB", 1.0), ("wMB/s", 1024.0), ("wsec/s", 0.5)),
}
_AWAIT = {"r": ("r_await", "await"), "w": ("w_await", "await")}
_QUEUE = ("aqu-sz", "avgqu-sz")
_UTIL = ("util", "util-percent")  # util-percent: the name sadf -j uses for the same figure


def _sample(disk: Any, stamp: str, node: str) -> IostatSample:
    if not isinstance(disk, dict) or not isinstance(disk.get("disk_device"), str):
        raise ProbeError(node, "iostat device entry without disk_device", repr(disk)[:200])
    name: str = disk["disk_device"]
    return IostatSample(
        device=name,
        timestamp=stamp,
        r_s=_first(disk, _RATE["r"], node, name),
        rkb_s=_scaled(disk, _KB["r"], node, name),
        w_s=_first(disk, _RATE["w"], node, name),
        wkb_s=_scaled(disk, _KB["w"], node, name),
        r_await_ms=_first(disk, _AWAIT["r"], node, name),
        w_await_ms=_first(disk, _AWAIT["w"], node, name),
        aqu_sz=_first(disk, _QUEUE, node, name),
        util_pct=_first(disk, _UTIL, node, name),
    )


def _first(disk: Mapping[str, Any], keys: Sequence[str], node: str, dev: str) -> float:
    return _scaled(disk, [(k, 1.0) for k in keys], node, dev)


def _scaled(
    disk: Mapping[str, Any], keys: Sequence[tuple[str, float]], node: str, dev: str
) -> float:
    for key, factor in keys:
        if key in disk:
            value = disk[key]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ProbeError(node, f"iostat {dev} {key} is not a number", repr(value))
            return float(value) * factor
    raise ProbeError(node, f"iostat {dev} lacks {keys[0][0]}")
