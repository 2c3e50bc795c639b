"""Ingest parsers and the in-job outlier judgement on real IOR 4.1.0+dev / fio 3.33 outputs
(tests/data/ior/, unedited captures pinned by SHA256SUMS) and hand-edited corrupt variants."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from screener.errors import ConfigError, ProbeError
from screener.ingest.files import load_files, outputs_near, parse_text
from screener.ingest.judge import judge_job
from screener.ingest.layout import block_layout
from screener.ingest.results import ParsedFile, Phase, SourceKind
from screener.policy import IngestPolicy, VerdictPolicy

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "ior"
# sha256sum's format: "<hex>  <name>" per captured output (the corrupt-* files are not in it).
PINNED = {
    name: digest
    for digest, name in (
        line.split("  ", 1) for line in (DATA / "SHA256SUMS").read_text().splitlines()
    )
}
MIB = 1 << 20
FOUR = block_layout(["n1", "n2", "n3", "n4"], 1)


def parsed(name: str) -> ParsedFile:
    return parse_text((DATA / name).read_text(), name)


def test_every_capture_is_pinned() -> None:
    assert sorted(PINNED) == sorted(p.name for p in DATA.glob("[if]*"))


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("[if]*")))
def test_captures_are_unedited(name: str) -> None:
    """The tool outputs are test data kept here; an edit (or a re-capture) must be deliberate."""
    assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == PINNED[name]


def test_kinds_are_told_by_content() -> None:
    assert parse_text((DATA / "ior-fpp-text.txt").read_text(), "x").kind is SourceKind.IOR_TEXT
    assert parse_text((DATA / "ior-fpp-summary.json").read_text(), "x").kind is SourceKind.IOR_JSON
    assert parse_text((DATA / "ior-fpp-ranks.csv").read_text(), "x").kind is SourceKind.IOR_CSV
    assert parse_text((DATA / "fio-4jobs.json").read_text(), "x").kind is SourceKind.FIO_JSON
    with pytest.raises(ProbeError, match="not an IOR text report"):
        parse_text((DATA / "README.md").read_text(), "README.md")


def test_ior_text_gives_the_phase_figures_ior_printed() -> None:
    normal, slow = parsed("ior-fpp-text.txt"), parsed("ior-fpp-slowrank-text.txt")
    assert normal.tool_version == "4.1.0+dev" and normal.tasks == 4 and normal.repetitions == 2
    got = {(t.phase, t.iteration): t for t in slow.totals}
    assert len(got) == 4
    assert got[(Phase.READ, 0)].throughput_bytes_s == pytest.approx(39.90 * MIB)
    assert got[(Phase.READ, 1)].throughput_bytes_s == pytest.approx(40.85 * MIB)
    assert got[(Phase.WRITE, 1)].throughput_bytes_s == pytest.approx(2883.27 * MIB)
    # total(s) is the phase time; 64 MiB over it is IOR's bw (not the misleading close(s))
    read0 = got[(Phase.READ, 0)]
    assert read0.bytes == 64 * MIB and read0.seconds == pytest.approx(1.60)
    assert [t.throughput_bytes_s / MIB for t in normal.totals if t.phase is Phase.WRITE] == [
        pytest.approx(1716.00),
        pytest.approx(1782.53),
    ]
    assert not normal.ranks and not slow.ranks  # job-wide only: no rank is attributed


def test_ior_json_summary_iterations_come_from_order() -> None:
    doc = parsed("ior-fpp-slowrank-summary.json")
    assert doc.tasks == 4 and doc.tasks_per_node == 4 and doc.repetitions == 2
    read = [t for t in doc.totals if t.phase is Phase.READ]
    assert [t.iteration for t in read] == [0, 1]
    assert [t.throughput_bytes_s / MIB for t in read] == [
        pytest.approx(39.8350),
        pytest.approx(41.1789),
    ]
    write0 = next(t for t in doc.totals if t.phase is Phase.WRITE and t.iteration == 0)
    assert write0.throughput_bytes_s / MIB == pytest.approx(453.5923)  # the noisy one
    assert all(t.bytes == 64 * MIB for t in doc.totals)
    mean = (
        sum(
            t.throughput_bytes_s
            for t in parsed("ior-fpp-summary.json").totals
            if t.phase is Phase.READ
        )
        / 2
    )
    assert mean / MIB == pytest.approx(1652.34, abs=0.01)


def test_ior_csv_infers_iterations_from_blocks() -> None:
    doc = parsed("ior-fpp-slowrank-ranks.csv")
    assert doc.tasks == 4 and doc.repetitions == 2 and len(doc.ranks) == 16
    rank2 = {(r.phase, r.iteration): r for r in doc.ranks if r.rank == 2}
    assert rank2[(Phase.READ, 0)].seconds == pytest.approx(1.6066071987)
    assert rank2[(Phase.READ, 1)].throughput_bytes_s == pytest.approx(1.0795065166e7)
    assert rank2[(Phase.WRITE, 0)].seconds == pytest.approx(7.5459480286e-03)
    assert all(r.bytes == 16 * MIB for r in doc.ranks)  # throughput x runtime = 16 MiB each


def test_fio_jobs_are_ranks_in_order() -> None:
    doc = parsed("fio-4jobs.json")
    assert doc.tool_version == "fio-3.33" and doc.tasks == 4
    assert [r.rank for r in doc.ranks] == [0, 1, 2, 3]
    assert all(r.phase is Phase.READ and r.iteration == 0 for r in doc.ranks)
    kib = [round(r.throughput_bytes_s / 1024) for r in doc.ranks]
    assert kib == [496485, 528516, 10221, 512000]  # fio's bw (KiB/s): 496484 528516 10220 512000
    assert doc.ranks[2].seconds == pytest.approx(1.603)
    assert abs(doc.ranks[2].bytes - 16 * MIB) < 16


def test_several_fio_documents_number_ranks_on(tmp_path: Path) -> None:
    paths = [DATA / "fio-4jobs.json", DATA / "fio-4jobs.json"]
    files = load_files(paths)
    assert [r.rank for f in files for r in f.ranks] == list(range(8))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("corrupt-truncated-midline-ranks.csv", "truncated"),
        ("corrupt-truncated-block-ranks.csv", "truncated"),
        ("corrupt-bad-number-ranks.csv", "not a usable number"),
        ("corrupt-two-runs-ranks.csv", "second header"),
        ("corrupt-truncated-summary.json", "not valid JSON"),
        ("corrupt-truncated-text.txt", "no 'Finished' line"),
        ("corrupt-missing-row-text.txt", "1 read results, expected 2"),
        ("corrupt-truncated-fio.json", "truncated"),
    ],
)
def test_corrupt_files_raise_probe_error(name: str, message: str) -> None:
    with pytest.raises(ProbeError, match=message) as err:
        parsed(name)
    assert str(err.value).startswith(f"{name}: ") and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "name",
    ["ior-fpp-slowrank-ranks.csv", "ior-fpp-slowrank-text.txt", "ior-fpp-slowrank-summary.json"],
)
def test_every_cut_inside_a_line_is_refused(name: str) -> None:
    """Truncation at any byte that is not a line end: ProbeError, never another exception
    and never a partial result (text cut inside its last line, 'Finished', is complete).
    A CSV cut exactly at a block boundary looks like a smaller run by itself; the summary
    cross-check in test_mismatched_files_and_layouts_are_refused catches it."""
    text = (DATA / name).read_text()
    refused = 0
    for cut in range(len(text) - 1):
        if text[cut - 1] == "\n" and name.endswith(".csv"):
            continue
        try:
            doc = parse_text(text[:cut], name)
        except ProbeError:
            refused += 1
            continue
        assert len(doc.ranks) + len(doc.totals) in (4, 16), cut
        assert cut > text.rindex("Finished") + len("Finished :"), cut
    assert refused > len(text) * 0.9


def test_slow_rank_is_the_in_job_outlier() -> None:
    files = [parsed("ior-fpp-slowrank-summary.json"), parsed("ior-fpp-slowrank-ranks.csv")]
    job = judge_job(files, FOUR, VerdictPolicy())
    assert [s.node for s in job.slow] == ["n3"]  # rank 2 -> third node (block, 1 per node)
    assert "in 2 of 2 judged iterations" in job.slow[0].reason
    outliers = {(f.node, f.phase, f.iteration) for f in job.figures if f.outlier}
    assert outliers == {("n3", Phase.READ, 0), ("n3", Phase.READ, 1)}
    # the write phases (0.14 s and 0.03 s at most) are too short to judge: no z, no outlier
    writes = [f for f in job.figures if f.node is not None and f.phase is Phase.WRITE]
    assert writes and all(f.z is None and not f.outlier for f in writes)
    assert any(n.startswith("write too short to judge in iteration(s) 0, 1:") for n in job.notes)
    # with no minimum, rank 2 (which wrote fastest) is not an outlier on the slow side
    rules = IngestPolicy(min_phase_s=0.0, min_phase_mib=0.0)
    n3w = [f for f in judge_job(files, FOUR, VerdictPolicy(), rules).figures if f.node == "n3"]
    assert all(f.z is not None and f.z > 0 for f in n3w if f.phase is Phase.WRITE)
    whole = {(f.phase, f.iteration): f for f in job.figures if f.node is None}
    assert whole[(Phase.READ, 0)].source is SourceKind.IOR_JSON
    assert whole[(Phase.READ, 0)].throughput_bytes_s / MIB == pytest.approx(39.835)
    drag = whole[(Phase.READ, 0)].ratio
    assert drag is not None and drag < 0.05  # the slowest node took >20x the median node


def test_normal_run_has_no_outlier() -> None:
    files = [parsed("ior-fpp-summary.json"), parsed("ior-fpp-ranks.csv")]
    rules = IngestPolicy(min_phase_s=0.0, min_phase_mib=0.0)  # judge even 30 ms phases
    job = judge_job(files, FOUR, VerdictPolicy(), rules)
    assert job.slow == () and not any(f.outlier for f in job.figures)
    nodes = [f for f in job.figures if f.node is not None]
    assert len(nodes) == 16 and all(f.z is not None and abs(f.z) < 3.5 for f in nodes)


def test_fio_slow_job_is_the_outlier() -> None:
    job = judge_job([parsed("fio-4jobs.json")], FOUR, VerdictPolicy())
    assert [s.node for s in job.slow] == ["n3"]


def test_two_ranks_per_node_attribute_to_the_node() -> None:
    two = block_layout(["a", "b"], 2)  # ranks 0,1 on a; 2,3 on b
    job = judge_job([parsed("ior-fpp-slowrank-ranks.csv")], two, VerdictPolicy(min_peers=2))
    read0 = {f.node: f for f in job.figures if f.phase is Phase.READ and f.iteration == 0}
    assert read0["b"].ranks == 2 and read0["b"].bytes == 32 * MIB
    assert read0["b"].seconds == pytest.approx(1.6066071987)  # its slowest rank
    assert read0[None].source is SourceKind.IOR_CSV  # no summary: whole-job row derived
    # two nodes: the median sits halfway, so neither can be 3.5 robust sigmas below it
    assert job.slow == ()


def test_summary_alone_says_it_cannot_attribute() -> None:
    job = judge_job([parsed("ior-fpp-slowrank-text.txt")], None, VerdictPolicy())
    assert job.slow == () and all(f.node is None for f in job.figures)
    assert any("no per-rank data" in n for n in job.notes)


def test_too_few_nodes_means_no_judgement() -> None:
    layout = block_layout(["a", "b"], 2)
    job = judge_job([parsed("ior-fpp-slowrank-ranks.csv")], layout, VerdictPolicy())
    assert job.slow == () and any("min_peers" in n for n in job.notes)
    assert all(f.z is None for f in job.figures)


def test_mismatched_files_and_layouts_are_refused() -> None:
    lines = (DATA / "ior-fpp-ranks.csv").read_text().splitlines()
    one_iteration = parse_text("\n".join(lines[:9]) + "\n", "cut.csv")  # valid by itself
    assert one_iteration.repetitions == 1
    with pytest.raises(ProbeError, match=r"repetitions 1 but ior-fpp-summary\.json says 2"):
        judge_job([parsed("ior-fpp-summary.json"), one_iteration], FOUR, VerdictPolicy())
    writes = parse_text("\n".join(lines[:5]) + "\n", "w.csv")
    with pytest.raises(ProbeError, match="phases differ"):
        judge_job([parsed("ior-fpp-summary.json"), writes], FOUR, VerdictPolicy())
    with pytest.raises(ConfigError, match="separately"):
        judge_job([parsed("ior-fpp-ranks.csv"), parsed("fio-4jobs.json")], FOUR, VerdictPolicy())
    with pytest.raises(ConfigError, match="one IOR summary"):
        judge_job(
            [parsed("ior-fpp-text.txt"), parsed("ior-fpp-summary.json")], FOUR, VerdictPolicy()
        )
    with pytest.raises(ConfigError, match="outside the task layout"):
        judge_job([parsed("ior-fpp-ranks.csv")], block_layout(["a", "b", "c"], 1), VerdictPolicy())
    with pytest.raises(ConfigError, match="task layout"):
        judge_job([parsed("ior-fpp-ranks.csv")], None, VerdictPolicy())
    with pytest.raises(ConfigError, match="ranks-per-node"):
        block_layout(["a"], 0)


def test_outputs_near_finds_a_job_by_id(tmp_path: Path) -> None:
    ior = tmp_path / "ior"
    ior.mkdir()
    for src, dst in (
        ("ior-fpp-summary.json", "ior-77.summary.json"),
        ("ior-fpp-ranks.csv", "ior-77.ranks.csv"),
    ):
        (ior / dst).write_bytes((DATA / src).read_bytes())
    (ior / "ior-78.ranks.csv").write_text("another job")
    assert [p.name for p in outputs_near(ior, "77")] == ["ior-77.summary.json", "ior-77.ranks.csv"]
    fio = tmp_path / "fio"
    fio.mkdir()
    for t in range(12):
        (fio / f"fio.9.{t}.json").write_bytes((DATA / "fio-4jobs.json").read_bytes())
    found = outputs_near(fio, "9")
    assert [p.name for p in found] == [f"fio.9.{t}.json" for t in range(12)]  # 2 before 10
    assert [r.rank for f in load_files(found) for r in f.ranks] == list(range(48))
    (fio / "fio.9.5.json").unlink()
    with pytest.raises(ConfigError, match="gaps"):
        outputs_near(fio, "9")
    with pytest.raises(ConfigError, match="no outputs of job 1"):
        outputs_near(ior, "1")
    (ior / "fio.77.0.json").write_text("{}")
    with pytest.raises(ConfigError, match="both IOR and fio"):
        outputs_near(ior, "77")
