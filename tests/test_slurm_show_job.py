"""`scontrol show job -d` parsing and the rank layout derived from it, on output captured
from Slurm 22.05 on the emulated cluster (tests/data/slurm/README.md: the exact jobs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from screener.errors import ConfigError, ScreenerError, SlurmError
from screener.ingest.layout import record_layout
from screener.ingest.service import resolve_layout
from screener.slurm.show_job import interpret, parse_show_job, show_job_argv
from tests.test_fuzz_parsers import mutated_text

DATA = Path(__file__).resolve().parent / "data" / "slurm"


def sample(name: str) -> str:
    return (DATA / f"show_job_22.05_{name}.txt").read_text()


def test_record_fields_including_a_comment_with_spaces_and_equals() -> None:
    rec = parse_show_job(sample("2x2_comment"), "1")
    assert rec.job_id == "1" and rec.state == "COMPLETED" and rec.partition == "debug"
    assert rec.nodes == ("node01", "node02")
    assert (rec.num_tasks, rec.tasks_per_node, rec.cpus_per_node) == (4, 2, (2, 2))
    assert rec.comment == "screener=on screener_out=/tmp/x"
    assert rec.std_out == "/tmp/h12cap/j-1.out" and rec.work_dir == "/work/wt/h12"


def test_layouts_match_where_srun_put_the_ranks() -> None:
    """Each expectation is what `srun -l hostname` printed in that job."""
    two = record_layout(parse_show_job(sample("2x2_comment"), "1"))
    assert two.nodes == ("node01", "node01", "node02", "node02")
    assert "2 per node" in two.how and "job 1" in two.how
    uneven = record_layout(parse_show_job(sample("3_on_2"), "2"))
    assert uneven.nodes == ("node03", "node03", "node04")
    four = record_layout(parse_show_job(sample("4x1"), "3"))
    assert four.nodes == ("node01", "node02", "node03", "node04")
    oneline = record_layout(parse_show_job(sample("2x2_oneline"), "1"))
    assert oneline.nodes == two.nodes  # -o output parses to the same layout


def test_unknown_job_is_none_other_failures_are_errors() -> None:
    unknown = "slurm_load_jobs error: Invalid job id specified\n"
    assert interpret("999999", 1, "", unknown) is None
    with pytest.raises(SlurmError, match="Unable to contact"):
        interpret("7", 1, "", "slurm_load_jobs error: Unable to contact slurm controller\n")
    with pytest.raises(SlurmError, match="no job record"):
        interpret("7", 0, "garbage\n", "")
    with pytest.raises(SlurmError, match="NumTasks"):
        parse_show_job(sample("4x1").replace("NumTasks=4", "NumTasks=x"), "3")
    with pytest.raises(SlurmError, match="invalid Slurm job id"):
        show_job_argv("1;rm -rf /")
    assert show_job_argv("1234_7") == ["scontrol", "show", "job", "-d", "1234_7"]


def test_unequal_cpus_or_pending_job_is_refused_not_guessed() -> None:
    text = sample("3_on_2").replace(
        "Nodes=node[03-04] CPU_IDs=0-1", "Nodes=node03 CPU_IDs=0-3\n     Nodes=node04 CPU_IDs=0-1"
    )
    rec = parse_show_job(text, "2")
    assert rec.cpus_per_node == (4, 2)
    with pytest.raises(ConfigError, match="unequal"):
        record_layout(rec)
    pending = sample("4x1").replace("NodeList=node[01-04]", "NodeList=(null)")
    with pytest.raises(ConfigError, match="no task layout"):
        record_layout(parse_show_job(pending, "3"))


def test_resolve_layout_explicit_wins_and_slurm_is_asked_only_when_needed() -> None:
    """Explicit options win over Slurm; no per-rank data, no question to Slurm. (A job
    Slurm forgot: tests/test_ingest_cluster.py, against the real controller.)"""
    explicit = resolve_layout("5", "node[01-02]", 1, None, needed=True)
    assert explicit is not None and explicit.nodes == ("node01", "node02")
    assert resolve_layout("5", None, None, None, needed=True) is None


FUZZ = settings(
    max_examples=1500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
CAPTURES = [p.read_text() for p in sorted(DATA.glob("show_job_22.05_*.txt"))]


@FUZZ
@given(mutated_text(CAPTURES))
def test_fuzz_show_job_only_one_line_errors(text: str) -> None:
    """Captures cut, spliced, flipped or reordered: a layout or a one-line ScreenerError
    (SlurmError for the record, ConfigError for node names or the layout), nothing else."""
    try:
        layout = record_layout(parse_show_job(text, "1"))
    except ScreenerError as exc:
        assert "\n" not in str(exc)
        return
    assert layout.nodes and all(layout.nodes)
