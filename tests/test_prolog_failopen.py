"""The slurmctld hooks fail open on every failure (issue 19, item 4): whatever goes wrong,
the real `screener prolog` exits 0 with one log line, unless a policy that could be read
says ``fail_closed`` (exit 1); `screener epilog` always exits 0.

Each case runs the installed console script (.venv/bin/screener) as slurmctld would, with
a policy whose store is an SQLite file in tmp_path; no cluster is needed: the job is not
selected, fails early, or is screened by the local transport (an unknown node = UNKNOWN).
"""

from __future__ import annotations

import os
import shutil
import socket
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from screener.hooks.log import HookLog
from screener.policy import Policy, PrologPolicy, StorePolicy
from screener.prolog.hook import run_prolog

SCREENER = str(Path(sys.executable).parent / "screener")
SLURM_VARS = (
    "SLURM_JOB_ID",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_NAME",
    "SLURM_JOB_COMMENT",
    "SLURM_JOB_RESTART_COUNT",
    "SLURM_JOB_USER",
    "SLURM_JOB_UID",
)


def hook(
    which: str, config: Path | str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `screener prolog|epilog` with only the hook's environment (slurmctld gives a bare
    one) plus SCREENER_CONFIG."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SCREENER_"))}
    return subprocess.run(
        [SCREENER, which],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, "SCREENER_CONFIG": str(config), **env},
        stdin=subprocess.DEVNULL,
    )


def config(tmp_path: Path, extra: str = "", log: bool = True) -> Path:
    cfg = tmp_path / "screener.toml"
    lines = [
        "[prolog]",
        f'log_file = "{tmp_path}/prolog.log"' if log else "",
        "budget_s = 20",
        "iostat = false",
        "release_requeued = false",
        "[store]",
        f'url = "sqlite:///{tmp_path}/db.sqlite"',
        f'spool_dir = "{tmp_path}/spool"',
        "[transport]",
        'kind = "local"',
        "[probe]",
        "size_mib = 16",
        "runtime_s = 0.3",
        "ramp_s = 0",
        "rand_read = false",
        f'target = "{tmp_path}"',
    ]
    text = "\n".join(lines) + "\n"
    for section_line in extra.strip().splitlines():  # merge "[section] key = v" lines
        section, _, kv = section_line.partition("] ")
        if section + "]\n" in text:
            text = text.replace(section + "]\n", f"{section}]\n{kv}\n", 1)
        else:
            text += f"{section}]\n{kv}\n"
    cfg.write_text(text)
    return cfg


def one_log_line(res: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


JOB = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_COMMENT": "screener=on"}


# ------------------------------------------------------------------ the policy cannot be loaded


def deep_toml(path: Path) -> Path:
    path.write_text("a = " + "[" * 3000 + "]" * 3000 + "\n")
    return path


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda d: d, "is a directory"),
        (lambda d: d / "missing.toml", "does not exist"),
        (lambda d: (d / "x.toml").write_text("[prolog\n") and d / "x.toml", "not valid TOML"),
        (lambda d: deep_toml(d / "deep.toml"), "nested too deeply"),
        (lambda d: (d / "b.toml").write_bytes(b"\xff\xfe\x00") and d / "b.toml", "not UTF-8"),
    ],
)
@pytest.mark.parametrize("which", ["prolog", "epilog"])
def test_a_policy_that_cannot_be_read_fails_open(
    tmp_path: Path, make: object, why: str, which: str
) -> None:
    cfg = make(tmp_path)  # type: ignore[operator]
    res = hook(which, cfg, JOB)
    one_log_line(res, 0, "cannot load the policy", why)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_an_unreadable_policy_fails_open_even_when_it_says_fail_closed(tmp_path: Path) -> None:
    cfg = config(tmp_path, "[prolog] fail_closed = true")
    cfg.chmod(0)
    caps = "-dac_override,-dac_read_search"
    res = subprocess.run(
        ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", "--", SCREENER, "prolog"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SCREENER_CONFIG": str(cfg), **JOB},
    )
    one_log_line(res, 0, "not readable", "fail open")


