"""Parsers fuzzed with hypothesis: whatever a node prints, only ProbeError (or a result) comes
back, never another exception (issue 11). Inputs are random text, random JSON, and real
captures (tests/data/probe) mutated: cut, spliced, values swapped for other JSON values.

The sinfo/squeue parsers are the Slurm helper's (another branch) and are not fuzzed here.
About 10,400 generated inputs in total; hypothesis' deadline is off (CI machines are slow).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from screener.errors import ProbeError
from screener.model import IostatSample
from screener.policy import ProbePolicy
from screener.probe.facts import parse_facts, parse_mdstat, parse_smart_log
from screener.probe.fio import parse_fio
from screener.probe.iostat import parse_iostat
from screener.probe.preflight import parse_preflight

DATA = Path(__file__).parent / "data" / "probe"
EXAMPLES = 1300  # per test; 8 tests -> 10,400 inputs
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
