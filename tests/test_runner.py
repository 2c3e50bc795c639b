"""run_command on real processes: output, exit codes, and whole-tree kill on timeout."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from screener import process
from screener.errors import CommandTimeout, ConfigError, TransportError
from screener.process import run_command
from tests.procs import running as _running


def _pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()]


def test_stdout_stderr_and_exit_status() -> None:
    result = run_command(["sh", "-c", "echo out; echo err >&2; exit 7"], timeout=10)
    assert (result.exit_status, result.stdout, result.stderr) == (7, "out\n", "err\n")
    assert result.argv == ("sh", "-c", "echo out; echo err >&2; exit 7")
    assert result.host == "localhost"
    assert 0 <= result.duration_s < 10


def test_zero_exit_and_host_label() -> None:
    result = run_command(["true"], timeout=10, host="node07")
    assert result.exit_status == 0 and result.host == "node07"


def test_killed_by_signal_reports_128_plus_n() -> None:
    assert run_command(["sh", "-c", "kill -9 $$"], timeout=10).exit_status == 137


def test_input_and_env_overlay() -> None:
    assert run_command(["cat"], timeout=10, input="hello\n").stdout == "hello\n"
    result = run_command(
        ["sh", "-c", 'echo "$SCREENER_X:$HOME"'], timeout=10, env={"SCREENER_X": "1"}
    )
    assert result.stdout == f"1:{os.environ['HOME']}\n"


def test_stdin_is_not_inherited() -> None:
    # With no input the child reads EOF at once instead of waiting on our terminal.
    assert run_command(["cat"], timeout=10).stdout == ""


def test_undecodable_output_is_replaced_not_raised() -> None:
    assert run_command(["printf", "a\\377b"], timeout=10).stdout == "a\ufffdb"


def test_missing_executable_is_a_one_line_failed_error() -> None:
    with pytest.raises(TransportError) as info:
        run_command(["screener-no-such-binary", "x"], timeout=10, host="node03")
    assert info.value.kind == "failed"
    assert str(info.value) == "node03: failed: screener-no-such-binary: command not found"


def test_not_executable_is_failed(tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(TransportError, match="Permission denied") as info:
        run_command([str(script)], timeout=10)
    assert info.value.kind == "failed"


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        run_command([], timeout=10)
    with pytest.raises(ConfigError):
        run_command(["true"], timeout=0)


def test_timeout_kills_the_whole_process_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    script = 'echo $$ > "$1"; sleep 100 & echo $! >> "$1"; sleep 100 & echo $! >> "$1"; wait'
    started = time.monotonic()
    with pytest.raises(CommandTimeout) as info:
        run_command(["sh", "-c", script, "sh", str(pidfile)], timeout=0.5, host="node01")
    elapsed = time.monotonic() - started
    assert info.value.kind == "timeout" and info.value.host == "node01"
    assert str(info.value) == "node01: timeout: sh did not finish within 0.5 s"
    pids = _pids(pidfile)
    assert len(pids) == 3
    assert [pid for pid in pids if _running(pid)] == []
    assert elapsed < 0.5 + process.KILL_GRACE_S


def test_children_ignoring_sigterm_are_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process, "KILL_GRACE_S", 0.3)
    pidfile = tmp_path / "pids"
    script = (
        'trap "" TERM; echo $$ > "$1"; sh -c "trap \\"\\" TERM; sleep 100" & echo $! >> "$1"; wait'
    )
    started = time.monotonic()
    with pytest.raises(CommandTimeout):
        run_command(["sh", "-c", script, "sh", str(pidfile)], timeout=0.5)
    assert time.monotonic() - started < 5
    assert [pid for pid in _pids(pidfile) if _running(pid)] == []


def test_escaped_grandchild_holding_the_pipe_does_not_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process, "KILL_GRACE_S", 0.2)
    monkeypatch.setattr(process, "REAP_WAIT_S", 0.2)
    pidfile = tmp_path / "escaped"
    # setsid puts the sleeper in a new session: killpg cannot reach it, and it keeps stdout.
    script = 'setsid sh -c \'echo $$ > "$1"; exec sleep 30\' sh "$1" & sleep 30'
    started = time.monotonic()
    try:
        with pytest.raises(CommandTimeout):
            run_command(["sh", "-c", script, "sh", str(pidfile)], timeout=0.5)
        assert time.monotonic() - started < 3
    finally:
        for pid in _pids(pidfile) if pidfile.exists() else []:
            os.kill(pid, 9)