def test_an_invalid_policy_fails_open_and_logs_to_the_file_it_names(tmp_path: Path) -> None:
    # fail_closed is not honoured from a policy that did not load (it is not "readable").
    cfg = config(tmp_path, "[prolog] fail_closed = true\n[verdict] mad_floor_fraction = 0")
    res = hook("prolog", cfg, JOB)
    line = one_log_line(res, 0, "verdict.mad_floor_fraction", "fail open")
    assert (tmp_path / "prolog.log").read_text().strip() == line


# ------------------------------------------------------------------ the environment


def test_a_bad_restart_count_does_not_requeue_a_job_that_did_not_opt_in(tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_RESTART_COUNT": "abc"}
    cfg = config(tmp_path, "[prolog] fail_closed = true")
    one_log_line(hook("prolog", cfg, env), 0, "SLURM_JOB_RESTART_COUNT", "not screened")
    assert not (tmp_path / "db.sqlite").exists()  # no DB access for jobs not opted in


def test_a_bad_restart_count_of_an_opted_in_job_fails_open_or_closed(tmp_path: Path) -> None:
    env = {**JOB, "SLURM_JOB_RESTART_COUNT": "abc"}
    one_log_line(hook("prolog", config(tmp_path), env), 0, "SLURM_JOB_RESTART_COUNT", "fail open")
    closed = config(tmp_path, "[prolog] fail_closed = true")
    one_log_line(hook("prolog", closed, env), 1, "SLURM_JOB_RESTART_COUNT", "fail closed")


def test_an_internal_error_of_any_type_fails_open_unless_fail_closed(tmp_path: Path) -> None:
    # A bug stands in for any exception screener did not raise on purpose: here the Slurm
    # client passed in has no attributes (AttributeError inside run_prolog).
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n1"}
    # the test's own store (the default is the machine's /var/lib/screener)
    store = StorePolicy(url=f"sqlite:///{tmp_path}/s.db", spool_dir=str(tmp_path / "spool"))
    opened = Policy(prolog=PrologPolicy(comment_token=""), store=store)
    log = HookLog("test")
    assert run_prolog(opened, env, log, client=object()) == 0  # type: ignore[arg-type]
    assert "internal error: AttributeError" in log.lines[-1]
    assert log.lines[-1].endswith("fail open: the job runs, nobody drained")
    closed = Policy(prolog=PrologPolicy(comment_token="", fail_closed=True), store=store)
    assert run_prolog(closed, env, HookLog("test"), client=object()) == 1  # type: ignore[arg-type]


HOSTILE = [
    "",
    " ",
    "abc",
    "-1",
    "1e3",
    "0x10",
    "99999999999999999999999999999",
    "1;touch /tmp/screener-pwned",
    "$(id)",
    "node[1-1000000000]",
    "node[01-",
    "\u00e9\u00e8",
    "\u202e\u0000"[:1],
    "\t\n\r",
    "x" * 100_000,
    os.fsdecode(b"\xff\xfe"),
    "'; DROP TABLE runs;--",
]


VALID = {
    "SLURM_JOB_ID": "41",
    "SLURM_JOB_NODELIST": "n[1-2]",
    "SLURM_JOB_PARTITION": "debug",
    "SLURM_JOB_NAME": "ior",
    "SLURM_JOB_RESTART_COUNT": "0",
    "SLURM_JOB_USER": "alice",
    "SLURM_JOB_UID": "1000",
}
VALUES = st.one_of(
    st.none(),  # the variable is missing
    st.sampled_from(HOSTILE),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40),
    st.text(string.digits + "[],-_+", max_size=30),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    changes=st.dictionaries(st.sampled_from(SLURM_VARS), VALUES, min_size=1), opt_in=st.booleans()
)
def test_prolog_environment_fuzz_always_exits_0(
    tmp_path: Path, changes: dict[str, str | None], opt_in: bool
) -> None:
    # A valid job environment with some variables malformed, missing, huge or hostile.
    env = {**VALID, **{k: v for k, v in changes.items() if v is not None}}
    env = {k: v for k, v in env.items() if changes.get(k, "") is not None}
    if opt_in:  # a selected job: it reaches the store and the (local) screen
        env["SLURM_JOB_COMMENT"] = "screener=on " + env.get("SLURM_JOB_COMMENT", "")
    res = hook("prolog", config(tmp_path, log=False), env)
    assert res.returncode == 0, (env, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip(), "every outcome says something in the log"
    assert not Path("/tmp/screener-pwned").exists()


def test_prolog_fuzz_under_fail_closed_requeues_only_opted_in_jobs(tmp_path: Path) -> None:
    cfg = config(tmp_path, "[prolog] fail_closed = true", log=False)
    for value in HOSTILE:
        for var in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_JOB_RESTART_COUNT"):
            res = hook("prolog", cfg, {"SLURM_JOB_ID": "3", "SLURM_JOB_NODELIST": "n1", var: value})
            assert res.returncode == 0, (var, value, res.stderr)  # not opted in
            assert "Traceback" not in res.stderr


def test_a_selected_job_on_this_host_is_screened_and_may_start(tmp_path: Path) -> None:
    # The success path through the real process: exit 0, the run stored in the SQLite file.
    env = {**JOB, "SLURM_JOB_NODELIST": socket.gethostname()}
    res = hook("prolog", config(tmp_path), env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "may start" in res.stderr and "Traceback" not in res.stderr
    assert (tmp_path / "db.sqlite").exists()


@pytest.mark.parametrize("backend", ["auto", "pyslurm"])
def test_no_slurm_config_never_imports_pyslurm_in_the_hook(tmp_path: Path, backend: str) -> None:
    """slurmctld gives the hook no SLURM_CONF; with no /etc/slurm/slurm.conf either, an
    `import pyslurm` would exit the process (rc 1 = requeue). The hook says why and goes on
    with the CLI (auto), or fails open in one line (backend = pyslurm)."""
    if Path("/etc/slurm/slurm.conf").exists():
        pytest.skip("this machine has /etc/slurm/slurm.conf: the environment is not bare")
    env = {**JOB, "SLURM_JOB_NODELIST": socket.gethostname()}
    cfg = config(tmp_path, f'[slurm] backend = "{backend}"')
    res = hook("prolog", cfg, env, timeout=120)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert "no Slurm config (SLURM_CONF unset" in res.stderr, res.stderr
    if backend == "auto":
        assert "slurm backend cli: no Slurm config" in res.stderr and "may start" in res.stderr
    else:
        assert "slurm.backend = pyslurm but no Slurm config" in res.stderr, res.stderr


# ------------------------------------------------------------------ a broken install


REPO = Path(__file__).resolve().parents[1]


def broken_dependency(tmp_path: Path) -> Path:
    """A site-packages shadow whose `rich` (imported by screener.cli at module level) raises on
    import: a half-upgraded venv."""
    shadow = tmp_path / "shadow" / "rich"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('half-upgraded: no module console')\n")
    return shadow.parent


@pytest.mark.parametrize("which", ["prolog", "epilog"])
def test_a_hook_whose_install_is_broken_fails_open_in_one_line(tmp_path: Path, which: str) -> None:
    env = {**JOB, "PYTHONPATH": str(broken_dependency(tmp_path))}
    res = hook(which, config(tmp_path), env)
    line = one_log_line(res, 0, "cannot import screener", "half-upgraded")
    assert ("fail open" in line) == (which == "prolog")


def test_a_query_command_whose_install_is_broken_exits_1_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(broken_dependency(tmp_path))}
    res = subprocess.run(
        [SCREENER, "nodes"], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL
    )
    one_log_line(res, 1, "cannot import screener (ImportError: half-upgraded")


@pytest.mark.parametrize(("which", "says"), [("prolog", "fail open"), ("epilog", "exit 0")])
@pytest.mark.parametrize("binary", ["missing", "directory", "not-executable"])
def test_the_slurmctld_wrapper_without_a_usable_screener_exits_0(
    tmp_path: Path, which: str, says: str, binary: str
) -> None:
    """jobs/<hook>-slurmctld with SCREENER_BIN pointing nowhere useful: exit 0, one line
    (a shell's `exec` of a missing file would exit 127, and Slurm would requeue every job)."""
    path = tmp_path / "screener"
    if binary == "directory":
        path.mkdir()
    elif binary == "not-executable":
        path.write_text("#!/bin/sh\nexit 1\n")
    env = {"PATH": "/usr/bin:/bin", "SCREENER_BIN": str(path), **JOB}
    res = subprocess.run(
        [str(REPO / "jobs" / f"{which}-slurmctld")],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=30,
    )
    one_log_line(res, 0, f"screener {which}: {path} is not an executable", says)
