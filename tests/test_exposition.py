"""The fast text exposition: a ColumnGauge renders what prometheus_client would (same
families, series, label values and numbers once parsed), escapes label values, spells
+Inf/NaN as Prometheus does, and the exporter's HTTP app serves it (gzip when accepted)."""

from __future__ import annotations

import gzip
import math
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from screener.metrics.exporter import metrics_app
from screener.metrics.exposition import CONTENT_TYPE, ColumnGauge, label_value, render

NODES = ["cn001", 'odd"name', "back\\slash", "new\nline"]


class _Fixed:
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        return self.metrics


def _registry(values: list[float]) -> CollectorRegistry:
    texts = [f'node="{label_value(n)}"' for n in NODES]
    gauge = ColumnGauge("x_bytes", "Bytes.\nTwo lines \\ here.", {"node": NODES}, texts, values)
    verdict = ColumnGauge(
        "x_verdict",
        "A state.",
        {"node": NODES[:2], "verdict": ["OK", "SLOW_READ"]},
        [f'{t},verdict="{v}"' for t, v in zip(texts[:2], ["OK", "SLOW_READ"], strict=True)],
        [1.0, 1.0],
    )
    registry = CollectorRegistry()
    registry.register(_Fixed([gauge, verdict, CounterMetricFamily("x_runs", "Runs.", value=3)]))
    return registry


def _parsed(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text.decode())
        for s in fam.samples
    }


def _same(a: dict[Any, float], b: dict[Any, float]) -> bool:
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a
    )


@pytest.mark.parametrize(
    "values",
    [[2.9e9, 0.1, 1 / 3, 7200.0], [math.inf, -math.inf, math.nan, 1e-300]],
    ids=["finite", "inf-nan"],
)
def test_render_matches_prometheus_client(values: list[float]) -> None:
    registry = _registry(values)
    ours, theirs = render(registry), generate_latest(registry)
    assert _same(_parsed(ours), _parsed(theirs))
    assert len(_parsed(ours)) == len(NODES) + 2 + 1
    assert b"# HELP x_bytes Bytes.\\nTwo lines \\\\ here.\n# TYPE x_bytes gauge\n" in ours


def test_special_values_spelt_as_prometheus_does() -> None:
    text = render(_registry([math.inf, -math.inf, math.nan, 1.0])).decode()
    assert 'x_bytes{node="cn001"} +Inf\n' in text
    assert 'x_bytes{node="odd\\"name"} -Inf\n' in text
    assert 'x_bytes{node="back\\\\slash"} NaN\n' in text
    assert 'x_bytes{node="new\\nline"} 1.0\n' in text


def test_column_gauge_refuses_bad_columns() -> None:
    with pytest.raises(ValueError, match="sorted"):
        ColumnGauge("x", "d", {"verdict": [], "node": []}, [], [])
    with pytest.raises(ValueError, match="length"):
        ColumnGauge("x", "d", {"node": ["a", "b"]}, ['node="a"'], [1.0])
    g = ColumnGauge("x", "d", {"node": ["a"]}, ['node="a"'], [1.0])
    with pytest.raises(ValueError, match="columns"):
        g.samples = list(g.samples)


def test_http_app_serves_text_format_gzipped_when_accepted() -> None:
    app = metrics_app(_registry([1.0, 2.0, 3.0, 4.0]))  # type: ignore[arg-type]
    seen: list[tuple[str, dict[str, str]]] = []

    def start(status: str, headers: list[tuple[str, str]]) -> None:
        seen.append((status, dict(headers)))

    plain = b"".join(app({"REQUEST_METHOD": "GET"}, start))
    zipped = b"".join(app({"REQUEST_METHOD": "GET", "HTTP_ACCEPT_ENCODING": "gzip"}, start))
    refused = b"".join(app({"REQUEST_METHOD": "POST"}, start))
    (s1, h1), (s2, h2), (s3, _) = seen
    assert s1 == s2 == "200 OK" and h1["Content-Type"] == CONTENT_TYPE
    assert "Content-Encoding" not in h1 and h2["Content-Encoding"] == "gzip"
    assert gzip.decompress(zipped) == plain and int(h2["Content-Length"]) == len(zipped)
    assert _parsed(plain)[("x_runs_total", ())] == 3
    assert s3.startswith("405") and refused == b""
