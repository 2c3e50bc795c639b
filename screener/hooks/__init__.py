"""What the three Slurm flows (screener.prolog, screener.epilog, screener.sweep) share.

``job`` reads and selects the job (prolog and epilog); ``drain_rules`` holds the pure drain
rules (drainable verdicts, drain reasons, the mass-drain guard, the resume rule, settling a
killed run's drain intent) and ``drains`` their side effects (drain, resume, events,
episodes); ``fleet_guard`` the fleet view that judges a small allocation; ``injob`` and
``start_iostat`` in-job iostat; ``later`` work deferred past a hook's exit code; ``log`` the
hooks' log. A flow imports these, never another flow.
"""
