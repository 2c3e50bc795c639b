"""Prometheus metrics over the results store: a scrape-time collector, an HTTP exporter,
and a textfile writer for node_exporter (short-lived hooks)."""

from screener.metrics.collector import StoreCollector
from screener.metrics.exporter import parse_listen, serve, write_textfile

__all__ = ["StoreCollector", "parse_listen", "serve", "write_textfile"]
