"""Pipeline control flow replayed from real captured outputs (fast, no cluster).

The transport here is a fake only in *where* output comes from: every stdout it returns
was captured from real preflight/facts/fio/iostat runs (tests/data/probe/). What cannot be
produced on demand with the real components (an unexpected exception inside a transport)
is also covered here. End-to-end behaviour on real sshd and fio is in test_pipeline.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from screener.errors import StoreError, TransportError
from screener.pipeline import ScreenRequest, ScreenResult, screen
from screener.policy import Policy, policy_from_dict
from screener.probe.fio import recipe_fingerprint
from screener.probe_data import RunSummary, Status
from screener.store import Store, open_store
from screener.transport.base import CommandResult
from screener.verdict.confirm import unspared

DATA = Path(__file__).parent / "data" / "probe"
PREFLIGHT = (DATA / "preflight" / "loop_ok.txt").read_text()
FACTS = (DATA / "facts" / "loop.txt").read_text()
FIO_OK = (DATA / "fio" / "fio-3.33_loop_ok.json").read_text()
FIO_SLOW = (DATA / "fio" / "fio-3.33_loop_slow_read.json").read_text()
FIO_ENOSPC = (DATA / "fio" / "fio-3.33_enospc.txt").read_text()
IOSTAT = (DATA / "iostat" / "sysstat-12.6.1_loop0_sigint.json").read_text()

# The captured preflight reports a 64 MiB probe file already in place: no layout step.
POLICY: Policy = policy_from_dict({"probe": {"size_mib": 64}})


class ReplayTransport:
    """Answers each command with a captured output, chosen per node by ``fio_out``."""

    def __init__(self, fio_out: dict[str, str], raising: Sequence[str] = ()) -> None:
        self.fio_out = fio_out
        self.raising = set(raising)
        self.calls: list[tuple[str, str]] = []

    async def run(self, host: str, argv: Sequence[str], *, timeout: float) -> CommandResult:
        what = argv[3] if argv[0] == "sh" else argv[0]
        if what == "screener-probe":  # in the private directory: sh ... DIR fio ...
            what = argv[5]
        self.calls.append((host, what))
        if host in self.raising:
            raise RuntimeError("surprise from a transport")
        if what == "screener-preflight":
            out, rc = PREFLIGHT, 0
        elif what == "screener-facts":
            out, rc = FACTS, 0
        elif what == "fio":
            out = self.fio_out.get(host, FIO_OK)
            rc = 1 if out is FIO_ENOSPC else 0
        elif what == "env":  # iostat runs under `env LC_ALL=C ...`
            out, rc = IOSTAT, 0
        else:
            raise TransportError(host, "failed", f"unexpected command {argv!r}")
        return CommandResult(host, tuple(argv), rc, out, "", 0.01)

    async def close(self) -> None:
        return None


def replay(
    transport: ReplayTransport, nodes: list[str], store: object = None, policy: Policy = POLICY
) -> ScreenResult:
    request = ScreenRequest(tuple(nodes), policy)
    return asyncio.run(screen(request, transport, store))  # type: ignore[arg-type]


NODES = [f"n{i}" for i in range(1, 7)]


def test_captured_slow_reader_is_decided_in_round_1_by_default() -> None:
    # the captured slow reader reads both jobs <= 0.1x its peers (verdict.decisive_ratio,
    # 0.1 by default): confirmed without a re-probe, and the reason says so
    t = ReplayTransport({"n3": FIO_SLOW})
    result = replay(t, NODES)
    v = {v.node: v for v in result.summary.verdicts}["n3"]
    assert v.status == Status.SLOW_READ and v.confirmed, v
    assert "decisive in round 1" in v.reason, v
    assert result.reprobed == () and result.rounds == 1
    assert len([h for h, w in t.calls if w == "screener-preflight"]) == len(NODES)


def test_captured_slow_reader_is_confirmed_and_stored(tmp_path: Path) -> None:
    t = ReplayTransport({"n3": FIO_SLOW})
    store = open_store(f"sqlite:///{tmp_path}/r.db", upgrade=True)
    # the re-probe path: every suspect re-probed (decisive_ratio 0)
    off = policy_from_dict({"probe": {"size_mib": 64}, "verdict": {"decisive_ratio": 0.0}})
    result = replay(t, NODES, store, off)
    got = {v.node: v.status for v in result.summary.verdicts}
    assert got.pop("n3") == Status.SLOW_READ
    assert set(got.values()) == {Status.OK}
    assert result.reprobed == ("n3",) and result.rounds == 2
    # round 2: the suspect beside confirm_references (3) healthy reference nodes, the
    # OK nodes nearest the peer median; the others are not probed again
    again = [h for h, w in t.calls if w == "screener-preflight"][len(NODES) :]
    assert "n3" in again and len(again) == 1 + POLICY.verdict.confirm_references
    assert "reference nodes" in {v.node: v for v in result.summary.verdicts}["n3"].reason
    # iostat samples were parsed and kept for the node's device
    assert result.probes["n3"].iostat and result.probes["n3"].facts is not None
    assert result.run_id is not None
    assert {v.node: v.status for v in store.run_verdicts(result.run_id)}["n3"] == Status.SLOW_READ
    assert len(store.run_probes(result.run_id, round_no=2)) == 4
    # the recipe fingerprint is stored with the probe and the verdict
    assert {p.recipe for p in store.run_probes(result.run_id)} == {recipe_fingerprint(POLICY.probe)}
    assert {v.recipe for v in store.run_verdicts(result.run_id)} == {
        recipe_fingerprint(POLICY.probe)
    }


def test_a_spared_suspect_is_re_probed_unless_degraded() -> None:
    """ScreenRequest.spare (the prolog's fresh references at their usual place) skips the
    re-probe of a DEGRADED suspect only: a SLOW one is confirmed whatever the caller says."""
    off = policy_from_dict({"probe": {"size_mib": 64}, "verdict": {"decisive_ratio": 0.0}})
    asked: list[list[str]] = []

    def spare(summary: RunSummary) -> list[str]:
        asked.append([v.node for v in summary.verdicts if v.status != Status.OK])
        return ["n3"]

    t = ReplayTransport({"n3": FIO_SLOW})
    request = ScreenRequest(tuple(NODES), off, spare=spare)
    result = asyncio.run(screen(request, t, None))  # type: ignore[arg-type]
    assert asked == [["n3"]]  # asked once, with round 1's verdicts
    v = {v.node: v for v in result.summary.verdicts}["n3"]
    assert v.status == Status.SLOW_READ and v.confirmed and result.reprobed == ("n3",)
    degraded = replace(v, status=Status.DEGRADED, confirmed=False)
    summary = RunSummary((degraded,))
    assert unspared(["n3"], summary, ["n3"]) == []
    assert unspared(["n3", "n4"], summary, ["n3", "n4"]) == ["n4"]  # n4: not DEGRADED
    assert unspared(["n3"], summary, []) == ["n3"]


def test_unexpected_exception_on_one_node_is_unknown_not_fatal() -> None:
    result = replay(ReplayTransport({}, raising=["n2"]), NODES)
    v = {v.node: v for v in result.summary.verdicts}
    assert v["n2"].status == Status.UNKNOWN
    assert "internal error" in v["n2"].reason and "surprise" in v["n2"].reason
    assert result.probes["n2"].error_kind == "internal"
    assert {v[n].status for n in NODES if n != "n2"} == {Status.OK}


def test_fio_failure_is_unknown_with_fios_reason() -> None:
    result = replay(ReplayTransport({"n4": FIO_ENOSPC}), NODES)
    v = {v.node: v for v in result.summary.verdicts}
    assert v["n4"].status == Status.UNKNOWN
    assert "No space left on device" in v["n4"].reason, v["n4"].reason
    assert result.probes["n4"].error_kind == "probe"


class FailingAfterStart:
    """A real SQLite store whose writes start failing after start_run (a DB that went away
    mid-run cannot be produced on demand with the real server)."""

    def __init__(self, real: Store) -> None:
        self.real = real

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def record_probe(self, run_id: int, probe: object, round: int) -> None:
        raise StoreError("database went away")


def test_store_failure_mid_run_keeps_the_results(tmp_path: Path) -> None:
    real = open_store(f"sqlite:///{tmp_path}/f.db", upgrade=True)
    result = replay(ReplayTransport({"n3": FIO_SLOW}), NODES, FailingAfterStart(real))
    # the screen still finished and judged every node
    assert {v.node: v.status for v in result.summary.verdicts}["n3"] == Status.SLOW_READ
    assert result.store_error == "database went away"
    # and the run is marked failed in the store, not left "running"
    (run,) = real.latest_runs(5)
    assert run.status == "failed"


def _reads_only(fio_json: str) -> str:
    """A captured fio report with its seq_write job taken out: what a read-only recipe's
    fio prints (its jobs are reported one by one, in the order they ran)."""
    doc = json.loads(fio_json)
    doc["jobs"] = [j for j in doc["jobs"] if j["jobname"] != "seq_write"]
    return json.dumps(doc, indent=2)


READ_ONLY: Policy = policy_from_dict({"probe": {"size_mib": 64, "seq_write": False}})


def test_a_read_only_recipe_is_judged_on_its_reads() -> None:
    """The prolog's triage skips the write: its slow reader is SLOW_READ on the peer rule
    (no write/read ratio to add), healthy nodes OK, and no write figure is made up."""
    t = ReplayTransport({n: _reads_only(FIO_SLOW if n == "n3" else FIO_OK) for n in NODES})
    result = asyncio.run(screen(ScreenRequest(tuple(NODES), READ_ONLY), t, None))  # type: ignore[arg-type]
    v = {x.node: x for x in result.summary.verdicts}
    assert v["n3"].status == Status.SLOW_READ and "peer_read" in v["n3"].signals
    assert "ratio" not in v["n3"].signals and v["n3"].ratio is None
    assert {v[n].status for n in NODES if n != "n3"} == {Status.OK}
    assert all(x.write_mb_s is None and x.read_mb_s for x in v.values())
    assert result.probes["n1"].recipe == recipe_fingerprint(READ_ONLY.probe)


def test_a_report_without_a_job_the_recipe_ran_is_unknown() -> None:
    """fio output missing the write the recipe asked for is a parse failure (UNKNOWN, never a
    read-only verdict by accident); a read-only recipe's run accepts it."""
    t = ReplayTransport({"n2": _reads_only(FIO_SLOW)})
    v = {x.node: x for x in replay(t, NODES).summary.verdicts}
    assert v["n2"].status == Status.UNKNOWN and "lacks job 'seq_write'" in v["n2"].reason
