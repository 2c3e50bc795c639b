"""The `screener` console script: imports the CLI inside a guard, so a broken install (a
missing or broken dependency) still ends a slurmctld hook in its documented exit (0, fail
open) with one line, instead of a traceback and exit 1 (which Slurm reads as "requeue").
The hooks are first offered to `screener hookd`, which runs them with the imports done."""

from __future__ import annotations

import sys

HOOKS = ("prolog", "epilog")  # the same tuple as screener.cli.HOOKS (which may not import)


def main() -> int:
    """Run `screener.cli.main`; if it cannot even be imported, fail open for a hook. A
    hook goes to `screener hookd` first when its socket is there (docs/slurm.md)."""
    if len(sys.argv) > 1 and sys.argv[1] in HOOKS:
        try:
            from screener.hook_server.client import via_hookd

            code = via_hookd(sys.argv[1:])
        except Exception:  # the client is a shortcut: whatever breaks it, run the hook here
            code = None
        if code is not None:
            return code
    try:
        from screener.cli import main as cli_main
    except BaseException as exc:  # ImportError, SyntaxError, MemoryError: the install is broken
        command = sys.argv[1] if len(sys.argv) > 1 else ""
        first = (str(exc).splitlines() or [""])[0]
        hook = command in HOOKS
        outcome = {
            "prolog": "; fail open: the job runs, nobody drained",
            "epilog": "; nothing collected, exit 0",
        }.get(command, "")
        print(
            f"screener: error: cannot import screener ({type(exc).__name__}: {first}){outcome}",
            file=sys.stderr,
        )
        return 0 if hook else 1
    return cli_main()
