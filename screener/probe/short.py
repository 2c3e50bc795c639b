"""The prolog's short recipe (issue 22): the triage's and the sentinel's reads, derived from
the policy. Here, below the Slurm flows, because the prolog, the sweep's learning reads
(sweep/learn.py) and the sweep step's `probe --local --triage` (run/local.py) all read it."""

from __future__ import annotations

from dataclasses import replace

from screener.policy import Policy


def triage_policy(policy: Policy) -> Policy:
    """The policy of a triage screen: the read jobs (the write too with ``triage_write``, the
    random read only with ``triage_rand_read``), shortened to the triage's ramp and runtime,
    sequential jobs in ``triage_seq_bs`` blocks and at ``seq_iodepth`` if set (a recipe of
    its own: history compares triage with triage, else with the full probe's seq reads)."""
    pp = policy.prolog
    probe = replace(
        policy.probe,
        ramp_s=pp.triage_ramp_s,
        rand_ramp_s=pp.triage_rand_ramp_s,
        runtime_s=pp.triage_runtime_s,
        seq_bs=pp.triage_seq_bs or policy.probe.seq_bs,
        seq_iodepth=short_read_depth(policy),
        seq_write=policy.probe.seq_write and pp.triage_write,
        rand_read=policy.probe.rand_read and pp.triage_rand_read,
    )
    # A short read's peer-relative finding on a node at its usual place is a doubt for the
    # full probe, never a drain (verdict.judge.usual_doubt).
    return replace(policy, probe=probe, verdict=replace(policy.verdict, short_read=True))


def short_read_depth(policy: Policy) -> int:
    """The queue depth of the prolog's short sequential reads (the sentinel's, the
    triage's): ``[prolog] seq_iodepth``, else the probe's own sequential depth."""
    return policy.prolog.seq_iodepth or policy.probe.seq_iodepth
