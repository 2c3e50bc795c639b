"""Which record a job id names (`123`, `123_4`, `123+1`), and the pure parts of choosing the
pyslurm backend: versions compared as numbers, the config source, the verdict (issue 21)."""

from __future__ import annotations

from pathlib import Path

import pytest

from screener.slurm.job_id import JobRef, match_job, parse_job_id
from screener.slurm.parse import parse_squeue_keyed
from screener.slurm.pyslurm_backend import node_states
from screener.slurm.pyslurm_probe import (
    VERIFIED,
    PyslurmProbe,
    conf_source,
    judge,
    shown,
    version_numbers,
)

DATA = Path(__file__).parent / "data" / "slurm"
SQUEUE = parse_squeue_keyed((DATA / "squeue_22.05_array_het.json").read_text())


def nodes_of(job_id: str) -> tuple[str, ...] | None:
    job = match_job(parse_job_id(job_id), SQUEUE)
    return None if job is None else job.nodes


def state_of(job_id: str) -> str | None:
    job = match_job(parse_job_id(job_id), SQUEUE)
    return None if job is None else job.state


def test_ids_parse_into_kind_base_and_index() -> None:
    assert parse_job_id("123") == JobRef("job", 123)
    assert parse_job_id("123_4") == JobRef("array", 123, 4)
    assert parse_job_id("6+1") == JobRef("het", 6, 1)


def test_array_tasks_by_task_and_by_their_own_id() -> None:
    """Captured: tasks 1_1 (own id 5) on pyn01 and 1_2 (own id 1) on pyn02."""
    assert nodes_of("1_1") == ("pyn01",) == nodes_of("5")
    assert nodes_of("1_2") == ("pyn02",) == nodes_of("1")  # `1` is task 2's own id
    assert nodes_of("1_3") is None


def test_het_components_and_the_leader() -> None:
    assert [j.job_id for k, j in SQUEUE if k[3] == 2] == ["2", "3"]
    assert state_of("2+0") == state_of("2+1") == state_of("2") == "PENDING"
    assert match_job(parse_job_id("2+1"), SQUEUE) is match_job(parse_job_id("3"), SQUEUE)
    assert match_job(parse_job_id("2"), SQUEUE) is match_job(parse_job_id("2+0"), SQUEUE)
    assert nodes_of("2+2") is None


def test_a_task_still_inside_its_pending_array_is_not_found() -> None:
    assert state_of("6") == "PENDING"  # the array's one pending record
    assert nodes_of("6_1") is None
    assert nodes_of("4_1") is None and nodes_of("4+0") is None  # job 4 is neither
    assert state_of("4") == "PENDING" and nodes_of("99") is None


def test_pyslurm_state_strings_become_the_cli_flag_sets() -> None:
    assert node_states("IDLE+DRAIN") == {"IDLE", "DRAIN"}
    assert node_states("MIXED+DRAIN") == {"MIXED", "DRAIN"}
    assert node_states("DOWN*+NOT_RESPONDING") == {"DOWN", "NOT_RESPONDING"}
    # a state of suffix characters only is no state (the fuzzer's "%": not an empty string)
    assert node_states("%+DRAIN") == {"DRAIN"} and node_states("*") == frozenset()
    assert node_states("") == frozenset()


def test_versions_compare_as_numbers_not_strings() -> None:
    assert version_numbers("22.5.3")[:2] == version_numbers("22.05.8")[:2] == (22, 5)
    assert version_numbers("23.2.0")[:2] != version_numbers("22.05.8")[:2]
    assert shown((22, 5, 8), slurm_style=True) == "22.05.8" and shown((22, 5, 3)) == "22.5.3"


@pytest.mark.parametrize(
    ("pyslurm", "slurm", "forced", "ok", "said"),
    [
        ((22, 5, 3), (22, 5, 8), False, True, "contract-tested"),
        ((23, 2, 0), (22, 5, 8), True, False, "versions differ"),
        ((24, 11, 0), (24, 11, 5), False, True, "contract-tested"),  # inside the 24.11 root
        ((25, 11, 0), (25, 11, 1), False, False, "not contract-tested, auto keeps the CLI"),
        ((25, 11, 0), (25, 11, 1), True, True, "forced, not contract-tested"),
    ],
)
def test_judge(
    pyslurm: tuple[int, ...], slurm: tuple[int, ...], forced: bool, ok: bool, said: str
) -> None:
    use, why = judge(PyslurmProbe(pyslurm, slurm, ""), forced)
    assert use is ok and said in why, why
    assert {(22, 5), (24, 11)} == VERIFIED


def test_judge_refuses_a_pyslurm_whose_slurm_is_not_the_clusters() -> None:
    """A host pyslurm 22.5 beside a cluster whose scontrol is 24.11 (SCREENER_TEST_SLURM,
    or a site upgrading): its libslurm would speak 22.05's protocol to that controller."""
    probe = PyslurmProbe((22, 5, 3), (22, 5, 8), "", tools=(24, 11, 5))
    for forced in (False, True):
        use, why = judge(probe, forced)
        assert not use and "scontrol -V says 24.11.5: versions differ" in why, why
    assert judge(PyslurmProbe((22, 5, 3), (22, 5, 8), "", tools=(22, 5, 7)), False)[0]


def test_judge_keeps_the_childs_reason_when_it_saw_no_version() -> None:
    assert judge(PyslurmProbe(None, None, "pyslurm not installed"), True) == (
        False,
        "pyslurm not installed",
    )


def test_conf_source_as_slurms_tools_look(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    assert conf_source({"SLURM_CONF": str(conf)}) == (str(conf), f"SLURM_CONF={conf}")
    missing = tmp_path / "nope.conf"
    path, why = conf_source({"SLURM_CONF": str(missing)})
    assert path is None and "is not a file" in why
    path, why = conf_source({"SLURM_CONF": str(tmp_path)})  # a directory
    assert path is None
    if not Path("/etc/slurm/slurm.conf").exists() and not Path("/run/slurm/conf").exists():
        path, why = conf_source({})
        assert path is None and "no Slurm config" in why
