"""run_loop's ``beside`` step (issue 22: the prolog's sentinels read while the job's other
nodes are probed): it runs during the screen over the screen's transport, is awaited
before the after-step, and is cancelled when the screen fails. Real fio on this host (the
local transport), a SQLite store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from screener import app
from screener.pipeline import ScreenResult
from screener.policy import Policy, ProbePolicy, StorePolicy
from screener.probe_data import NodeProbe
from screener.transport.base import Transport, check


def policy(tmp_path: Path) -> Policy:
    target = tmp_path / "target"
    target.mkdir(exist_ok=True)
    p = Policy(
        probe=ProbePolicy(
            target=str(target), size_mib=16, runtime_s=0.5, ramp_s=0.2, rand_read=False
        ),
        store=StorePolicy(url=f"sqlite:///{tmp_path}/s.db", spool_dir=str(tmp_path / "spool")),
    )
    return app.screen_policy(p, local=True, confirm=False)


def test_beside_runs_during_the_screen_and_ends_before_the_after_step(tmp_path: Path) -> None:
    p = policy(tmp_path)
    nodes = app.resolve_nodes(None, True)
    seen: dict[str, float] = {}
    done: list[asyncio.Event] = []

    async def beside(transport: Transport) -> None:
        seen["beside started"] = time.monotonic()
        done.append(asyncio.Event())
        await done[0].wait()  # outlast the probe: the after-step must wait for what follows
        res = check(await transport.run(nodes[0], ["sleep", "0.2"], timeout=10))
        assert res.exit_status == 0
        seen["beside ended"] = time.monotonic()

    def probed(_round: int, probe: NodeProbe) -> None:
        seen["probed"] = time.monotonic()
        assert probe.error is None, probe.error
        done[0].set()  # in the screen's loop: on_done runs there

    async def after(_transport: Transport, result: ScreenResult) -> None:
        seen["after"] = time.monotonic()
        seen["ended before after"] = float("beside ended" in seen)

    request = app.ScreenRequest(tuple(nodes), p, beside=beside, after=after, on_done=probed)
    result = app.run_screen(request)
    assert result.summary.verdicts and result.run_id is not None
    # it started before the probe ended (beside it, not after it), over the same loop
    assert seen["beside started"] < seen["probed"], seen
    assert seen["probed"] < seen["beside ended"], seen  # it did outlast the screen
    assert seen["ended before after"] == 1.0 and seen["beside ended"] <= seen["after"], seen


def test_beside_is_cancelled_when_the_screen_fails(tmp_path: Path) -> None:
    p = policy(tmp_path)
    nodes = app.resolve_nodes(None, True)
    got: list[str] = []

    async def beside(_transport: Transport) -> None:
        try:
            await asyncio.Event().wait()  # never set: only a cancel ends it
        except asyncio.CancelledError:
            got.append("cancelled")
            raise

    def boom(_round: int, _probe: NodeProbe) -> None:
        raise RuntimeError("the screen failed")

    with pytest.raises(RuntimeError, match="the screen failed"):
        app.run_screen(app.ScreenRequest(tuple(nodes), p, beside=beside, on_done=boom))
    assert got == ["cancelled"]
