"""Pure rules of the Slurm side: job selection, fast path, drain reasons, the mass-drain
guard, the resume rule, in-job outliers, deep-mode steady state, the sweep's step lines."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from screener.hooks.drain_rules import (
    absolved,
    drain_reason,
    drainable,
    far_below,
    may_resume,
    plan_drains,
)
from screener.hooks.injob import NodeJobIo, outliers, start_argv, stop_argv, summarize
from screener.hooks.job import selects
from screener.policy import PrologPolicy, SlurmPolicy
from screener.probe.fio import parse_fio
from screener.probe.lines import node_lines, parse_node_lines
from screener.probe_data import IostatSample, NodeProbe, RunSummary, Status, Verdict
from screener.prolog.rules import fast_path
from screener.slurm.client import SlurmJob, SlurmNode
from screener.slurm.parse import parse_sinfo
from screener.steady import steady_state
from screener.sweep.job import idle_nodes, srun_probe_argv, step_results

NOW = datetime(2026, 11, 22, 5, 0, tzinfo=UTC)
FIO = Path(__file__).parent / "data" / "probe" / "fio"


def _job(**kw: str) -> SlurmJob:
    return SlurmJob(job_id="7", nodes=("n1", "n2"), **kw)


@pytest.mark.parametrize(
    ("job", "policy", "selected"),
    [
        (_job(comment="screener=on"), PrologPolicy(), True),
        (_job(comment="x,screener=on y"), PrologPolicy(), True),
        (_job(comment="screener=onx"), PrologPolicy(), False),
        (_job(name="ior-large"), PrologPolicy(job_name_regex="ior|benchfs"), True),
        (_job(name="vasp"), PrologPolicy(job_name_regex="ior|benchfs"), False),
        (_job(comment="screener=on", partition="gpu"), PrologPolicy(partitions=("io",)), False),
        (_job(partition="io"), PrologPolicy(partitions=("io",), comment_token=""), True),
    ],
)
def test_selects(job: SlurmJob, policy: PrologPolicy, selected: bool) -> None:
    assert selects(job, policy)[0] is selected


def test_fast_path_skips_fresh_passes_but_never_flaky_nodes() -> None:
    last = {"n1": NOW - timedelta(minutes=5), "n2": NOW - timedelta(hours=3), "n3": NOW}
    skip, probe = fast_path(["n1", "n2", "n3", "n4"], last, {"n3"}, NOW, 3600)
    assert skip == ["n1"] and probe == ["n2", "n3", "n4"]


def _v(node: str, status: Status, **kw: object) -> Verdict:
    return Verdict(node=node, status=status, reason="r", **kw)  # type: ignore[arg-type]


def test_drainable_needs_confirmation() -> None:
    vs = (
        _v("a", Status.SLOW_READ, confirmed=True),
        _v("b", Status.SLOW_READ),
        _v("c", Status.UNKNOWN),
        _v("d", Status.DEGRADED, confirmed=True),
    )
    assert [v.node for v in drainable(RunSummary(vs), confirm=True)] == ["a"]
    assert [v.node for v in drainable(RunSummary(vs), confirm=False)] == ["a", "b"]


def test_shared_cause_drains_its_confirmed_outliers_and_absolves_the_rest() -> None:
    vs = (
        _v("out", Status.SLOW_READ, confirmed=True, signals=("peer_read", "outlier")),
        _v("x", Status.UNKNOWN, signals=("history", "shared_cause"), baseline=True),
        _v("y", Status.UNKNOWN, signals=("history", "shared_cause"), baseline=True),
        _v("err", Status.UNKNOWN),  # an error: neither drained nor absolved
    )
    shared = RunSummary(vs, shared_cause=True, shared_cause_reason="3/4 nodes slow together")
    assert [v.node for v in drainable(shared, confirm=True)] == ["out"]
    assert absolved(shared) == ["x", "y"]
    assert absolved(RunSummary(vs)) == []  # no shared cause: nothing to absolve


def test_drain_reason_is_short_tagged_and_safe() -> None:
    v = _v("a", Status.SLOW_READ, read_mb_s=20.0, ratio=300.0)
    assert drain_reason("screener:", v, 400.0, 42) == "screener: rd 0.05x peers r42"
    assert drain_reason("screener:", v, None, 42) == "screener: rd w/r 300x r42"
    w = _v("a", Status.SLOW_WRITE, write_mb_s=12.4)
    assert drain_reason("screener:", w, 400.0, 7) == "screener: wr 12MB/s r7"
    # a confirmed node is compared with the median of the round it was judged in
    r2 = _v("a", Status.SLOW_READ, read_mb_s=20.0, peer_read_mb_s=1000.0, confirmed=True)
    assert drain_reason("screener:", r2, 400.0, 42) == "screener: rd 0.02x peers r42"


def test_drain_reason_names_the_figure_that_decided() -> None:
    """Issue 44: a node drained on 4k random reads (0.34x) while its sequential read was
    1.05x its peers read `screener: rd 1.05x peers r2` in sinfo -R."""
    rand = _v(
        "a", Status.SLOW_READ, read_mb_s=1_704.0, peer_read_mb_s=1_623.0, ratio=0.8,
        rand_read_iops=31_833.0, peer_rand_iops=92_929.0, signals=("peer_rand",),
    )  # fmt: skip
    assert drain_reason("screener:", rand, 1_600.0, 2) == "screener: rd 4k 0.34x peers r2"
    floor = replace(rand, peer_rand_iops=None, signals=("abs_rand",))
    assert drain_reason("screener:", floor, 1_600.0, 2) == "screener: rd 4k 31833iops r2"
    by_ratio = _v("a", Status.SLOW_READ, read_mb_s=300.0, ratio=24.2, signals=("ratio",))
    assert drain_reason("screener:", by_ratio, 310.0, 5) == "screener: rd w/r 24x r5"
    tail = _v("a", Status.SLOW_READ, read_mb_s=300.0, read_p99_ms=3_305.4, signals=("peer_tail",))
    assert drain_reason("screener:", tail, 310.0, 5) == "screener: rd p99 3305ms r5"
    both = replace(rand, read_mb_s=20.0, signals=("peer_read", "peer_rand"))
    assert drain_reason("screener:", both, 400.0, 2) == "screener: rd 0.01x peers r2"


def test_guard_allocation_and_partition_limits() -> None:
    pol = SlurmPolicy(max_drain_fraction=0.34, partition_max_drain_fraction=0.2)
    one = [("n1", "screener: rd")]
    assert plan_drains(one, 4, 100, set(), pol).drain == (("n1", "screener: rd"),)
    two = [("n1", "x"), ("n2", "y")]
    tripped = plan_drains(two, 4, 100, set(), pol)
    assert tripped.drain == () and tripped.blocked == ("n1", "n2")
    assert tripped.guard is not None and "2 of 4 allocated" in tripped.guard
    busy = plan_drains(one, 8, 10, {"n7", "n8"}, pol)  # 3 of 10 within the window > 0.2
    assert busy.drain == () and busy.guard is not None and "partition" in busy.guard
    assert plan_drains([], 4, 10, {f"n{i}" for i in range(9)}, pol).guard is None


def test_a_reader_far_below_the_other_slow_nodes_is_drained_past_the_guard() -> None:
    """Issue 44 (bench/time_to_start.py, mixed fleet): two 0.6x nodes read 0.44x in the
    triage beside a 1/20 reader; 3 of 8 slow tripped the guard and the 1/20 reader ran the
    job. A node over 10x below the other slow nodes is no shared cause: drained apart."""
    pol = SlurmPolicy(max_drain_fraction=0.34, partition_max_drain_fraction=0.2)
    three = [
        Verdict("node01", Status.SLOW_READ, "x", read_mb_s=57.0, confirmed=True),
        Verdict("node05", Status.SLOW_READ, "x", read_mb_s=605.0, confirmed=True),
        Verdict("node07", Status.SLOW_READ, "x", read_mb_s=610.0, confirmed=True),
    ]
    apart = far_below(three, 10.0)
    assert apart == {"node01": "reads 57 MB/s, over 10x below the other slow nodes' 608 MB/s"}
    slow = [(v.node, f"screener: rd {v.node}") for v in three]
    plan = plan_drains(slow, 8, 100, set(), pol, apart=apart)
    assert plan.drain == (("node01", "screener: rd node01"),)
    assert plan.blocked == ("node05", "node07")
    assert plan.guard == (
        "guard: 3 of 8 allocated nodes slow (> 0.34): shared cause suspected; node01 reads 57"
        " MB/s, over 10x below the other slow nodes' 608 MB/s: drained apart, node[05,07] not"
        " drained"
    )
    # a shared cause alone (no node far below the others): nobody, as before
    assert far_below(three[1:], 10.0) == {} and plan_drains(slow, 8, 100, set(), pol).drain == ()
    # the partition's limit still holds for the outlier
    busy = plan_drains(slow, 8, 10, {"n7", "n8"}, pol, apart=apart)
    assert busy.drain == () and busy.guard is not None and "partition" in busy.guard
    # outliers beyond the allocation's fraction themselves: nobody
    many = [Verdict(f"n{i}", Status.SLOW_READ, "x", read_mb_s=5.0) for i in range(3)]
    many.append(Verdict("n9", Status.SLOW_READ, "x", read_mb_s=600.0))
    many.append(Verdict("n8", Status.SLOW_READ, "x", read_mb_s=600.0))
    apart3 = far_below(many, 10.0)
    assert sorted(apart3) == ["n0", "n1", "n2"]  # each 60x below the others' median 302
    slow5 = [(v.node, "screener: rd") for v in many]
    assert plan_drains(slow5, 8, 100, set(), pol, apart=apart3).drain == ()  # 3 of 8 > 0.34


def test_partition_guard_counts_a_node_drained_again_once() -> None:
    """Drained, resumed by an admin while still slow, slow again: one node, not two."""
    pol = SlurmPolicy(partition_max_drain_fraction=0.2)
    again = plan_drains([("n3", "screener: rd 0.05x peers r9")], 4, 8, {"n3"}, pol)
    assert again.guard is None and again.drain == (("n3", "screener: rd 0.05x peers r9"),)
    # a second, different node is what the guard is for: 2 distinct of 8 > 0.2
    other = plan_drains([("n5", "r")], 4, 8, {"n3"}, pol)
    assert other.drain == () and other.blocked == ("n5",)
    assert other.guard == (
        "guard: 2 distinct of 8 partition nodes drained within 3600s (> 0.2): "
        "n3 drained before, n5 slow now: nobody drained"
    )
    both = plan_drains([("n3", "r"), ("n5", "r")], 8, 8, {"n3", "n1"}, pol)
    assert both.guard is not None and "3 distinct of 8" in both.guard
    assert "n1 drained before, n3 slow again, n5 slow now" in both.guard


@pytest.mark.parametrize(
    ("reason", "recorded", "ok"),
    [
        ("screener: rd 0.05x peers r1", "screener: rd 0.05x peers r1", True),
        ("RMA ticket", "screener: rd 0.05x peers r1", False),  # admin rewrote it
        ("admin: bios", None, False),  # an admin's drain
    ],
)
def test_may_resume_only_unchanged_screener_reason(
    reason: str, recorded: str | None, ok: bool
) -> None:
    node = SlurmNode("n1", frozenset({"IDLE", "DRAIN"}), reason)
    assert may_resume(node, recorded)[0] is ok


def test_may_resume_refuses_a_node_that_is_not_drained() -> None:
    node = SlurmNode("n1", frozenset({"IDLE"}), "")
    assert may_resume(node, "screener: x")[0] is False


def _io(r_await: float, r_s: float = 100.0) -> IostatSample:
    return IostatSample("loop1", "", r_s, 20000.0, 0.0, 0.0, r_await, 0.0, 1.0, 50.0)


def test_in_job_outlier_by_read_latency() -> None:
    figs = {
        n: f
        for n, samples in {
            "n1": [_io(800), _io(900), _io(0, r_s=0)],
            "n2": [_io(0.4), _io(0.5)],
            "n3": [_io(0.6)],
        }.items()
        if (f := summarize(n, samples)) is not None
    }
    assert figs["n1"].r_await_ms == 850 and figs["n1"].samples == 2
    got = outliers(figs, factor=4.0, floor_ms=50.0)
    assert list(got) == ["n1"] and "850ms" in got["n1"]
    assert summarize("n4", [_io(5, r_s=0)]) is None
    two = {k: figs[k] for k in ("n1", "n2")}
    assert outliers(two, 4.0, 50.0) == {}  # no median of two


def test_in_job_outlier_floor_keeps_quiet_jobs_quiet() -> None:
    figs = {n: NodeJobIo(n, ms, 1.0, 1.0, 3) for n, ms in (("a", 0.1), ("b", 0.1), ("c", 2.0))}
    assert outliers(figs, 4.0, 50.0) == {}


def test_iostat_start_stop_argv_carry_only_validated_values() -> None:
    argv = start_argv("42", "node01", 5, 3600, ["loop1"])
    assert argv[:2] == ["sh", "-c"]
    assert argv[3] == "screener-iostat"
    assert argv[5:8] == ["/tmp/.screener", "iostat-42-node01", "3600"]
    assert "iostat" in argv and argv[-3:] == ["loop1", "5", "720"]  # 3600 s / 5 s reports
    assert stop_argv("42", "node01")[-2:] == ["/tmp/.screener", "iostat-42-node01"]
    with pytest.raises(Exception, match="invalid"):
        start_argv("42;x", "node01", 5, 60, [])


@pytest.mark.parametrize(
    ("values", "steady"),
    [
        ([100, 101, 99, 100, 100], True),
        ([50, 100, 101, 99, 100, 100], True),  # only the last window counts
        ([100, 100, 100, 100], False),  # window not full
        ([80, 90, 100, 110, 120], False),  # excursion 40%
        ([100, 103, 106, 109, 112], False),  # excursion ok (11.6%) but a clear trend
        ([100, 130, 100, 100, 100], False),
    ],
)
def test_steady_state(values: list[float], steady: bool) -> None:
    assert steady_state(values, 5, 0.2, 0.1) is steady


def _fio_probe(node: str) -> NodeProbe:
    raw = (FIO / "fio-3.33_loop_ok.json").read_text()
    run = parse_fio(raw, node)
    return NodeProbe(
        node=node,
        seq_write=run.job("seq_write"),
        seq_read=run.job("seq_read"),
        rand_read=run.job("rand_read"),
        fio_version=run.fio_version,
        raw_fio=raw,
        duration_s=4.2,
    )


def test_step_lines_round_trip_even_interleaved() -> None:
    a = node_lines("n1", [_fio_probe("n1"), _fio_probe("n1")], True)
    b = node_lines("n2", [NodeProbe(node="n2", error="n2: fio missing", error_kind="probe")], None)
    assert len(a) > 1 and all(len(line) < 1000 for line in a)
    mixed = [f"{i}: {line}" for i, line in enumerate(a)]  # srun --label style
    mixed.insert(1, b[0])
    got = parse_node_lines("\n".join(["srun: noise", *mixed]))
    rounds, steady = got["n1"]
    assert steady is True and len(rounds) == 2
    assert rounds[0].usable and rounds[0].seq_read == _fio_probe("n1").seq_read
    assert got["n2"][0][0].error == "n2: fio missing"


def test_step_results_missing_or_truncated_node_is_unknown() -> None:
    lines = node_lines("n1", [_fio_probe("n1")], None)
    out = step_results("\n".join(lines[:-1]), ["n1", "n2"])  # n1 lost its last chunk
    assert all(not rs.last.usable and rs.last.error for rs in out.values())


def test_srun_argv_one_task_per_node() -> None:
    argv = srun_probe_argv(["node02", "node01"], deep=True)
    assert argv[:5] == [
        "srun",
        "--nodes=2",
        "--nodelist=node[01-02]",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=0",
    ]
    assert argv[-4:] == ["probe", "--local", "--json", "--deep"]


def test_idle_nodes_for_the_sweep_job() -> None:
    text = (Path(__file__).parent / "data" / "slurm" / "sinfo_22.05_allocated.json").read_text()
    nodes = parse_sinfo(text)
    assert idle_nodes(nodes, "") == ["node01"]  # node02 drained, node03/04 allocated
    assert idle_nodes(nodes, "other") == []
