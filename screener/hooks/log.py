"""The hooks' log: one line per event on stderr and, if configured, appended to a file
(slurmctld does not keep a PrologSlurmctld's output)."""

from __future__ import annotations

import contextlib
import sys
from datetime import UTC, datetime

from screener.errors import ScreenerError


class HookLog:
    """Callable log sink: ``log("drained node03: ...")``; keeps the lines for tests/--json."""

    def __init__(self, prefix: str, path: str = "") -> None:
        self.prefix = prefix
        self.path = path
        self.lines: list[str] = []

    def __call__(self, message: str) -> None:
        # Milliseconds: where a prolog's seconds go is read from these stamps (issue 22).
        line = f"{datetime.now(UTC).isoformat(timespec='milliseconds')} {self.prefix}: {message}"
        self.lines.append(message)
        _stderr(line)
        if self.path:
            try:  # backslashreplace: a job's undecodable name must not break the log
                with open(self.path, "a", encoding="utf-8", errors="backslashreplace") as fh:
                    fh.write(line + "\n")
            except OSError as exc:
                _stderr(f"{self.prefix}: cannot append to {self.path}: {exc}")


def _stderr(line: str) -> None:
    """Print to stderr; slurmctld may give a hook a closed or broken one (the file still
    gets the line)."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def describe_error(exc: BaseException) -> str:
    """One short line for any exception: screener's own by its message, others by type too
    (a hook logs it instead of a traceback)."""
    try:
        text = " ".join(str(exc).split())
    except Exception:  # a __str__ that raises still gets a line
        text = ""
    text = text if len(text) <= 300 else text[:297] + "..."
    if isinstance(exc, ScreenerError):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
