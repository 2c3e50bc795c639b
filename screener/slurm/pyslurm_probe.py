"""May this process use pyslurm? Decided without importing it here first.

``import pyslurm`` initialises libslurm, which *exits the process* (a C-level fatal, rc 1)
when it finds no Slurm config, and retries a missing ``SLURM_CONF`` for 60 s first. A hook
that died that way would turn a fail-open prolog into a held job. So: the config source is
checked the way Slurm's own tools find it, then the import is tried in a child process
(~70 ms), and only then in this one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from screener.errors import TransportError
from screener.process import run_command

DEFAULT_CONF = "/etc/slurm/slurm.conf"
CONFIGLESS_CACHE = "/run/slurm/conf/slurm.conf"  # slurmd's cache in configless mode (22.05+)
# pyslurm releases (major, minor) that tests/test_slurm_contract.py has passed against the
# matching Slurm on a real slurmctld. `auto` uses no other: add one only after that suite
# passes for it. 22.5: the host's 22.05; 24.11: inside the 24.11 root (SCREENER_TEST_SLURM=
# 24.11, the build of deploy/slurmroot/pyslurm.py). PySlurm has no release for 26.05.
VERIFIED = frozenset({(22, 5), (24, 11)})
_CHILD = (
    "import json, pyslurm; "
    "print(json.dumps({'version': pyslurm.__version__, 'api': pyslurm.slurm_api_version()}))"
)


@dataclass(frozen=True)
class PyslurmProbe:
    """What the child saw: pyslurm's version and the Slurm API it was built for, or why not."""

    version: tuple[int, ...] | None
    slurm: tuple[int, ...] | None
    why: str  # the reason when it cannot be used, else ""
    # the Slurm `scontrol -V` on PATH reports (the tools the CLI backend runs), None when it
    # did not answer: a host pyslurm beside a cluster of another version must not be used
    tools: tuple[int, ...] | None = None


def version_numbers(text: str) -> tuple[int, ...]:
    """ "22.5.3" -> (22, 5, 3); "22.05.8" -> (22, 5, 8): compared as numbers, never strings."""
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def shown(version: tuple[int, ...], slurm_style: bool = False) -> str:
    """(22, 5, 8) as Slurm writes it ("22.05.8") or as pyslurm does ("22.5.8")."""
    if slurm_style and len(version) >= 2:
        return ".".join([str(version[0]), f"{version[1]:02d}", *map(str, version[2:])])
    return ".".join(map(str, version))


def conf_source(env: Mapping[str, str]) -> tuple[str | None, str]:
    """(path, why): the slurm.conf libslurm will read, as Slurm's tools look for it."""
    named = env.get("SLURM_CONF")
    if named:
        if Path(named).is_file():
            return named, f"SLURM_CONF={named}"
        return None, f"SLURM_CONF={named} is not a file"
    for path in (DEFAULT_CONF, CONFIGLESS_CACHE):
        if Path(path).is_file():
            return path, path
    return None, f"no Slurm config (SLURM_CONF unset, no {DEFAULT_CONF} nor {CONFIGLESS_CACHE})"


def judge(probe: PyslurmProbe, forced: bool) -> tuple[bool, str]:
    """(use pyslurm?, why) from the child's answer; pure. ``forced`` = backend = pyslurm."""
    if probe.version is None or probe.slurm is None:
        return False, probe.why
    mine, theirs = probe.version[:2], probe.slurm[:2]
    names = f"pyslurm {shown(probe.version)} built for Slurm {shown(probe.slurm, True)}"
    if mine != theirs:
        return False, f"{names}: versions differ"
    if probe.tools is not None and probe.tools[:2] != theirs:
        return False, f"{names} but scontrol -V says {shown(probe.tools, True)}: versions differ"
    if mine in VERIFIED:
        return True, f"{names}: contract-tested"
    if forced:
        return True, f"{names}: forced, not contract-tested (tests/test_slurm_contract.py)"
    return False, f"{names}: not contract-tested, auto keeps the CLI"


def probe_pyslurm(timeout_s: float) -> PyslurmProbe:
    """Try ``import pyslurm`` in a child with this environment; never import it here."""
    if importlib.util.find_spec("pyslurm") is None:
        return PyslurmProbe(None, None, "pyslurm not installed")
    path, why = conf_source(os.environ)
    if path is None:
        return PyslurmProbe(None, None, why)
    try:
        res = run_command([sys.executable, "-c", _CHILD], timeout=timeout_s)
    except TransportError as exc:
        return PyslurmProbe(None, None, f"import pyslurm in a child: {exc.message}")
    if res.exit_status != 0:
        lines = [ln.strip() for ln in res.stderr.splitlines() if ln.strip()]
        last = lines[-1][:160] if lines else f"exit status {res.exit_status}"
        return PyslurmProbe(None, None, f"import pyslurm fails with {why}: {last}")
    try:
        data = json.loads(res.stdout)
        version = version_numbers(str(data["version"]))
        api = tuple(int(v) for v in data["api"])
    except (ValueError, KeyError, TypeError):
        return PyslurmProbe(None, None, "import pyslurm in a child printed no version")
    return PyslurmProbe(version, api, "", tools_version(timeout_s))


def tools_version(timeout_s: float) -> tuple[int, ...] | None:
    """The Slurm of the `scontrol` on PATH ("slurm 24.11.5" -> (24, 11, 5)); None when it
    cannot say (missing, failing): that alone is no reason to refuse pyslurm."""
    try:
        res = run_command(["scontrol", "-V"], timeout=timeout_s)
    except TransportError:
        return None
    found = re.search(r"\b(\d+\.\d+\.\d+)\b", res.stdout)
    return version_numbers(found.group(1)) if res.exit_status == 0 and found else None
