"""Secrets and run tags: passwords never shown or stored; remote commands carry the run tag."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from screener.errors import ConfigError, StoreError
from screener.policy import Policy, StorePolicy, redact_url
from screener.store.engine import parse_url
from screener.transport.base import RUN_TAG, remote_command
from screener.transport.cleanup import cleanup_argv
from tests.procs import running

SECRET = "pa:ss/w@rd#1"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://u:pw@db:5432/s", "postgresql+psycopg://u:***@db:5432/s"),
        (f"postgresql://u:{SECRET}@db/s", "postgresql://u:***@db/s"),
        ("postgresql://u:p@ss@127.0.0.1/s", "postgresql://u:***@127.0.0.1/s"),
        ("postgresql://u@db/s", "postgresql://u@db/s"),
        ("sqlite:////var/lib/screener/screener.db", "sqlite:////var/lib/screener/screener.db"),
        ("not a url at all", "not a url at all"),
        (f"garbage://:{SECRET}@", "garbage://:***@"),
    ],
)
def test_redact_url_hides_every_part_of_the_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    for part in ("pw@", "ss/w", "rd#1", "p@ss"):
        assert part not in redact_url(url)


def test_stored_policy_has_no_password() -> None:
    policy = Policy(store=StorePolicy(url=f"postgresql+psycopg://screener:{SECRET}@db/s"))
    stored = policy.to_dict()
    assert stored["store"]["url"] == "postgresql+psycopg://screener:***@db/s"
    assert SECRET not in repr(stored)
    assert policy.store.url.endswith("@db/s")  # the policy itself still connects


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://u:se@cret@127.0.0.1/db",
        f"postgresql+psycopg://u:{SECRET}@127.0.0.1/db",
        "mysql://u:secretpw@db/x",
        "postgresql+psycopg://u:secretpw@db:notaport/x",
    ],
)
def test_url_errors_never_show_the_password(url: str) -> None:
    with pytest.raises(StoreError) as err:
        parse_url(url)
    for part in ("cret", "secretpw", "ss/w", "rd#1"):
        assert part not in str(err.value)


def test_remote_commands_carry_the_run_tag_as_data() -> None:
    token = RUN_TAG.set("20261122-abcdef")
    try:
        command = remote_command(["fio", "--name=x"], 10)
    finally:
        RUN_TAG.reset(token)
    assert shlex.split(command)[:6] == [
        "env",
        "SCREENER_RUN=20261122-abcdef",
        "timeout",
        "-k",
        "5",
        "10",
    ]
    assert remote_command(["fio"], 10).startswith("timeout ")  # no tag outside a run


@pytest.mark.parametrize("tag", ["", "a b", "x;rm -rf /", "$(id)", "a" * 65, "tag\n"])
def test_bad_run_tags_are_refused(tag: str) -> None:
    with pytest.raises(ConfigError):
        cleanup_argv(tag)
    token = RUN_TAG.set(tag)
    try:
        if tag:
            with pytest.raises(ConfigError):
                remote_command(["true"], 1)
    finally:
        RUN_TAG.reset(token)


def test_cleanup_passes_the_tag_as_a_positional_parameter() -> None:
    argv = cleanup_argv("20261122-abcdef")
    assert argv[:2] == ["sh", "-c"] and argv[-2:] == ["screener-cleanup", "20261122-abcdef"]
    assert "20261122" not in argv[2]  # the script text never contains the tag
    assert "grep -lxzF" in argv[2]  # exact whole-entry match: never a prefix or a name


def test_cleanup_also_kills_what_a_tagged_process_forks_after_the_first_scan(
    tmp_path: Path,
) -> None:
    """The real cleanup script, run here (the nodes run the same text over SSH): a tagged
    process that forks when it gets the TERM (as fio may start its job process around the
    first scan) leaves no tagged child behind. Before the second scan, one fio survived a
    SIGTERM'd screen in CI (2026-11-26)."""
    tag = "20261126-cleanup"
    child_pid, ready = tmp_path / "child", tmp_path / "ready"
    script = (
        'trap \'sleep 300 & echo $! > "$1"; wait\' TERM; : > "$2"; while :; do sleep 0.05; done'
    )
    parent = subprocess.Popen(
        ["sh", "-c", script, "tagged", str(child_pid), str(ready)],
        env={**os.environ, "SCREENER_RUN": tag},
    )
    try:
        deadline = time.monotonic() + 10
        while not ready.exists():  # the trap is set before the file appears
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.01)
        env = {k: v for k, v in os.environ.items() if k != "SCREENER_RUN"}
        done = subprocess.run(
            cleanup_argv(tag), env=env, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        assert parent.wait(timeout=10) == -signal.SIGKILL
        child = int(child_pid.read_text())
        assert f" {child}" in done.stdout, done.stdout
        deadline = time.monotonic() + 10
        while running(child):  # KILLed: gone once init reaps it
            assert time.monotonic() < deadline, f"tagged child {child} survived the cleanup"
            time.sleep(0.01)
    finally:
        parent.kill()
        parent.wait()
