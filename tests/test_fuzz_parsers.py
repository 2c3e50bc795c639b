"""Parsers fuzzed with hypothesis: whatever a node prints, only ProbeError (or a result) comes
back, never another exception (issue 11). Inputs are random text, random JSON, and real
captures (tests/data/probe) mutated: cut, spliced, values swapped for other JSON values.

The sinfo/squeue parsers (screener/slurm/parse.py) get the same treatment with their own
contract: a list of valid records or a one-line SlurmError. Inputs: random text and bytes,
random documents in both shapes (22.05 and 23.02+/24.11), and the captures of
tests/data/slurm mutated.

8 probe-parser tests + 5 Slurm-parser tests, 1,300 inputs each: about 16,900 generated inputs;
hypothesis' deadline is off (CI machines are slow).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from screener.errors import ProbeError, SlurmError
from screener.policy import ProbePolicy
from screener.probe.facts import parse_facts, parse_mdstat, parse_smart_log
from screener.probe.fio import parse_fio
from screener.probe.iostat import parse_iostat
from screener.probe.preflight import parse_preflight
from screener.probe_data import IostatSample
from screener.slurm.client import SlurmJob, SlurmNode
from screener.slurm.job_id import JobKey
from screener.slurm.parse import parse_sinfo, parse_squeue_keyed

DATA = Path(__file__).parent / "data" / "probe"
SLURM_DATA = Path(__file__).parent / "data" / "slurm"
EXAMPLES = 1300  # per test; 13 tests -> 16,900 inputs
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,  # no .hypothesis directory in the worktree
)


def captures(kind: str) -> list[str]:
    return [p.read_text() for p in sorted((DATA / kind).iterdir()) if p.suffix in (".json", ".txt")]


JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:8]):
            out += _paths(v, (*prefix, i))
    return out


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {**doc, head: _replace(doc[head], rest, value)}
    copy = list(doc)
    copy[head] = _replace(copy[head], rest, value)
    return copy


@st.composite
def mutated_json(draw: st.DrawFn, docs: list[Any]) -> str:
    """A real JSON capture with 1-3 values (or whole subtrees) replaced by random JSON."""
    doc = draw(st.sampled_from(docs))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        doc = _replace(doc, path, draw(JSON_VALUES))
    return json.dumps(doc, indent=2, allow_nan=True)


@st.composite
def mutated_text(draw: st.DrawFn, texts: list[str]) -> str:
    """A real capture cut, spliced with noise, or with characters flipped."""
    text = draw(st.sampled_from(texts))
    op = draw(st.sampled_from(["cut", "splice", "flip", "lines"]))
    if not text:
        return draw(st.text())
    i = draw(st.integers(0, len(text)))
    if op == "cut":
        return text[:i]
    if op == "splice":
        return text[:i] + draw(st.text(max_size=40)) + text[i:]
    if op == "flip":
        j = min(len(text), i + draw(st.integers(1, 8)))
        return text[:i] + draw(st.text(min_size=1, max_size=8)) + text[j:]
    lines = text.splitlines()
    return "\n".join(draw(st.permutations(lines))[: draw(st.integers(0, len(lines)))])


def only_probe_errors(parse: Callable[[str], Any], text: str) -> Any:
    try:
        return parse(text)
    except ProbeError as exc:
        assert "\n" not in str(exc)  # one line for the admin
        return None


def _fio_docs() -> list[Any]:
    docs = []
    for text in captures("fio"):
        start = text.find("\n{") + 1 if not text.startswith("{") else 0
        try:
            docs.append(json.loads(text[start:]))
        except ValueError:
            continue
    return docs


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:  # captures of iostat killed mid-document are not JSON
        return None


FIO_TEXTS, FIO_DOCS = captures("fio"), _fio_docs()
IOSTAT_TEXTS = captures("iostat")
IOSTAT_DOCS = [d for d in map(_json_or_none, IOSTAT_TEXTS) if d is not None]
FACTS_TEXTS = captures("facts")
SMART_DOCS = [d for d in map(_json_or_none, FACTS_TEXTS) if d is not None]
PREFLIGHT_TEXTS = captures("preflight")


@FUZZ
@given(st.one_of(mutated_json(FIO_DOCS), mutated_text(FIO_TEXTS), st.text()))
def test_fuzz_fio(text: str) -> None:
    run = only_probe_errors(lambda t: parse_fio(t, "node01"), text)
    if run is not None:
        for job in run.jobs:
            assert 0.0 <= job.slow_fraction <= 1.0 or math.isnan(job.slow_fraction)


@FUZZ
@given(st.one_of(mutated_json(IOSTAT_DOCS), mutated_text(IOSTAT_TEXTS), st.text()))
def test_fuzz_iostat(text: str) -> None:
    samples = only_probe_errors(lambda t: parse_iostat(t, "node01"), text)
    if samples is not None:
        assert all(isinstance(s, IostatSample) for s in samples)


@FUZZ
@given(st.one_of(mutated_text(FACTS_TEXTS), st.text()))
def test_fuzz_facts(text: str) -> None:
    only_probe_errors(lambda t: parse_facts(t, "node01"), text)


@FUZZ
@given(st.one_of(mutated_json(SMART_DOCS), mutated_text(FACTS_TEXTS), st.text()))
def test_fuzz_smart_log(text: str) -> None:
    only_probe_errors(lambda t: parse_smart_log(t, "node01"), text)


@FUZZ
@given(
    st.one_of(
        mutated_text([t for t in FACTS_TEXTS if "md" in t or "Personalities" in t] or [""]),
        st.text(),
    )
)
def test_fuzz_mdstat(text: str) -> None:
    only_probe_errors(parse_mdstat, text)


@FUZZ
@given(
    st.one_of(mutated_text(PREFLIGHT_TEXTS), st.text()),
    st.integers(min_value=-(2**31), max_value=2**31),
)
def test_fuzz_preflight(text: str, exit_code: int) -> None:
    only_probe_errors(lambda t: parse_preflight(t, exit_code, "node01", ProbePolicy()), text)


@FUZZ
@given(st.binary(max_size=400))
def test_fuzz_fio_and_iostat_on_bytes(raw: bytes) -> None:
    # What a transport with errors="replace" hands over from arbitrary bytes.
    text = raw.decode("utf-8", errors="replace")
    only_probe_errors(lambda t: parse_fio(t, "n"), text)
    only_probe_errors(lambda t: parse_iostat(t, "n"), text)


@FUZZ
@given(st.dictionaries(st.text(max_size=12), JSON_VALUES, max_size=6))
def test_fuzz_fio_random_documents(doc: dict[str, Any]) -> None:
    doc.setdefault("jobs", [doc.copy()])
    only_probe_errors(lambda t: parse_fio(t, "n"), json.dumps(doc, indent=1))


# ---- Slurm: sinfo --json / squeue --json ----------------------------------------------------

SINFO_TEXTS = [p.read_text() for p in sorted(SLURM_DATA.glob("*.json")) if "squeue" not in p.name]
SQUEUE_TEXTS = [p.read_text() for p in sorted(SLURM_DATA.glob("squeue*.json"))]
SINFO_DOCS = [json.loads(t) for t in SINFO_TEXTS]
SQUEUE_DOCS = [json.loads(t) for t in SQUEUE_TEXTS]
NAMES = st.one_of(
    st.sampled_from(["cn001", "node01", "-rf", "a;b", "x" * 70, "", "n\nx", "nœud"]),
    st.text(max_size=12),
    JSON_SCALARS,
)
STATES = st.one_of(
    st.sampled_from(["idle", "IDLE", "DRAIN", "MIXED", "down*", "ALLOCATED~"]),
    st.lists(st.sampled_from(["IDLE", "DRAIN", "DOWN", "NOT_RESPONDING", ""]), max_size=3),
    JSON_VALUES,
)
HOSTLISTS = st.one_of(
    st.sampled_from(["", "cn[001-002,005]", "node[01-", "node[5-1]", "n[1-100000]", "a,,b"]),
    st.text(alphabet="cn0123456789[],-", max_size=16),
    JSON_VALUES,
)
NODE_RECORD = st.fixed_dictionaries(
    {"name": NAMES},
    optional={
        "state": STATES,
        "state_flags": STATES,
        "reason": JSON_VALUES,
        "partitions": st.one_of(st.lists(NAMES, max_size=3), JSON_VALUES),
    },
)
SINFO_RECORD = st.fixed_dictionaries(
    {},
    optional={
        "nodes": st.one_of(
            st.fixed_dictionaries({"nodes": st.lists(NAMES, max_size=3)}), JSON_VALUES
        ),
        "node": st.one_of(st.fixed_dictionaries({"state": STATES}), JSON_VALUES),
        "reason": JSON_VALUES,
        "partition": st.one_of(st.fixed_dictionaries({"name": NAMES}), JSON_VALUES),
    },
)
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.fixed_dictionaries({"set": st.booleans(), "number": JSON_SCALARS}),
    JSON_VALUES,
)
JOB_RECORD = st.fixed_dictionaries(
    {"job_id": NUMBERS},
    optional={
        "nodes": HOSTLISTS,
        "job_state": STATES,
        "comment": JSON_VALUES,
        "name": JSON_VALUES,
        "partition": JSON_VALUES,
        "state_reason": JSON_VALUES,
        "restart_cnt": NUMBERS,
    },
)
ERRORS = st.one_of(st.just([]), st.none(), JSON_VALUES)
SLURM_DOCS = st.one_of(
    st.fixed_dictionaries(
        {"nodes": st.one_of(st.lists(NODE_RECORD | JSON_VALUES, max_size=4), JSON_VALUES)},
        optional={"errors": ERRORS},
    ),
    st.fixed_dictionaries(
        {"sinfo": st.one_of(st.lists(SINFO_RECORD | JSON_VALUES, max_size=4), JSON_VALUES)},
        optional={"errors": ERRORS},
    ),
    st.fixed_dictionaries(
        {"jobs": st.one_of(st.lists(JOB_RECORD | JSON_VALUES, max_size=4), JSON_VALUES)},
        optional={"errors": ERRORS},
    ),
)


def only_slurm_errors(parse: Callable[[str], Any], text: str) -> Any:
    try:
        return parse(text)
    except SlurmError as exc:
        assert "\n" not in str(exc)  # one line for the admin
        assert len(str(exc)) < 500
        return None


def check_nodes(nodes: list[SlurmNode] | None) -> None:
    """What the hooks rely on: unique valid names in order, upper-case states, plain text."""
    if nodes is None:
        return
    names = [n.name for n in nodes]
    assert names == sorted(set(names))
    for n in nodes:
        assert isinstance(n.reason, str) and all(isinstance(p, str) for p in n.partitions)
        assert all(s and s == s.upper() for s in n.states)
        assert not n.name.startswith("-") and 0 < len(n.name) <= 63


def check_jobs(keyed: list[tuple[JobKey, SlurmJob]] | None) -> None:
    if keyed is None:
        return
    for _, j in keyed:
        int(j.job_id)  # a number, whatever shape it came in
        assert isinstance(j.restarts, int) and isinstance(j.comment, str)
        assert all(not n.startswith("-") and 0 < len(n) <= 63 for n in j.nodes)


def both(text: str) -> None:
    check_nodes(only_slurm_errors(parse_sinfo, text))
    check_jobs(only_slurm_errors(parse_squeue_keyed, text))


@FUZZ
@given(st.one_of(mutated_json(SINFO_DOCS), mutated_text(SINFO_TEXTS)))
def test_fuzz_sinfo_mutated_captures(text: str) -> None:
    check_nodes(only_slurm_errors(parse_sinfo, text))


@FUZZ
@given(st.one_of(mutated_json(SQUEUE_DOCS), mutated_text(SQUEUE_TEXTS)))
def test_fuzz_squeue_mutated_captures(text: str) -> None:
    check_jobs(only_slurm_errors(parse_squeue_keyed, text))


@FUZZ
@given(SLURM_DOCS)
def test_fuzz_slurm_random_documents(doc: dict[str, Any]) -> None:
    both(json.dumps(doc, allow_nan=True))


@FUZZ
@given(st.one_of(st.text(), st.binary(max_size=400).map(lambda b: b.decode("utf-8", "replace"))))
def test_fuzz_slurm_text_and_bytes(text: str) -> None:
    both(text)


@FUZZ
@given(st.integers(1, 3000), st.sampled_from(["[", '{"nodes":[', '{"a":']), st.integers(0, 1))
def test_fuzz_slurm_deep_and_huge(depth: int, opener: str, huge: int) -> None:
    # Deeply nested documents (the JSON decoder's recursion) and integers past Python's
    # 4,300-digit str limit, which json.loads refuses with a plain ValueError.
    both(opener * depth if not huge else '{"jobs": [{"job_id": ' + "9" * (4000 + depth) + "}]}")
