"""An intermittently stalling reader on the emulated cluster: the node's blkio read throttle
switched on and off in a background thread (seed 001 §2: normal median, seconds-long tail).

    with Stall(cluster, "node03", rate=2_000_000, on_s=0.4, off_s=1.2):
        screen(...)
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Protocol


class Throttles(Protocol):
    """What the stall needs from a minicluster (Cluster or ClusterHandle)."""

    def inject(self, node: str, kind: str, value: int | str | None = None) -> object: ...

    def heal(self, node: str | None = None) -> object: ...


class Stall:
    """Throttle ``node``'s reads to ``rate`` bytes/s for ``on_s``, free for ``off_s``, repeat."""

    def __init__(self, cluster: Throttles, node: str, rate: int, on_s: float, off_s: float) -> None:
        self.cluster = cluster
        self.node = node
        self.rate = rate
        self.on_s = on_s
        self.off_s = off_s
        self.cycles = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"stall-{node}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.off_s):
            self.cluster.inject(self.node, "slow_read", self.rate)
            self._stop.wait(self.on_s)
            self.cluster.heal(self.node)
            self.cycles += 1

    def __enter__(self) -> Stall:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.cluster.heal(self.node)
