"""Fast Prometheus text exposition (format 0.0.4) for families with one series per node.

prometheus_client formats every sample through a ``Sample`` tuple, a label dict that it
sorts and escapes, and ``floatToGoString``: about 10-17 us a sample here, 1 s and more for
the 70,000 samples of a 10,000-node scrape (docs/performance.md). A ``ColumnGauge`` keeps
its series as (label values, rendered label text, value) rows instead, renders its lines
with one f-string each, and makes the ``Sample`` objects only when something asks for
``samples`` (prometheus_client's own ``generate_latest``, the tests' parser): it stays an
ordinary ``Metric`` in an ordinary registry. ``render(registry)`` writes ColumnGauges
directly and hands every other family to prometheus_client unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def label_value(value: str) -> str:
    """A label value escaped for the text format (backslash, double quote, newline)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")
    return value


def number(value: float) -> str:
    """A sample value as the text format writes it (repr is exact; +Inf, -Inf, NaN spelt
    as Prometheus spells them)."""
    return repr(value) if math.isfinite(value) else str(floatToGoString(value))  # type: ignore[no-untyped-call]


class ColumnGauge(Metric):
    """A gauge family given as columns: per label name the column of its values, the
    rendered label text of each series, and the values. Columns are built by the caller
    in one pass each (no tuple or dict per sample, which also keeps the garbage collector
    quiet); ``text()`` renders the family in one pass.

    A label text has no braces, e.g. ``node="cn001"``, with the label names in sorted order
    (as prometheus_client sorts them), so one node's text is shared by its families.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        labels: dict[str, Sequence[str]],
        texts: Sequence[str],
        values: Sequence[float],
    ) -> None:
        if list(labels) != sorted(labels):
            raise ValueError(f"label names of {name} must be sorted: {list(labels)}")
        if any(len(c) != len(values) for c in (texts, *labels.values())):
            raise ValueError(f"columns of {name} differ in length")
        self.labels = labels
        self.texts = texts
        self.values = values
        self._text: str | None = None  # rendered once: the columns are not changed afterwards
        super().__init__(name, documentation, "gauge")

    @property  # computed from the columns when prometheus_client reads it
    def samples(self) -> list[Sample]:
        names = list(self.labels)
        return [
            Sample(self.name, dict(zip(names, row[:-1], strict=True)), row[-1])
            for row in zip(*self.labels.values(), self.values, strict=True)
        ]

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        if value:  # Metric.__init__ assigns []; the series are the columns
            raise ValueError("a ColumnGauge's series are its columns")

    def text(self) -> str:
        """The family in the text format: HELP, TYPE and one line per series (rendered on
        the first call; the collector reuses unchanged families from scrape to scrape)."""
        if self._text is None:
            self._text = self._render()
        return self._text

    def _render(self) -> str:
        name = self.name
        doc = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        head = f"# HELP {name} {doc}\n# TYPE {name} gauge\n"
        pairs = zip(self.texts, self.values, strict=True)
        if all(map(math.isfinite, self.values)):  # then repr is the text format's spelling
            return head + "".join([f"{name}{{{t}}} {v!r}\n" for t, v in pairs])
        return head + "".join([f"{name}{{{t}}} {number(v)}\n" for t, v in pairs])


class _One:
    """One family as a collector, for prometheus_client's formatter."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterable[Metric]:
        return [self.metric]


def render(registry: Collector) -> bytes:
    """The registry's metrics in the text format 0.0.4 (what ``generate_latest`` writes, with
    ColumnGauges rendered directly)."""
    out: list[bytes] = []
    for metric in registry.collect():
        if isinstance(metric, ColumnGauge):
            out.append(metric.text().encode())
        else:
            out.append(generate_latest(_One(metric)))
    return b"".join(out)
