"""Process checks shared by tests that kill processes and must see them gone."""

from __future__ import annotations

from pathlib import Path


def running(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie (a killed orphan awaiting init's reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
