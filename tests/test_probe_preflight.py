"""screener.probe.preflight: the preflight script (run for real) and its verdict."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from screener.errors import ConfigError, ProbeError
from screener.policy import ProbePolicy
from screener.probe.fio import PROBE_FILE
from screener.probe.preflight import PREFLIGHT_SCRIPT, Preflight, parse_preflight, preflight_argv

DATA = Path(__file__).parent / "data" / "probe" / "preflight"
LOOP = "/tmp/probecap/mnt"  # where the captures were taken


def text(name: str) -> str:
    return (DATA / name).read_text()


def policy(target: str = LOOP, size_mib: int = 64, min_free_mib: int = 64) -> ProbePolicy:
    return ProbePolicy(target=target, size_mib=size_mib, min_free_mib=min_free_mib)


# ------------------------------------------------------------------------- argv


def test_argv_passes_target_and_fio_as_positional_parameters() -> None:
    argv = preflight_argv("/scratch;rm -rf /", "/opt/fio/bin/fio")
    assert argv == [
        "sh",
        "-c",
        PREFLIGHT_SCRIPT,
        "screener-preflight",
        "/scratch;rm -rf /",
        "/opt/fio/bin/fio",
        ".screener",
        PROBE_FILE,
        ".screener-probe",
    ]


@pytest.mark.parametrize(
    ("target", "fio", "message"),
    [
        ("scratch", "fio", "absolute"),
        ("/s", "", "fio"),
        ("/s", "-V", "fio"),
        ("/s\n", "fio", "absolute"),
    ],
)
def test_bad_arguments_are_config_errors(target: str, fio: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        preflight_argv(target, fio)


# ------------------------------------------------------------------------- parse, real data


def test_ready_node() -> None:
    result = parse_preflight(text("loop_ok.txt"), 0, "node01", policy())
    assert result == Preflight(
        iostat=True,
        free_mib=862408 // 1024,
        direct_io=True,
        probe_file_mib=64,
    )


def test_not_enough_space_says_free_and_needed() -> None:
    with pytest.raises(ProbeError) as info:
        parse_preflight(text("loop_ok.txt"), 0, "node02", policy(size_mib=1024))
    assert str(info.value) == (
        f"node02: not enough free space on {LOOP}: 842 MiB free, 1024 MiB needed "
        "(probe 1024 MiB + headroom 64 MiB - existing probe file 64 MiB)"
    )


def test_existing_probe_file_counts_as_already_reserved() -> None:
    # 842 MiB free + the 64 MiB file fio will reuse: 840 + 64 fits, 843 + 64 does not.
    parse_preflight(text("loop_ok.txt"), 0, "n", policy(size_mib=840, min_free_mib=66))
    with pytest.raises(ProbeError, match="843 MiB needed"):
        parse_preflight(text("loop_ok.txt"), 0, "n", policy(size_mib=843, min_free_mib=64))


@pytest.mark.parametrize(
    ("capture", "target", "message"),
    [
        ("no_fio.txt", LOOP, "fio not found on PATH"),
        (
            "missing_target.txt",
            "/nonexistent/scratch",
            "probe target /nonexistent/scratch does not exist",
        ),
        ("proc_not_writable.txt", "/proc", "probe target /proc is not writable"),
        ("tmpfs.txt", "/dev/shm", "probe target /dev/shm is on tmpfs \\(RAM\\), not a disk"),
    ],
)
def test_fatal_findings(capture: str, target: str, message: str) -> None:
    with pytest.raises(ProbeError, match=f"^node03: {message}$"):
        parse_preflight(text(capture), 0, "node03", policy(target=target))


def test_missing_iostat_is_recorded_not_fatal() -> None:
    out = text("loop_ok.txt").replace("iostat=/usr/bin/iostat", "iostat=")
    assert parse_preflight(out, 0, "n", policy()).iostat is False


def test_no_o_direct_is_fatal_unknown_is_not() -> None:
    out = text("loop_ok.txt")
    with pytest.raises(ProbeError, match="does not support O_DIRECT"):
        parse_preflight(out.replace("target_direct_io=1", "target_direct_io=0"), 0, "n", policy())
    unknown = out.replace("target_direct_io=1", "target_direct_io=unknown")
    assert parse_preflight(unknown, 0, "n", policy()).direct_io is None


@pytest.mark.parametrize(
    ("output", "code", "message"),
    [
        ("", 127, "preflight script failed \\(exit 127\\)"),
        ("sh: 1: Syntax error", 2, "exit 2"),
        (text("loop_ok.txt").replace("done=1\n", ""), 0, "exit 0"),
        (text("loop_ok.txt").replace("df=/dev/loop0", "df=\n#"), 0, "cannot read free space"),
    ],
)
def test_broken_output_is_a_probe_error(output: str, code: int, message: str) -> None:
    with pytest.raises(ProbeError, match=message) as info:
        parse_preflight(output, code, "node04", policy())
    assert str(info.value).startswith("node04: ")


def test_df_line_with_spaces_in_the_filesystem_name() -> None:
    out = text("loop_ok.txt").replace(
        "df=/dev/loop0          996780", "df=//server/share name  996780"
    )
    assert parse_preflight(out, 0, "n", policy()).free_mib == 842


# ------------------------------------------------------------------------- the script, for real


def test_script_on_this_machine(tmp_path: Path) -> None:
    done = subprocess.run(preflight_argv(str(tmp_path)), capture_output=True, text=True, timeout=60)
    result = parse_preflight(done.stdout, done.returncode, "local", policy(str(tmp_path), 1, 1))
    assert "fio_version" not in done.stdout  # fio's JSON names it; --version costs a start
    assert result.iostat is (shutil.which("iostat") is not None)
    free = shutil.disk_usage(tmp_path).free // 2**20
    assert abs(result.free_mib - free) <= max(256, free // 50)  # others write meanwhile
    # the write test cleaned up after itself, in the private directory it claimed
    assert [p.name for p in tmp_path.iterdir()] == [".screener"]
    assert list((tmp_path / ".screener").iterdir()) == []
    assert (tmp_path / ".screener").stat().st_mode & 0o777 == 0o700


def test_script_without_fio_on_this_machine(tmp_path: Path) -> None:
    argv = preflight_argv(str(tmp_path), "fio-that-is-not-installed")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    with pytest.raises(ProbeError, match=r"^local: fio not found on PATH$"):
        parse_preflight(done.stdout, done.returncode, "local", policy(str(tmp_path)))


def test_script_sees_the_existing_probe_file(tmp_path: Path) -> None:
    (tmp_path / ".screener").mkdir(mode=0o700)
    (tmp_path / ".screener" / PROBE_FILE).write_bytes(b"\1" * (3 * 2**20))
    done = subprocess.run(preflight_argv(str(tmp_path)), capture_output=True, text=True)
    assert "probe_file_kib=3072" in done.stdout.splitlines()


def test_a_target_another_user_owns_is_refused_in_one_line(tmp_path: Path) -> None:
    """Its owner could rename screener's directory away and plant a link in its place: the
    probe refuses it (UNKNOWN with the reason), and a root-owned target is fine."""
    target = tmp_path / "theirs"
    target.mkdir()
    os.chown(target, 65534, 65534)
    done = subprocess.run(preflight_argv(str(target)), capture_output=True, text=True, timeout=60)
    with pytest.raises(ProbeError, match=r"^local: probe target .* is owned by uid 65534, not "):
        parse_preflight(done.stdout, done.returncode, "local", policy(str(target), 1, 1))
    link = tmp_path / "link"
    link.symlink_to(tmp_path)  # root's link to root's directory: fine
    done = subprocess.run(preflight_argv(str(link)), capture_output=True, text=True, timeout=60)
    assert parse_preflight(done.stdout, done.returncode, "local", policy(str(link), 1, 1))
