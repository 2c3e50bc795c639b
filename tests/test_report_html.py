"""`screener report RUN --html`: one self-contained file, opened in headless Chromium (the
Debian package) with the network off; the screenshot shows the slow node's red bar and the
peer median line, and the page logs nothing to the console."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from admin_seed import SLOW, Seeded, seed_fleet
from pngpixels import count_colour

from screener.report.html import MEDIAN_COLOUR, SLOW_COLOUR
from screener.store import open_store
from screener.store.migrate import upgrade
from tests import cli_fork

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CONSOLE = re.compile(r":CONSOLE[:(]")  # Chromium's stderr line for any console message


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def chromium(page: Path, tmp: Path, *action: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on ``page`` with every background connection off (closed network)."""
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    profile.mkdir()
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # we run as root in a container
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",  # else its connections are refused here
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",  # a new empty profile: nothing cached
        "--enable-logging=stderr",  # console messages and uncaught errors go to stderr
        "--v=0",
        "--virtual-time-budget=10000",  # let plotly finish drawing before the capture
        *action,
        page.as_uri(),
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Seeded, dict[str, Path]]:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: `make apt` (Debian package chromium)")
    tmp = tmp_path_factory.mktemp("report")
    url = f"sqlite:///{tmp / 'r.db'}"
    upgrade(url)
    with open_store(url) as store:
        seeded = seed_fleet(store, datetime.now(UTC).replace(microsecond=0))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCREENER_")}
    env["SCREENER_DATABASE_URL"] = url
    out = {}
    for name, run in (("slow", seeded.sweeps[-1]), ("healthy", seeded.sweeps[0])):
        page = tmp / f"{name}.html"
        res = cli_fork.run(
            ["report", str(run), "--html", str(page)], env=env, timeout=120, check=False
        )
        assert res.returncode == 0, res.stderr
        out[name] = page
    return tmp, seeded, out


def test_report_is_self_contained(reports: tuple[Path, Seeded, dict[str, Path]]) -> None:
    _, _, pages = reports
    html = pages["slow"].read_text()
    assert not re.search(r"<script[^>]+src=", html) and "<link" not in html
    assert "<iframe" not in html and "@import" not in html
    assert html.count("Plotly.newPlot") == 2 and SLOW in html
    assert "unreachable: connection refused" in html  # the verdict table with reasons


def test_chromium_draws_the_plots_with_the_slow_node_highlighted(
    reports: tuple[Path, Seeded, dict[str, Path]],
) -> None:
    tmp, _, pages = reports
    shots = {}
    for name, page in pages.items():
        shot = tmp / f"{name}.png"
        res = chromium(page, tmp, f"--screenshot={shot}", "--window-size=1280,1400")
        assert shot.exists(), res.stderr[-2000:]
        assert [ln for ln in res.stderr.splitlines() if CONSOLE.search(ln)] == []
        shots[name] = shot
    red, green = _rgb(SLOW_COLOUR), _rgb(MEDIAN_COLOUR)
    # the slow node's bar and r_await line are red; a run with no slow node has no red
    assert count_colour(shots["slow"], red) > 500
    assert count_colour(shots["healthy"], red) == 0
    assert count_colour(shots["slow"], green) > 100  # the dashed peer-median line
    dom = chromium(pages["slow"], tmp, "--dump-dom")
    assert dom.stdout.count('class="main-svg"') >= 4  # plotly drew both figures (2 layers each)


def test_the_console_check_catches_a_broken_page(
    reports: tuple[Path, Seeded, dict[str, Path]],
) -> None:
    tmp, _, _ = reports
    broken = tmp / "broken.html"
    broken.write_text("<html><body><script>throw new Error('boom')</script></body></html>")
    res = chromium(broken, tmp, "--dump-dom")
    lines = [ln for ln in res.stderr.splitlines() if CONSOLE.search(ln)]
    assert len(lines) == 1 and "Uncaught Error: boom" in lines[0]


@pytest.mark.parametrize(
    ("run", "out", "message"),
    [("9999", "r.html", "run 9999 does not exist"), ("1", "missing/r.html", "does not exist")],
)
def test_report_bad_input_is_one_line(
    reports: tuple[Path, Seeded, dict[str, Path]], run: str, out: str, message: str
) -> None:
    tmp, _, _ = reports
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCREENER_")}
    env["SCREENER_DATABASE_URL"] = f"sqlite:///{tmp / 'r.db'}"
    res = cli_fork.run(["report", run, "--html", str(tmp / out)], env=env, timeout=120)
    assert res.returncode == 1 and res.stderr.startswith("screener: error: ")
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp / out).exists()


def test_bandwidth_axis_starts_a_decade_below_the_smallest_figure() -> None:
    """A one-node run read 1,401 and wrote 2,471 MB/s: the log axis autoranged from the read
    bar, which looked 10x shorter than the write bar, with no tick to read (seen by eye)."""
    from datetime import UTC, datetime

    from screener.probe_data import Status, Trigger
    from screener.report.html import bandwidth_figure
    from screener.store.query_rows import RunDetail, RunNodeRow, RunRow

    node = RunNodeRow("vm", Status.OK, 1401.1, 2470.7, 1.76, 28.2, None, False, (), "ok", (), None)
    run = RunRow(2, Trigger.MANUAL, None, "vm", 1, datetime.now(UTC), None, "done", False, "", "x")
    fig = bandwidth_figure(RunDetail(run, None, None, (node,)))
    assert list(fig.layout.yaxis.range) == [2, 4]  # 100 .. 10,000 MB/s, labelled decades
    slow = RunNodeRow("n3", Status.SLOW_READ, 20.0, 2368.4, 118, 3305, -51, True, (), "s", (), None)
    fig = bandwidth_figure(RunDetail(run, None, 1776.0, (node, slow)))
    assert list(fig.layout.yaxis.range) == [0, 4]


def test_a_read_only_run_plots_its_reads() -> None:
    """The prolog's triage writes nothing: its nodes still get read bars (they were left
    out of the plot when a write figure was required), with no write bar made up."""
    from datetime import UTC, datetime

    from screener.probe_data import Status, Trigger
    from screener.report.html import BAR_LIMIT, bandwidth_figure
    from screener.store.query_rows import RunDetail, RunNodeRow, RunRow

    now = datetime.now(UTC)
    run = RunRow(3, Trigger.PROLOG, "7", "n[1-9]", 2, now, None, "done", False, "", "x")
    rows = [
        RunNodeRow(f"n{i}", Status.OK, 300.0, None, None, 9.0, None, False, (), "ok", (), None)
        for i in range(1, BAR_LIMIT + 3)  # more than the bar limit: still bars, no scatter
    ]
    fig = bandwidth_figure(RunDetail(run, None, 300.0, tuple(rows)))
    read, write = fig.data
    assert list(read.y) == [300.0] * len(rows) and all(y is None for y in write.y)
