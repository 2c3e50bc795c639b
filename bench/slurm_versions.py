"""Which Slurm versions the tests ran against, and how they fared: from pytest's junit XML.

One junit XML per Slurm version (a run with SCREENER_TEST_SLURM=V, or unset for the host's
22.05), given as VERSION=PATH; a version given twice merges its runs (split by test
file). Writes bench/results/slurm-versions.json (per version: the Slurm package that ran,
the run's date, tests passed/failed/skipped, per test file) and regenerates the table
between `<!-- versions-table -->` and `<!-- /versions-table -->` in docs/slurm.md.
Versions not given keep their earlier entry in the JSON.

    SCREENER_TEST_SLURM=24.11 .venv/bin/python -m pytest -m "cluster and not serial" \\
        -n 2 --dist loadfile --no-loadscope-reorder --junitxml=/tmp/slurm-24.11.xml
    .venv/bin/python bench/slurm_versions.py 24.11=/tmp/slurm-24.11.xml 26.05=/tmp/slurm-26.05.xml
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deploy.slurmroot import DEFAULT_CACHE, read_stamp, root_path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "slurm-versions.json"
DOC = REPO / "docs" / "slurm.md"
BEGIN = "<!-- versions-table -->"
END = "<!-- /versions-table -->"
HOST = "22.05"  # the host's Slurm (Debian 12), run when SCREENER_TEST_SLURM is unset


@dataclass
class FileCounts:
    passed: int = 0
    failed: int = 0  # failures and errors
    skipped: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)  # test names

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 1),
            "failures": self.failures,
        }


def test_file(classname: str, file_attr: str | None) -> str:
    """`tests.test_prolog.TestX` (or a `file` attribute) -> `tests/test_prolog.py`."""
    if file_attr:
        return file_attr
    parts = classname.split(".")
    mods = [p for p in parts if not p[:1].isupper()] or parts  # drop test classes
    return "/".join(mods) + ".py"


def parse_junit(text: str) -> tuple[str, dict[str, FileCounts]]:
    """(the run's timestamp, counts per test file) of one junit XML document. A test with
    a <failure> or <error> is failed (an error in a fixture's teardown after a pass counts
    once, as failed); <skipped> is skipped; anything else passed."""
    root = ET.fromstring(text)
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    stamp = next((s.get("timestamp", "") for s in suites if s.get("timestamp")), "")
    files: dict[str, FileCounts] = {}
    seen: dict[tuple[str, str], str] = {}  # (file, name) -> outcome so far
    for suite in suites:
        for case in suite.iter("testcase"):
            path = test_file(case.get("classname", ""), case.get("file"))
            name = case.get("name", "")
            kids = {k.tag for k in case}
            outcome = (
                "failed"
                if kids & {"failure", "error"}
                else "skipped"
                if "skipped" in kids
                else "passed"
            )
            counts = files.setdefault(path, FileCounts())
            counts.seconds += float(case.get("time", "0") or 0)
            key = (path, name)
            before = seen.get(key)
            if before is not None:  # a teardown error is a second record of the same test
                if outcome == "failed" and before != "failed":
                    setattr(counts, before, getattr(counts, before) - 1)
                    counts.failed += 1
                    counts.failures.append(name)
                    seen[key] = "failed"
                continue
            seen[key] = outcome
            setattr(counts, outcome, getattr(counts, outcome) + 1)
            if outcome == "failed":
                counts.failures.append(name)
    return stamp, dict(sorted(files.items()))


def slurm_package(version: str, cache: Path = DEFAULT_CACHE) -> str:
    """The Slurm that ran: the root's stamp (24.11, 26.05), the host's package (22.05)."""
    if version != HOST:
        stamp = read_stamp(root_path(version, cache))
        return f"slurm-wlm {stamp.slurm} ({stamp.suite})" if stamp else "unknown (no root)"
    res = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "slurmctld"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"slurm-wlm {res.stdout.strip()} (host)" if res.returncode == 0 else "unknown"


def summary(version: str, package: str, stamp: str, files: dict[str, FileCounts]) -> dict[str, Any]:
    """One version's entry of slurm-versions.json."""
    total = FileCounts()
    for c in files.values():
        total.passed += c.passed
        total.failed += c.failed
        total.skipped += c.skipped
        total.seconds += c.seconds
    return {
        "version": version,
        "slurm": package,
        "date": stamp,
        "passed": total.passed,
        "failed": total.failed,
        "skipped": total.skipped,
        "seconds": round(total.seconds, 1),
        "files": {path: c.to_json() for path, c in files.items()},
    }


def render_table(entries: dict[str, dict[str, Any]]) -> str:
    """The markdown table of docs/slurm.md (between the markers), one row per version."""
    rows = [
        "| Slurm | package | run (UTC) | tests run | passed | failed | skipped | test files |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for version in sorted(entries, key=lambda v: tuple(int(x) for x in v.split("."))):
        e = entries[version]
        names = [Path(p).name for p in e["files"]]
        failing = [f"{Path(p).name} ({c['failed']})" for p, c in e["files"].items() if c["failed"]]
        files = f"{len(names)}" + (  # a full suite's ~95 names would swamp the table
            ": " + ", ".join(n.removesuffix(".py") for n in names) if len(names) <= 24 else ""
        )
        if failing:
            files += "; failed in " + ", ".join(failing)
        rows.append(
            f"| {version} | {e['slurm']} | {e['date'][:16].replace('T', ' ')} "
            f"| {e.get('selection') or 'as listed'} | {e['passed']} "
            f"| {e['failed']} | {e['skipped']} | {files} |"
        )
    note = (
        "Generated by `bench/slurm_versions.py` from the junit XML of the test runs "
        "(bench/results/slurm-versions.json); do not edit by hand."
    )
    return "\n".join([note, "", *rows])


def replace_block(doc: str, block: str) -> str:
    """``doc`` with the text between the markers replaced by ``block``; ValueError if the
    markers are missing or out of order."""
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise ValueError(f"docs/slurm.md has no {BEGIN} ... {END} block")
    return doc[: start + len(BEGIN)] + "\n" + block + "\n" + doc[end:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", metavar="VERSION=PATH", help="junit XML of a run")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--doc", type=Path, default=DOC)
    ap.add_argument("--no-doc", action="store_true", help="write the JSON only")
    ap.add_argument(
        "--selection",
        action="append",
        default=[],
        metavar="VERSION=TEXT",
        help="what was run, for the table (e.g. 24.11='-m \"cluster and not serial\"')",
    )
    args = ap.parse_args(argv)
    entries: dict[str, dict[str, Any]] = {}
    if args.out.exists():
        entries = json.loads(args.out.read_text()).get("versions", {})
    runs: dict[str, tuple[str, dict[str, FileCounts]]] = {}
    for run in args.runs:
        version, sep, path = run.partition("=")
        if not sep or not path:
            ap.error(f"expected VERSION=PATH, got {run!r}")
        stamp, files = parse_junit(Path(path).read_text())
        if version in runs:  # several runs of one version (files split between them)
            first, merged = runs[version]
            stamp, files = min(first, stamp), {**merged, **files}  # a file run again: latest
        runs[version] = (stamp, dict(sorted(files.items())))
    selections = dict(sel.partition("=")[::2] for sel in args.selection)
    for version, (stamp, files) in runs.items():
        entries[version] = summary(version, slurm_package(version), stamp, files)
        entries[version]["selection"] = selections.get(version, "")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"versions": entries}, indent=2) + "\n")
    for version, e in sorted(entries.items()):
        print(
            f"{version}: {e['slurm']}: {e['passed']} passed, {e['failed']} failed, "
            f"{e['skipped']} skipped ({len(e['files'])} files)"
        )
    if not args.no_doc:
        args.doc.write_text(replace_block(args.doc.read_text(), render_table(entries)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
