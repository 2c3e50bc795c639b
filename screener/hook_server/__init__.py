"""`screener hookd`: a resident worker that runs slurmctld's hooks with screener already
imported (forked per hook run), so the fast path does not pay ~1 s of imports (issue 22).
The command, its systemd unit and its socket keep the name hookd; this package is the server."""
