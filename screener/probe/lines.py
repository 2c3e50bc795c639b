"""`screener probe --local --json`: one node's probe as short lines, for the sweep's
Slurm step (``srun ... screener probe --local --json``), and their inverse.

Only raw outputs, facts and the recipe fingerprint travel; the sweep re-parses fio/iostat
itself, so the figures it judges come from the same parsers as every other run, and each
probe keeps the recipe it was measured with (history and fleet peers compare like with
like). Deep mode adds SNIA-style rounds (screener.steady).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import zlib
from collections.abc import Sequence
from typing import Any

from screener.errors import ProbeError
from screener.probe.fio import parse_fio
from screener.probe.iostat import parse_iostat
from screener.probe_data import MdStatus, NodeFacts, NodeProbe, SmartLog

__all__ = ["node_lines", "parse_node_lines", "probe_dict"]


def probe_dict(p: NodeProbe) -> dict[str, Any]:
    """What a node sends back for one round."""
    return {
        "node": p.node,
        "error": p.error,
        "error_kind": p.error_kind,
        "duration_s": round(p.duration_s, 3),
        "raw_fio": p.raw_fio,
        "raw_iostat": p.raw_iostat,
        "facts": dataclasses.asdict(p.facts) if p.facts is not None else None,
        "recipe": p.recipe,
        "notes": list(p.notes),  # planted names moved aside on the node
    }


# srun forwards task output in buffers of a few KiB: one long line from each of several
# tasks gets cut and interleaved (seen here: 2 of 6 nodes lost). So the document travels as
# short, self-describing lines: "screener-probe <node> <i>/<n> <base64 of zlib(JSON)>".
CHUNK = 800
_LINE_RE = re.compile(r"screener-probe ([A-Za-z0-9_.-]+) (\d+)/(\d+) ([A-Za-z0-9+/=]+)")


def node_lines(node: str, rounds: Sequence[NodeProbe], steady: bool | None) -> list[str]:
    """The node's result (every round; deep mode: several, and whether it reached steady
    state, None outside deep mode) as short lines that survive srun's interleaving."""
    doc = {"node": node, "steady": steady, "rounds": [probe_dict(p) for p in rounds]}
    blob = base64.b64encode(zlib.compress(json.dumps(doc).encode(), 6)).decode()
    parts = [blob[i : i + CHUNK] for i in range(0, len(blob), CHUNK)] or [""]
    return [f"screener-probe {node} {i}/{len(parts)} {p}" for i, p in enumerate(parts, 1)]


def parse_node_lines(text: str) -> dict[str, tuple[list[NodeProbe], bool | None]]:
    """Inverse of node_lines over a whole step's output; incomplete nodes are left out."""
    parts: dict[str, dict[int, str]] = {}
    totals: dict[str, int] = {}
    for line in text.splitlines():
        m = _LINE_RE.search(line)  # search: tolerates an srun --label prefix
        if m:
            parts.setdefault(m.group(1), {})[int(m.group(2))] = m.group(4)
            totals[m.group(1)] = int(m.group(3))
    out: dict[str, tuple[list[NodeProbe], bool | None]] = {}
    for node, got in parts.items():
        if sorted(got) != list(range(1, totals[node] + 1)):
            continue
        try:
            raw = zlib.decompress(base64.b64decode("".join(got[i] for i in sorted(got))))
            doc = json.loads(raw)
            rounds = [_probe(r) for r in doc["rounds"]]
        except (ValueError, KeyError, TypeError, zlib.error):
            continue
        steady = doc.get("steady")
        out[node] = (rounds, bool(steady) if steady is not None else None)
    return out


def _probe(d: dict[str, Any]) -> NodeProbe:
    """One round as the node sent it (probe_dict): its error, or its raw fio and iostat
    output parsed again here and built as every probe is (NodeProbe.from_fio)."""
    node = str(d["node"])
    facts = _facts(d.get("facts"))
    recipe = str(d["recipe"]) if d.get("recipe") else None  # what the node measured with
    notes = d.get("notes")
    said = tuple(str(n)[:300] for n in notes[:8]) if isinstance(notes, list) else ()
    if d.get("error"):
        return NodeProbe(
            node=node,
            error=str(d["error"]),
            error_kind=str(d.get("error_kind") or "probe"),
            facts=facts,
            duration_s=float(d.get("duration_s") or 0),
            recipe=recipe,
        )
    try:
        run = parse_fio(str(d["raw_fio"]), node)
        samples = parse_iostat(d["raw_iostat"], node) if d.get("raw_iostat") else ()
    except ProbeError as exc:
        return NodeProbe(node=node, error=str(exc), error_kind="probe", recipe=recipe)
    return NodeProbe.from_fio(
        node,
        run,
        str(d["raw_fio"]),
        iostat=samples,
        raw_iostat=str(d.get("raw_iostat") or ""),
        facts=facts,
        duration_s=float(d.get("duration_s") or 0),
        recipe=recipe,
        notes=said,
    )


def _facts(d: Any) -> NodeFacts | None:
    if not isinstance(d, dict):
        return None
    smart = SmartLog(**d["smart"]) if isinstance(d.get("smart"), dict) else None
    md = None
    if isinstance(d.get("md"), dict):
        md = MdStatus(**{k: tuple(v) for k, v in d["md"].items()})
    rest = {k: v for k, v in d.items() if k not in ("smart", "md")}
    return NodeFacts(**rest, smart=smart, md=md)
