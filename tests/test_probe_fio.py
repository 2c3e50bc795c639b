"""screener.probe.fio: the fio command line and the JSON(+) parser, on real captured output."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from screener.errors import ConfigError, ProbeError
from screener.policy import ProbePolicy
from screener.probe.fio import (
    JOBS,
    PROBE_FILE,
    cleanup_argv,
    fio_argv,
    parse_fio,
    policy_jobs,
    probe_duration_s,
    recipe_fingerprint,
)
from screener.probe_data import NodeProbe

DATA = Path(__file__).parent / "data" / "probe" / "fio"


def text(name: str) -> str:
    return (DATA / name).read_text()


def raw_jobs(name: str) -> list[dict[str, Any]]:
    """The jobs of a capture, decoded independently of the parser under test."""
    t = text(name)
    doc, _ = json.JSONDecoder().raw_decode(t, t.index("\n{") + 1 if not t.startswith("{") else 0)
    jobs: list[dict[str, Any]] = doc["jobs"]
    return jobs


def bins_fraction(job: dict[str, Any], side: str) -> float:
    """Share of I/Os in json+ bins at or above 100 ms, counted straight from the raw JSON."""
    bins: dict[str, int] = job[side]["clat_ns"]["bins"]
    total = sum(bins.values())
    return sum(n for k, n in bins.items() if int(k) >= 100_000_000) / total


# ------------------------------------------------------------------------- argv


def options_of(argv: list[str], job: str) -> list[str]:
    """The options following --name=job up to the next job."""
    start = argv.index(f"--name={job}")
    rest = argv[start + 1 :]
    end = next((i for i, a in enumerate(rest) if a.startswith("--name=")), len(rest))
    return rest[:end]


def test_argv_runs_three_jobs_in_order_separated_by_stonewall() -> None:
    policy = ProbePolicy(target="/scratch", size_mib=1024, iodepth=32, ramp_s=1, runtime_s=3)
    argv = fio_argv(policy)
    assert argv[:5] == ["sh", "-c", argv[2], "screener-probe", "/scratch/.screener"]
    assert argv[5] == "fio"  # exec'd in the private directory it claimed
    names = [a.removeprefix("--name=") for a in argv if a.startswith("--name=")]
    assert names == list(JOBS)
    assert "--stonewall" not in options_of(argv, "seq_write")
    assert "--stonewall" in options_of(argv, "seq_read")
    assert "--stonewall" in options_of(argv, "rand_read")
    globals_ = argv[6 : argv.index("--name=seq_write")]
    for opt in (
        "--output-format=json+",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=32",
        "--time_based",
        "--ramp_time=1000ms",
        "--runtime=3000ms",
        f"--filename={PROBE_FILE}",  # relative: in the private directory
        f"--size={1024 * 1024 * 1024}",
    ):
        assert opt in globals_
    assert options_of(argv, "seq_write") == ["--rw=write", "--bs=1M", "--overwrite=1"]
    assert options_of(argv, "seq_read")[1:] == ["--rw=read", "--bs=1M"]
    assert options_of(argv, "rand_read")[1:] == ["--rw=randread", "--bs=4k"]


def test_confirmation_reprobe_reads_only_and_keeps_the_file() -> None:
    argv = fio_argv(ProbePolicy(ioengine="io_uring", runtime_s=2.5), ["seq_read", "rand_read"])
    assert [a for a in argv if a.startswith("--name=")] == ["--name=seq_read", "--name=rand_read"]
    assert "--overwrite=1" not in argv
    assert "--rw=write" not in argv
    assert "--ioengine=io_uring" in argv
    assert "--runtime=2500ms" in argv
    assert options_of(argv, "seq_read")[0] == "--rw=read"  # first job: no stonewall


def test_no_part_of_the_target_reaches_fio_and_custom_fio_path_used() -> None:
    argv = fio_argv(ProbePolicy(target="/mnt/a:b/"), fio="/opt/fio/bin/fio")
    assert argv[4:6] == ["/mnt/a:b/.screener", "/opt/fio/bin/fio"]  # sh's $1, then fio
    assert f"--filename={PROBE_FILE}" in argv
    assert not any("a:b" in a for a in argv[5:])  # fio splits file names at ':'


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        ([], "non-empty"),
        ("seq_read", "non-empty"),
        (["seq_read", "seq_read"], "repeat"),
        (["seq_write", "randwrite"], "unknown fio job 'randwrite'"),
    ],
)
def test_bad_job_lists_are_config_errors(jobs: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        fio_argv(ProbePolicy(), jobs)


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (ProbePolicy(ioengine="psync"), "ioengine"),
        (ProbePolicy(seq_bs="1M --exec_prerun=x"), "seq_bs"),
        (ProbePolicy(rand_bs=""), "rand_bs"),
        (ProbePolicy(target="scratch"), "absolute"),
        (ProbePolicy(target="/scr\natch"), "absolute"),
        (ProbePolicy(iodepth=0), "positive"),
    ],
)
def test_bad_policies_are_config_errors(policy: ProbePolicy, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        fio_argv(policy)


def test_probe_duration_sums_ramp_and_runtime_per_job() -> None:
    policy = ProbePolicy(ramp_s=1.0, runtime_s=3.0)
    assert probe_duration_s(policy) == 12.0
    assert probe_duration_s(policy, ["seq_read", "rand_read"]) == 8.0
    assert probe_duration_s(ProbePolicy(ramp_s=0.5, runtime_s=2), ["seq_read"]) == 2.5


def test_policy_jobs_drops_rand_read_and_seq_write_when_disabled() -> None:
    assert policy_jobs(ProbePolicy()) == JOBS
    assert policy_jobs(ProbePolicy(rand_read=False)) == ("seq_write", "seq_read")
    assert policy_jobs(ProbePolicy(seq_write=False)) == ("seq_read", "rand_read")
    assert policy_jobs(ProbePolicy(seq_write=False, rand_read=False)) == ("seq_read",)
    # a read-only run never writes: no write job and no --overwrite (the layout is apart)
    argv = fio_argv(ProbePolicy(seq_write=False), policy_jobs(ProbePolicy(seq_write=False)))
    assert "--rw=write" not in argv and "--overwrite=1" not in argv


# ------------------------------------------------------------------------- parse, real data


def test_parse_healthy_run() -> None:
    run = parse_fio(text("fio-3.33_loop_ok.json"), "node01")
    raw = raw_jobs("fio-3.33_loop_ok.json")
    assert run.fio_version == "fio-3.33"
    assert [(j.name, j.rw) for j in run.jobs] == [
        ("seq_write", "write"),
        ("seq_read", "read"),
        ("rand_read", "randread"),
    ]
    for job, r in zip(run.jobs, raw, strict=True):
        side = r["write"] if job.rw == "write" else r["read"]
        assert job.bw_bytes == side["bw_bytes"]
        assert job.iops == side["iops"]
        assert job.total_ios == side["total_ios"]
        assert job.runtime_ms == side["runtime"]
        assert job.lat_p99_ns == side["clat_ns"]["percentile"]["99.000000"]
        assert job.lat_p999_ns == side["clat_ns"]["percentile"]["99.900000"]
        assert job.lat_mean_ns == side["clat_ns"]["mean"]
        assert job.slow_fraction == 0.0
        assert job.error == 0
    assert run.job("seq_read") is run.jobs[1]
    assert run.jobs[0].mb_s > 1000  # the loop file lives in the host page cache


def test_parse_slow_reads_with_normal_writes() -> None:
    run = parse_fio(text("fio-3.33_loop_slow_read.json"), "node02")
    raw = raw_jobs("fio-3.33_loop_slow_read.json")
    write, read, rand = run.jobs
    assert read.slow_fraction == bins_fraction(raw[1], "read") == 1.0
    assert rand.slow_fraction == bins_fraction(raw[2], "read") == 1.0
    assert write.slow_fraction == 0.0
    assert read.lat_p50_ns >= 100e6
    probe = NodeProbe(node="node02", seq_write=write, seq_read=read, rand_read=rand)
    assert probe.write_read_ratio is not None and probe.write_read_ratio > 100


def test_parse_reprobe_with_some_slow_reads() -> None:
    run = parse_fio(text("fio-3.33_loop_reprobe_partial_slow.json"), "node03")
    raw = raw_jobs("fio-3.33_loop_reprobe_partial_slow.json")
    assert [j.name for j in run.jobs] == ["seq_read", "rand_read"]
    read = run.jobs[0]
    expected = bins_fraction(raw[0], "read")
    assert 0.05 < expected < 0.95
    assert read.slow_fraction == pytest.approx(expected)
    assert run.job("seq_write") is None


def test_parse_skips_note_line_and_estimates_slow_share_without_bins() -> None:
    t = text("fio-3.33_psync_note_plain_json.txt")
    assert t.startswith("note: both iodepth")
    run = parse_fio(t, "node04")
    (job,) = run.jobs
    assert job.name == "seq_read" and job.rw == "read"
    assert job.total_ios > 0 and job.slow_fraction == 0.0
    # Same document with a slow tail: p99 >= 100 ms means at least 1% of I/Os were slow.
    doc = json.loads(t[t.index("{") :])
    pct = doc["jobs"][0]["read"]["clat_ns"]["percentile"]
    for key in ("99.000000", "99.900000", "99.950000", "99.990000"):
        pct[key] = 250_000_000
    slow = parse_fio(json.dumps(doc), "node04").jobs[0]
    assert slow.slow_fraction == pytest.approx(0.01)
    assert slow.lat_p99_ns == 250e6


def test_parse_fio2_layout_matches_the_fio3_capture_it_was_made_from() -> None:
    new = parse_fio(text("fio-3.33_loop_slow_read.json"), "n")
    old_text = text("fio-2.x_from_slow_read.json")
    assert old_text.splitlines()[0].startswith("fio: ")
    assert old_text.splitlines()[-1].startswith("fio: ")
    old = parse_fio(old_text, "n")
    assert old.fio_version == "fio-2.21"
    for a, b in zip(old.jobs, new.jobs, strict=True):
        assert (a.name, a.rw, a.total_ios, a.runtime_ms) == (
            b.name,
            b.rw,
            b.total_ios,
            b.runtime_ms,
        )
        assert abs(a.bw_bytes - b.bw_bytes) < 1024  # bw is whole KiB/s in fio 2
        assert a.lat_p99_ns == pytest.approx(b.lat_p99_ns, abs=1000)  # whole usec
        assert a.lat_mean_ns == pytest.approx(b.lat_mean_ns)
        assert a.slow_fraction == b.slow_fraction


def test_bins_keyed_by_usec_value_are_read_as_usec() -> None:
    doc = json.loads(text("fio-3.33_loop_reprobe_partial_slow.json"))
    read = doc["jobs"][0]["read"]
    clat = read.pop("clat_ns")
    read["clat"] = {
        "mean": clat["mean"] / 1000,
        "bins": {str(int(k) // 1000): n for k, n in clat["bins"].items()},
    }
    job = parse_fio(json.dumps(doc), "n").jobs[0]
    reference = parse_fio(text("fio-3.33_loop_reprobe_partial_slow.json"), "n").jobs[0]
    assert job.slow_fraction == pytest.approx(reference.slow_fraction)
    assert job.lat_p50_ns == pytest.approx(reference.lat_p50_ns, rel=0.02)  # from the bins


def test_job_with_no_completed_io_counts_as_all_slow() -> None:
    doc = json.loads(text("fio-3.33_loop_slow_read.json"))
    read = doc["jobs"][1]["read"]
    read.update(total_ios=0, iops=0.0, bw_bytes=0, runtime=4000)
    read["clat_ns"] = {"min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "N": 0}
    job = parse_fio(json.dumps(doc), "n").jobs[1]
    assert job.slow_fraction == 1.0
    assert job.lat_p99_ns == 4000e6  # lower bound: in flight for the whole run
    assert job.bw_bytes == 0.0


# ------------------------------------------------------------------------- parse, errors


def test_job_that_never_ran_is_a_probe_error() -> None:
    with pytest.raises(ProbeError, match=r"^node05: fio job seq_write did not run"):
        parse_fio(text("fio-3.33_dir_not_created.txt"), "node05")


def test_enospc_layout_failure_names_the_error() -> None:
    with pytest.raises(ProbeError, match=r"did not run \(error 28: No space left on device\)"):
        parse_fio(text("fio-3.33_enospc.txt"), "node06")


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", "no JSON document"),
        ("fio: pid=0, err=2/file:filesetup.c:83, error=No such file\n", "no JSON document"),
        ("{}", "no jobs"),
        ('{"fio version": "fio-3.33", "jobs": []}', "no jobs"),
        ('{"fio version": "fio-3.33", "jobs": [{"error": 0}]}', "without a jobname"),
    ],
)
def test_garbage_is_a_probe_error(output: str, message: str) -> None:
    with pytest.raises(ProbeError, match=message) as info:
        parse_fio(output, "node07")
    assert str(info.value).startswith("node07: ")


def test_truncated_document_is_a_probe_error() -> None:
    t = text("fio-3.33_loop_ok.json")
    with pytest.raises(ProbeError, match=r"^node08: fio output is not valid JSON \(truncated\?\)"):
        parse_fio(t[: len(t) // 2], "node08")


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("read", "runtime"), None, "lacks 'runtime'"),
        (("read", "iops"), "fast", "iops is not a number"),
        (("read", "bw_bytes"), None, None),  # falls back to bw (KiB/s)
        (("read", "clat_ns"), None, "no completion latency"),
    ],
)
def test_missing_or_bad_fields(path: tuple[str, str], value: Any, message: str | None) -> None:
    doc = json.loads(text("fio-3.33_loop_ok.json"))
    side = doc["jobs"][1][path[0]]
    if value is None:
        del side[path[1]]
    else:
        side[path[1]] = value
    if message is None:
        job = parse_fio(json.dumps(doc), "n").jobs[1]
        assert job.bw_bytes == side["bw"] * 1024
        return
    with pytest.raises(ProbeError, match=message):
        parse_fio(json.dumps(doc), "n")


def test_every_prefix_of_real_output_parses_or_raises_probe_error() -> None:
    for name in ("fio-3.33_loop_ok.json", "fio-2.x_from_slow_read.json"):
        t = text(name)
        for cut in range(0, len(t), 211):
            with contextlib.suppress(ProbeError):
                parse_fio(t[:cut], "n")


# ------------------------------------------------------------------------- real fio


def _supports_o_direct(directory: Path) -> bool:
    probe = directory / ".odirect"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    probe.unlink()
    return True


def test_real_fio_run_of_the_built_argv(tmp_path: Path) -> None:
    if not _supports_o_direct(tmp_path):
        pytest.skip("tmp_path filesystem has no O_DIRECT")
    policy = ProbePolicy(target=str(tmp_path), size_mib=16, runtime_s=0.3, ramp_s=0, iodepth=4)
    done = subprocess.run(fio_argv(policy), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    run = parse_fio(done.stdout, "local")
    assert [j.name for j in run.jobs] == list(JOBS)
    assert all(j.total_ios > 0 and j.bw_bytes > 0 and j.error == 0 for j in run.jobs)
    # seq_write laid the region out in full before anything read it.
    probe = tmp_path / ".screener" / PROBE_FILE
    assert probe.stat().st_size == 16 * 1024 * 1024 and probe.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / ".screener").stat().st_mode & 0o777 == 0o700
    again = subprocess.run(
        fio_argv(policy, ["seq_read"]), capture_output=True, text=True, timeout=60
    )
    assert [j.name for j in parse_fio(again.stdout, "local").jobs] == ["seq_read"]
    # [prolog] seq_iodepth: the sequential jobs' own queue depth, the random read keeps its
    shallow = replace(policy, seq_iodepth=2)
    done = subprocess.run(fio_argv(shallow), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    depths = {j.name: j.iodepth for j in parse_fio(done.stdout, "local").jobs}
    assert depths == {"seq_write": 2, "seq_read": 2, "rand_read": 4}


def test_a_sequential_queue_depth_is_a_recipe_of_its_own_only_when_it_differs() -> None:
    base = ProbePolicy(iodepth=32)
    assert recipe_fingerprint(replace(base, seq_iodepth=32)) == recipe_fingerprint(base)
    assert recipe_fingerprint(replace(base, seq_iodepth=8)) != recipe_fingerprint(base)
    argv = fio_argv(replace(base, seq_iodepth=8), ["seq_read", "rand_read"])
    assert argv.count("--iodepth=8") == 1 and argv.count("--iodepth=32") == 1
    assert argv.index("--iodepth=8") < argv.index("--name=rand_read")


def test_job_that_failed_without_any_io_is_a_probe_error() -> None:
    doc = json.loads(text("fio-3.33_loop_slow_read.json"))
    doc["jobs"][1]["error"] = 5
    doc["jobs"][1]["read"].update(total_ios=0, runtime=800)
    with pytest.raises(ProbeError, match=r"seq_read failed \(error 5: Input/output error\)"):
        parse_fio(json.dumps(doc), "n")
    doc["jobs"][1]["error"] = 2**31  # no C int holds it (fuzzing found it): still a ProbeError
    with pytest.raises(ProbeError, match=r"seq_read failed \(error 2147483648: not an errno\)"):
        parse_fio(json.dumps(doc), "n")


def test_cleanup_removes_only_the_probe_file() -> None:
    argv = cleanup_argv(ProbePolicy(target="/scratch/"))
    assert argv[4:] == ["/scratch/.screener", "rm", "-f", "--", PROBE_FILE]


@pytest.mark.parametrize("count", [-77.0, float("inf"), float("nan")], ids=repr)
def test_damaged_bin_count_is_a_probe_error_not_a_figure(count: float) -> None:
    """A negative count once made slow_fraction 1.03 (found by test_fuzz_parsers); inf made
    int() raise OverflowError out of the parser."""
    doc = json.loads(text("fio-3.33_loop_reprobe_partial_slow.json"))
    bins = doc["jobs"][0]["read"]["clat_ns"]["bins"]
    bins[next(iter(bins))] = count
    with pytest.raises(ProbeError, match="bin count"):
        parse_fio(json.dumps(doc), "n")
