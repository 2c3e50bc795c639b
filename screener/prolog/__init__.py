"""The PrologSlurmctld flow (`screener prolog`): ``hook`` runs it (read the job, select it,
fast path, triage, screen, drain, requeue); ``rules`` its own pure rule (which nodes skip
probing), ``triage`` the short read first, ``sentinel`` the fast path's sentinel reads."""
