"""The hooks' log: one line per event on stderr and, if configured, appended to a file
(slurmctld does not keep a PrologSlurmctld's output)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime


class HookLog:
    """Callable log sink: ``log("drained node03: ...")``; keeps the lines for tests/--json."""

    def __init__(self, prefix: str, path: str = "") -> None:
        self.prefix = prefix
        self.path = path
        self.lines: list[str] = []

    def __call__(self, message: str) -> None:
        line = f"{datetime.now(UTC).isoformat(timespec='seconds')} {self.prefix}: {message}"
        self.lines.append(message)
        print(line, file=sys.stderr, flush=True)
        if self.path:
            try:
                with open(self.path, "a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
            except OSError as exc:
                print(f"{self.prefix}: cannot append to {self.path}: {exc}", file=sys.stderr)
