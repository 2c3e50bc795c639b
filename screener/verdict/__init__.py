"""The pure decider: probes (+ history, policy) in, a Verdict per node out.

`judge.evaluate` applies the rules of `rules` across peers; `confirm` merges a re-probe.
No I/O, no transport, no store: everything here is a function of its arguments."""
