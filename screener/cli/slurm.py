"""Slurm commands: `prolog`, `epilog` (the slurmctld hooks), `resume` (admin), `release`
(make a requeued job eligible), `doctor` (which Slurm backend and why), `sweep`, `probe`."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import time
from datetime import UTC, datetime

from rich.console import Console

from screener.cli.common import Subparsers
from screener.errors import ConfigError, SlurmError
from screener.hook_server.wire import FALLBACK_ENV
from screener.hooks.log import HookLog, describe_error
from screener.policy import Policy, hook_log_file, load_policy, shorten

SWEEP_SCRIPT = "/opt/screener/jobs/sweep.sbatch"
RELEASE_WAIT_S = 90.0  # how long `release` waits for Slurm to requeue the job
# The helper starts while the prolog is still running: it polls often at first (Slurm
# requeues the job within a few hundred ms of the hook's exit), then backs off.
RELEASE_POLL_S = (0.05, 1.0)  # first interval, longest


def register(sub: Subparsers) -> None:
    p = sub.add_parser("prolog", help="PrologSlurmctld hook: screen an opted-in job's nodes")
    p.add_argument("--dry-run", action="store_true", help="decide and record, never drain")
    p.set_defaults(handler=prolog)
    e = sub.add_parser("epilog", help="EpilogSlurmctld hook: collect in-job iostat")
    e.set_defaults(handler=epilog)
    r = sub.add_parser("resume", help="resume nodes screener drained (reason unchanged only)")
    r.add_argument("nodeset", help="nodes to resume, e.g. 'node[01-03]'")
    r.add_argument("--dry-run", action="store_true", help="say what would be done")
    r.set_defaults(handler=resume)
    rel = sub.add_parser("release", help="make a job screener requeued eligible now")
    rel.add_argument("job_id")
    rel.set_defaults(handler=release)
    sw = sub.add_parser("sweep", help="nightly sweep (inside jobs/sweep.sbatch, or --submit it)")
    sw.add_argument(
        "--submit",
        action="store_true",
        help="sbatch the sweep over idle nodes; probe screener-drained ones from here (SSH)",
    )
    sw.add_argument("--script", help=f"with --submit: sweep batch script (default {SWEEP_SCRIPT})")
    sw.add_argument("--wait", action="store_true", help="with --submit: wait for the sweep")
    sw.add_argument("--deep", action="store_true", help="SNIA-style steady-state rounds")
    sw.add_argument(
        "--rolling",
        action="store_true",
        help="only the idle nodes due ([sweep] rolling_nodes, rolling_age_s), low priority",
    )
    sw.add_argument(
        "--dry-run", action="store_true", help="never drain nor resume (records would_*)"
    )
    # Also after `sweep`: jobs/sweep.sbatch hands the submitter's --config on this way.
    sw.add_argument(
        "--config", default=argparse.SUPPRESS, help="policy TOML (as screener --config)"
    )
    sw.set_defaults(handler=sweep)
    pr = sub.add_parser("probe", help="probe this node, print one JSON line (sweep step)")
    pr.add_argument("--local", action="store_true", required=True, help="this node (required)")
    pr.add_argument("--json", action="store_true", required=True, help="JSON output (required)")
    pr.add_argument("--deep", action="store_true", help="rounds until steady state or the cap")
    pr.add_argument(
        "--remove-file", action="store_true", help="only remove the probe file (keep_file=false)"
    )
    pr.add_argument(
        "--triage",
        type=_reads,
        metavar="N",
        help="N short reads of the prolog's triage recipe, one after another (sweep learning)",
    )
    pr.set_defaults(handler=probe)
    d = sub.add_parser("doctor", help="which Slurm backend is used and why; config in force")
    d.add_argument("--json", action="store_true")
    d.set_defaults(handler=doctor)


def _hook_env() -> dict[str, str]:
    return dict(os.environ)


def _policy(args: argparse.Namespace) -> Policy:
    """The policy in force, with --dry-run applied to [slurm] dry_run."""
    policy = load_policy(args.config)
    if getattr(args, "dry_run", False):
        policy = dataclasses.replace(policy, slurm=dataclasses.replace(policy.slurm, dry_run=True))
    return policy


def prolog(args: argparse.Namespace, console: Console) -> int:
    """PrologSlurmctld: exit 1 only to requeue a job whose nodes were drained, or when a
    policy that could be read says ``fail_closed``; any other failure is exit 0 (fail open)
    with one log line, on stderr and in the log file when it is known."""
    try:
        policy = _policy(args)
    except Exception as exc:  # unreadable, invalid, too deep (RecursionError), MemoryError
        return _unloaded("screener prolog", args, exc, "fail open: the job runs, nobody drained")
    log = HookLog("screener prolog", policy.prolog.log_file)
    _hookd_fallback(log)
    try:
        from screener.prolog.hook import run_prolog

        config = config_in_force(args.config)
        if config:  # the `screener release` helper it may start reads this very file
            os.environ["SCREENER_CONFIG"] = config
        return run_prolog(policy, _hook_env(), log)
    except Exception as exc:  # run_prolog fails open itself; this is for its import
        from screener.prolog.hook import _fail

        return _fail(policy, log, f"internal error: {describe_error(exc)}")


def epilog(args: argparse.Namespace, console: Console) -> int:
    """EpilogSlurmctld: always exit 0, every failure one log line."""
    try:
        policy = load_policy(args.config)
    except Exception as exc:
        return _unloaded("screener epilog", args, exc, "nothing collected")
    log = HookLog("screener epilog", policy.prolog.log_file)
    _hookd_fallback(log)
    try:
        from screener.epilog.hook import run_epilog

        run_epilog(policy, _hook_env(), log)
    except Exception as exc:
        with contextlib.suppress(Exception):
            log(f"internal error: {describe_error(exc)}; the epilog exits 0")
    return 0


def _hookd_fallback(log: HookLog) -> None:
    """One line when a hookd socket was there but the hook runs in this process."""
    why = os.environ.pop(FALLBACK_ENV, None)
    if why is not None:
        log(f"screener hookd not used ({shorten(why, 200)}): running in this process")


def _unloaded(prefix: str, args: argparse.Namespace, exc: Exception, outcome: str) -> int:
    """A hook whose policy cannot be loaded: one line (stderr, and the log file if the
    config still names one), exit 0. ``fail_closed`` needs a policy that could be read."""
    with contextlib.suppress(Exception):
        log = HookLog(prefix, hook_log_file(args.config))
        log(f"cannot load the policy: {describe_error(exc)}; {outcome}")
    return 0


def resume(args: argparse.Namespace, console: Console) -> int:
    from screener import app
    from screener.hooks.drains import resume_node
    from screener.hooks.log import HookLog
    from screener.hostlist import expand_nodeset
    from screener.slurm import select_client
    from screener.store.slurm_records import SlurmRecords

    policy = load_policy(args.config)
    names = expand_nodeset(args.nodeset)
    client, why = select_client(policy.slurm)
    log = HookLog("screener resume", policy.prolog.log_file)
    log(f"slurm backend {why}")
    found = {n.name: n for n in client.nodes(names)}
    missing = [n for n in names if n not in found]
    if missing:
        raise SlurmError(f"Slurm does not know {', '.join(missing)}")
    with app.open_for_actions(policy) as store:  # resume records its events
        records = SlurmRecords(store)
        done = [
            resume_node(
                found[n],
                client,
                records,
                datetime.now(UTC),
                None,
                "admin: screener resume",
                args.dry_run or policy.slurm.dry_run,
                log,
            )
            for n in names
        ]
    return 0 if all(done) or args.dry_run else 1


def config_in_force(path: str | None) -> str | None:
    """The policy file load_policy reads (same rule): --config, $SCREENER_CONFIG, else the
    default path if it exists; None for built-in defaults. Absolute: other processes
    (the sweep job, its Slurm step) get it explicitly, from another directory."""
    from screener.policy import DEFAULT_CONFIG_PATH

    chosen = path or os.environ.get("SCREENER_CONFIG") or None
    if chosen is None and DEFAULT_CONFIG_PATH.exists():
        chosen = str(DEFAULT_CONFIG_PATH)
    return os.path.abspath(chosen) if chosen else None


def sweep(args: argparse.Namespace, console: Console) -> int:
    from screener.hooks.log import HookLog
    from screener.sweep.job import SweepMode, run_sweep, submit_sweep

    if not args.submit and (args.wait or args.script):
        raise ConfigError("--wait and --script go with --submit (inside the job: neither)")
    policy = _policy(args)
    mode = SweepMode(
        dry_run=policy.slurm.dry_run,
        deep=args.deep,
        config=config_in_force(args.config),
        rolling=args.rolling,
    )
    log = HookLog("screener sweep", policy.prolog.log_file)
    if args.submit:
        return submit_sweep(policy, args.script or SWEEP_SCRIPT, args.wait, mode, log)
    return run_sweep(policy, _hook_env(), log, mode)


def probe(args: argparse.Namespace, console: Console) -> int:
    from screener.run.local import probe_here, remove_file_here

    policy = load_policy(args.config)
    if args.remove_file:
        remove_file_here(policy)
        return 0
    print(probe_here(policy, deep=args.deep, triage=args.triage or 0), flush=True)
    return 0


def _reads(text: str) -> int:
    """--triage N: a count of short reads, 1..10 (sweep.triage_reads' range)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= n <= 10:
        raise argparse.ArgumentTypeError(f"must be 1..10, not {n}")
    return n


def release(args: argparse.Namespace, console: Console) -> int:
    """Wait until Slurm has requeued the job (PENDING), then set its StartTime to now."""
    from screener.slurm import select_client

    policy = load_policy(args.config)
    client, _ = select_client(policy.slurm)
    t0 = time.monotonic()
    deadline = t0 + RELEASE_WAIT_S
    pause, longest = RELEASE_POLL_S
    while time.monotonic() < deadline:
        job = client.job(args.job_id)
        if job is not None and job.state == "PENDING":
            client.release(args.job_id)
            said = f"job {args.job_id} released (was pending: {job.reason})"
            print(said)
            if policy.prolog.log_file:  # the prolog's helper has no stdout: the log keeps it
                HookLog("screener release", policy.prolog.log_file)(
                    f"{said} {time.monotonic() - t0:.2f}s after the helper started"
                )
            return 0
        time.sleep(pause)
        pause = min(pause * 1.5, longest)
    raise SlurmError(f"job {args.job_id} was not requeued within {RELEASE_WAIT_S:g}s")


def doctor(args: argparse.Namespace, console: Console) -> int:
    from screener.policy import database_url
    from screener.slurm import select_client
    from screener.slurm.cli_backend import slurm_conf_hint

    policy = load_policy(args.config)
    try:
        client, why = select_client(policy.slurm)
        backend, error = client.name, ""
    except SlurmError as exc:
        backend, why, error = "none", str(exc), str(exc)
    info = {
        "config": args.config or os.environ.get("SCREENER_CONFIG") or "/etc/screener/screener.toml",
        "slurm_backend": backend,
        "why": why,
        "slurm_conf": slurm_conf_hint(),
        "database": database_url(policy).split("@")[-1],
        "dry_run": "on: decide and record, never drain nor resume ([slurm] dry_run)"
        if policy.slurm.dry_run
        else "off (a sweep may still run --dry-run)",
        "shadow_rules": ", ".join(policy.verdict.shadow)
        + ": recorded ('would have drained'), never drain ([verdict] shadow)"
        if policy.verdict.shadow
        else "none: every rule decides",
    }
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for k, v in info.items():
            console.print(f"{k:14} {v}")
    return 1 if error else 0
