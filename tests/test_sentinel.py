"""The fast path's sentinel (issue 28): its argv never writes, real fio reads the kept probe
file through it (LocalTransport, this machine's fio), and the judgement is pure."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from screener.errors import ConfigError
from screener.policy import Policy, ProbePolicy, PrologPolicy
from screener.probe.fio import fio_argv, layout_argv
from screener.probe.sentinel import SentinelResult, judge_sentinel, sentinel_argv
from screener.prolog.sentinel import run_sentinels
from screener.transport.local import LocalTransport

MB = 1e6


def test_argv_reads_the_kept_file_read_only_at_the_probes_queue_depth() -> None:
    pol = ProbePolicy(target="/scratch/a:b", size_mib=64, iodepth=32, seq_bs="1M")
    argv = sentinel_argv(pol, 0.25)
    assert argv[4:6] == ["/scratch/a:b/.screener", "fio"]  # fio in the private directory
    assert "--readonly" in argv and "--direct=1" in argv
    assert "--filename=probe" in argv  # relative: nothing of the target reaches fio
    assert {"--rw=read", "--bs=1M", "--iodepth=32", "--runtime=250ms"} <= set(argv)
    assert not [a for a in argv if a.startswith(("--rw=write", "--overwrite", "--create"))]
    assert argv[-1] == "--name=seq_read"
    with pytest.raises(ConfigError):  # the probe's own checks: fio splits at ';'
        sentinel_argv(ProbePolicy(target="/scratch;rm"), 0.25)
    # the sequential queue depth when set ([prolog] seq_iodepth): fewer reads to drain
    shallow = sentinel_argv(ProbePolicy(iodepth=32, seq_iodepth=8), 0.25)
    assert "--iodepth=8" in shallow and "--iodepth=32" not in shallow


def test_judgement_passes_only_a_node_reading_like_its_usual_self() -> None:
    usual = [1000 * MB, 1200 * MB, 1100 * MB]
    ok = judge_sentinel("node01", 900 * MB, None, usual, 0.5)
    assert ok.passed and ok.usual_bw == 1100 * MB
    assert ok.reason == "sentinel read 900 MB/s = 0.82x its usual 1,100 MB/s"
    slow = judge_sentinel("node01", 44 * MB, None, usual, 0.5)
    assert not slow.passed and slow.reason.endswith("0.04x its usual 1,100 MB/s (< 0.5)")
    # no figure or nothing to compare with: the full probe decides, never a drain here
    err = judge_sentinel("node01", None, "node01: fio exited with status 1", usual, 0.5)
    assert not err.passed and err.reason.startswith("sentinel failed (node01: fio exited")
    new = judge_sentinel("node01", 900 * MB, None, [], 0.5)
    assert not new.passed and new.reason == "no usual read to compare the sentinel with"


def _policy(tmp_path: Path) -> Policy:
    probe = ProbePolicy(target=str(tmp_path), size_mib=16, runtime_s=0.2, ramp_s=0)
    return dataclasses.replace(Policy(), probe=probe, prolog=PrologPolicy(sentinel_s=0.2))


@pytest.mark.serial  # two real fio timings compared: another worker's load moved one 0.25 -> 0.62x
def test_real_fio_sentinel_reads_the_kept_file_and_fails_without_it(tmp_path: Path) -> None:
    """This machine's fio: after the probe's layout, the sentinel reads; with the file gone
    it fails (the full probe decides) and creates nothing."""
    import subprocess

    pol = _policy(tmp_path)
    layout = subprocess.run(layout_argv(pol.probe), capture_output=True, text=True, timeout=120)
    assert layout.returncode == 0, layout.stderr
    probe = subprocess.run(
        fio_argv(pol.probe, ("seq_write", "seq_read")), capture_output=True, timeout=120
    )
    assert probe.returncode == 0
    kept = tmp_path / ".screener" / "probe"
    assert kept.stat().st_size == 16 << 20

    async def go(usual: list[float]) -> list[SentinelResult]:
        t = LocalTransport()
        try:
            return await run_sentinels(t, ["localhost"], {"localhost": usual}, pol)
        finally:
            await t.close()

    # usual 1 byte/s: anything passes. Three reads, the fastest is the yardstick below: the
    # first 0.2 s read of a cold file ran 2.3x slower than the next (CI on 7aa3f40: a "0.25x"
    # close call then read 0.58x and passed)
    reads = [asyncio.run(go([1.0]))[0] for _ in range(3)]
    assert all(r.passed and r.read_bw is not None and r.read_bw > 1 * MB for r in reads), reads
    got = max(reads, key=lambda r: r.read_bw or 0.0)
    assert got.read_bw is not None
    (fast,) = asyncio.run(go([got.read_bw * 100]))  # a node 100x faster than it reads now
    assert not fast.passed and fast.reason.endswith("(< 0.5)")  # decisive: read once
    # a close call (about 0.25x, above 0.5 x CLOSE_FACTOR) reads again before it costs a full
    # probe; both figures said
    (close,) = asyncio.run(go([got.read_bw * 4]))
    assert not close.passed and "(< 0.5) (first read 0." in close.reason
    kept.unlink()
    (gone,) = asyncio.run(go([got.read_bw]))
    assert not gone.passed and gone.reason.startswith("sentinel failed")
    assert not kept.exists()  # read-only: no layout on the fast path
