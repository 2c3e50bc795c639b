"""After the job: parse what an IOR or fio run reported, attribute it to nodes, judge outliers.

parsers (``ior``, ``fiojobs``) turn captured outputs into per-rank or per-phase figures;
``layout`` maps ranks to nodes; ``judge`` aggregates per node and applies the peers rule;
``accuracy`` compares the prolog's verdicts with what the job then saw. All pure; reading
files lives in ``files`` and the database side in screener.store.jobs. docs/ingest.md.
"""
