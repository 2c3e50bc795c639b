"""screener.probe.iostat: the iostat command line and the (possibly cut) JSON parser."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from screener.errors import ConfigError, ProbeError
from screener.probe.iostat import iostat_argv, iostat_count, parse_iostat

DATA = Path(__file__).parent / "data" / "probe" / "iostat"


def text(name: str) -> str:
    return (DATA / name).read_text()


def raw_intervals(name: str) -> list[dict[str, Any]]:
    intervals: list[dict[str, Any]] = json.loads(text(name))["sysstat"]["hosts"][0]["statistics"]
    return intervals


# ------------------------------------------------------------------------- argv


def test_argv_extended_device_json_without_the_since_boot_report() -> None:
    argv = iostat_argv(1, 5, ["nvme0n1", "nvme1n1"])
    assert argv[:3] == ["env", "LC_ALL=C", "S_TIME_FORMAT=ISO"]
    cmd = argv[3:]
    assert cmd[0] == "iostat"
    for opt in ("-x", "-d", "-k", "-t", "-y"):
        assert opt in cmd
    assert cmd[cmd.index("-o") + 1] == "JSON"
    assert cmd[-4:] == ["nvme0n1", "nvme1n1", "1", "5"]


def test_argv_without_devices_ends_with_interval_and_count() -> None:
    assert iostat_argv(2, 7)[-3:] == ["JSON", "2", "7"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 5), "interval"),
        ((True, 5), "interval"),
        ((1, 0), "count"),
        ((1, 5, ["-p"]), "invalid block device"),
        ((1, 5, ["sda sdb"]), "invalid block device"),
        ((1, 5, [""]), "invalid block device"),
    ],
)
def test_bad_arguments_are_config_errors(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        iostat_argv(*args)


def test_iostat_count_covers_the_probe_and_no_more() -> None:
    assert iostat_count(12.0, 1) == 13  # the shipped probe: 3 x (1 s + 3 s), and fio's edges
    assert iostat_count(12.5, 2) == 7  # 13 s in 2-s reports
    assert iostat_count(1.5, 1) == 2  # the prolog's triage: 2 x (0.25 s + 0.5 s); was 3
    assert iostat_count(0.75, 1) == 1  # its confirmation round (the seq read only); was 2
    assert iostat_count(0.0, 1) == 1


# ------------------------------------------------------------------------- parse, real data


def test_parse_complete_document_stopped_by_sigint() -> None:
    name = "sysstat-12.6.1_loop0_sigint.json"
    samples = parse_iostat(text(name), "node01")
    raw = raw_intervals(name)
    assert len(samples) == len(raw) == sum(len(i["disk"]) for i in raw)
    for sample, interval in zip(samples, raw, strict=True):
        disk = interval["disk"][0]
        assert sample.device == "loop0"
        assert sample.timestamp == interval["timestamp"]
        assert (sample.r_s, sample.w_s) == (disk["r/s"], disk["w/s"])
        assert (sample.rkb_s, sample.wkb_s) == (disk["rkB/s"], disk["wkB/s"])
        assert (sample.r_await_ms, sample.w_await_ms) == (disk["r_await"], disk["w_await"])
        assert (sample.aqu_sz, sample.util_pct) == (disk["aqu-sz"], disk["util"])
    assert max(s.r_s for s in samples) > 1000 and max(s.w_s for s in samples) > 1000
    assert samples[0].timestamp.endswith("+0000") and "T" in samples[0].timestamp


def test_parse_document_cut_by_sigterm_keeps_every_complete_interval() -> None:
    t = text("sysstat-12.6.1_loop0_sigterm.json")
    with pytest.raises(json.JSONDecodeError):
        json.loads(t)
    assert t.rstrip().endswith("}") and not t.rstrip().endswith("}}")
    samples = parse_iostat(t, "node02")
    assert len(samples) == t.count('"timestamp"') >= 3
    assert [s.timestamp for s in samples] == sorted(s.timestamp for s in samples)


def test_parse_all_devices() -> None:
    name = "sysstat-12.6.1_all_devices.json"
    samples = parse_iostat(text(name), "node03")
    raw = raw_intervals(name)
    assert {s.device for s in samples} == {d["disk_device"] for i in raw for d in i["disk"]}
    assert {"loop0", "vda"} <= {s.device for s in samples}
    per_interval = len(raw[0]["disk"])
    assert len(samples) == per_interval * len(raw)


def test_interval_cut_mid_line_is_dropped_but_earlier_ones_kept() -> None:
    t = text("sysstat-12.6.1_loop0_sigint.json")
    intervals = len(raw_intervals("sysstat-12.6.1_loop0_sigint.json"))
    last = t.rindex('"disk_device"')
    samples = parse_iostat(t[: last + 40], "node04")
    assert len(samples) == intervals - 1


def test_sysstat_11_5_field_names_give_the_same_samples() -> None:
    new = parse_iostat(text("sysstat-12.6.1_loop0_sigterm.json"), "n")
    old = parse_iostat(text("sysstat-11.5_from_sigterm.json"), "n")
    assert len(old) == len(new)
    for a, b in zip(old, new, strict=True):
        assert a == b


def test_megabyte_and_sector_units_are_converted_to_kb() -> None:
    doc = json.loads(text("sysstat-12.6.1_loop0_sigint.json"))
    disk = doc["sysstat"]["hosts"][0]["statistics"][-1]["disk"][0]
    rkb, wkb = disk.pop("rkB/s"), disk.pop("wkB/s")
    disk["rMB/s"], disk["wsec/s"] = rkb / 1024, wkb * 2
    sample = parse_iostat(json.dumps(doc), "n")[-1]
    assert sample.rkb_s == pytest.approx(rkb) and sample.wkb_s == pytest.approx(wkb)


def test_r_await_falls_back_to_await() -> None:
    doc = json.loads(text("sysstat-12.6.1_loop0_sigint.json"))
    disk = doc["sysstat"]["hosts"][0]["statistics"][-1]["disk"][0]
    del disk["r_await"], disk["w_await"]
    disk["await"] = 7.5
    sample = parse_iostat(json.dumps(doc), "n")[-1]
    assert (sample.r_await_ms, sample.w_await_ms) == (7.5, 7.5)


# ------------------------------------------------------------------------- parse, errors


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", "empty iostat output"),
        ("iostat: command not found\n", "no iostat JSON statistics"),
        ('{"fio version": "fio-3.33", "jobs": []}', "no iostat JSON statistics"),
        ('{"sysstat": {"hosts": [{"nodename": "n", "statistics": [', "no complete interval"),
        ('{"sysstat": {"hosts": [{"statistics": [{"disk": []}]}]}}', "no devices"),
        ('{"sysstat": {"hosts": [{"statistics": [{"disk": [{"r/s": 1}]}]}]}}', "disk_device"),
        ('{"sysstat": {"hosts": [{"statistics": [{"disk": [{"disk_device": "a"}]}]}]}}', "lacks"),
        ('{"sysstat": {"hosts": [{"statistics": [3]}]}}', "not an object"),
    ],
)
def test_garbage_is_a_probe_error(output: str, message: str) -> None:
    with pytest.raises(ProbeError, match=message) as info:
        parse_iostat(output, "node05")
    assert str(info.value).startswith("node05: ")


def test_string_value_is_a_probe_error() -> None:
    t = text("sysstat-12.6.1_loop0_sigint.json").replace('"util": 0.00', '"util": "n/a"', 1)
    with pytest.raises(ProbeError, match="util is not a number"):
        parse_iostat(t, "n")


def test_every_prefix_of_real_output_parses_or_raises_probe_error() -> None:
    t = text("sysstat-12.6.1_all_devices.json")
    for cut in range(0, len(t), 37):
        with contextlib.suppress(ProbeError):
            parse_iostat(t[:cut], "n")


# ------------------------------------------------------------------------- real iostat


def _start_and_wait_for_first_interval(argv: list[str]) -> tuple[subprocess.Popen[bytes], bytes]:
    """Start iostat and read its stdout until one interval object has been closed."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    out = b""
    deadline = time.monotonic() + 15
    while b'"disk": [' not in out or b"\n\t\t\t\t}" not in out.split(b'"disk": [', 1)[1]:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not sel.select(remaining):
            proc.kill()
            raise AssertionError(f"iostat printed no interval: {out!r}")
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        out += chunk
    return proc, out


@pytest.mark.skipif(shutil.which("iostat") is None, reason="sysstat not installed")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_real_iostat_stopped_by_a_signal_parses(sig: signal.Signals) -> None:
    proc, out = _start_and_wait_for_first_interval(iostat_argv(1, 100))
    proc.send_signal(sig)
    rest, _ = proc.communicate(timeout=15)
    out += rest
    samples = parse_iostat(out.decode(), "local")
    assert len(samples) >= 1 and all(s.timestamp for s in samples)
    if sig == signal.SIGINT:
        assert proc.returncode == 0
        json.loads(out)  # iostat closed the document itself
    else:
        assert proc.returncode == -signal.SIGTERM
