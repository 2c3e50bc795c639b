"""The nightly sweep's learning reads (issue 44, sweep/learn.py), their pure parts: how many
reads a sweep takes, and which read is kept as the triage recipe's history. The figures
are the mixed fleet's (bench/time_to_start.py, 2026-12-03): the slower model read 0.60x
its peers in the full probe and 0.35-0.50x in a triage window, with a 4-5x p99."""

from __future__ import annotations

from pathlib import Path

import pytest

from screener.cli import main
from screener.pipeline import ScreenResult
from screener.policy import Policy, VerdictPolicy
from screener.probe_data import RunSummary, Status, Trigger, Verdict
from screener.store import open_store
from screener.store.run_views import sweep_mode
from screener.sweep.learn import Learning, reads_wanted, vouched
from screener.sweep.step import srun_probe_argv

POLICY = VerdictPolicy()
LABEL = "the sweep's short read 1 of 3"


def _full(status: Status = Status.OK, place: float = 1.0, baseline: bool = True) -> Verdict:
    return Verdict(
        "node05", status, "within peers", read_mb_s=1035 * place, peer_read_mb_s=1035,
        baseline=baseline, signals=() if status == Status.OK else ("slower_device",),
    )  # fmt: skip


def _read(place: float, signals: tuple[str, ...] = (), status: Status = Status.OK) -> Verdict:
    return Verdict(
        "node05", status, "short read", read_mb_s=420 * place, peer_read_mb_s=420,
        read_p99_ms=9.5, read_p999_ms=14.0, signals=signals, recipe="triage",
    )  # fmt: skip


def test_a_new_site_takes_three_reads_then_none() -> None:
    assert reads_wanted({"node01": 0, "node05": 0}, 3) == 3
    assert reads_wanted({"node01": 3, "node05": 1}, 3) == 2  # the node with the fewest
    assert reads_wanted({"node01": 3, "node05": 5}, 3) == 0  # the prolog keeps them current
    assert reads_wanted({"node01": 0}, 1) == 1  # the cap
    assert reads_wanted({"node01": 0}, 0) == 0  # off
    assert reads_wanted({}, 3) == 0


def test_the_slower_model_s_read_is_kept_with_its_full_probe_s_decision() -> None:
    # 0.42x in the window beside a full probe at 0.60x: above half of it (min_peer_drop),
    # its long tail is what is learned
    kept = vouched(_full(place=0.60), _read(0.42, ("peer_read", "peer_tail")), POLICY, LABEL)
    assert isinstance(kept, Verdict)
    assert kept.status == Status.OK and kept.signals == () and kept.baseline
    assert (kept.read_p99_ms, kept.recipe, kept.read_mb_s) == (9.5, "triage", 420 * 0.42)
    assert "0.42x peers (its full probe 0.60x, OK)" in kept.reason and LABEL in kept.reason
    # a slower device not yet at its learned place stays DEGRADED as the full probe said
    degraded = vouched(_full(Status.DEGRADED, 0.6), _read(0.5, ("peer_read",)), POLICY, LABEL)
    assert isinstance(degraded, Verdict) and degraded.status == Status.DEGRADED
    assert degraded.signals == ("slower_device",) and degraded.baseline


def test_a_read_that_says_more_than_where_the_node_reads_is_not_kept() -> None:
    # dropped between the two: 0.25x beside a full probe at 0.60x
    assert vouched(_full(place=0.6), _read(0.25, ("peer_read",)), POLICY, LABEL) == (
        "read 0.25x peers, below 0.5 of its full probe's 0.60x"
    )
    ratio = vouched(_full(), _read(0.9, ("abs_read", "history"), Status.SLOW_READ), POLICY, LABEL)
    assert ratio == "SLOW_READ (abs_read, history)"
    failed = Verdict("node05", Status.UNKNOWN, "node05: fio missing")
    assert vouched(_full(), failed, POLICY, LABEL) == "no figures (node05: fio missing)"
    slow = _full(Status.SLOW_READ, 0.05, baseline=False)
    assert (
        vouched(slow, _read(1.0), POLICY, LABEL) == "its full probe was SLOW_READ, not a baseline"
    )


def test_the_step_and_the_probe_command_take_the_count() -> None:
    argv = srun_probe_argv(["n1", "n2"], False, "/etc/s.toml", triage=3)
    assert argv[argv.index("probe") :] == ["probe", "--local", "--json", "--triage", "3"]
    assert "--triage" not in srun_probe_argv(["n1"], False)


@pytest.mark.parametrize("count", ["0", "11", "3;rm", "-1"])
def test_a_bad_count_is_one_line_and_probes_nothing(
    count: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["probe", "--local", "--json", "--triage", count])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("screener probe: error: argument --triage:"), err


def test_show_run_names_the_learning_read() -> None:
    shown = sweep_mode({"sweep_learning": LABEL, "probe": {"runtime_s": 0.5}})
    assert shown is not None and shown.startswith(f"{LABEL}: the prolog triage's recipe")


def test_a_step_that_reads_nothing_keeps_nothing_and_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real srun, with an empty Slurm configuration (no cluster to reach; a missing file
    would have it retry for 60 s): the step fails. What srun said and one summary line, no
    run stored, and the sweep goes on (Learning.run returns)."""
    empty = tmp_path / "slurm.conf"
    empty.write_text("")
    monkeypatch.setenv("SLURM_CONF", str(empty))
    nodes = [f"node{i:02d}" for i in range(1, 21)]
    passed = tuple(Verdict(n, Status.OK, "within peers", baseline=True) for n in nodes)
    result = ScreenResult(1, RunSummary(verdicts=passed), {}, 1, 5.0)
    said: list[str] = []
    with open_store(f"sqlite:///{tmp_path}/screener.db", upgrade=True) as store:
        Learning(Policy(), store, Trigger.SWEEP, "42", None, said.append).run(result, nodes)
        assert store.latest_runs(5) == []
    assert said[-1].startswith("learning reads: no node read (") and len(said) <= 2, said
    assert said[0].startswith("learning reads: Slurm step exited 1: srun: ") and len(said) == 2
    assert "\n" not in said[0] and "ClusterName needs to be specified" in said[0], said
