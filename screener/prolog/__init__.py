"""The PrologSlurmctld flow (`screener prolog`), read in this order: ``hook`` is the entry
(read the job, select it, open the store and Slurm, requeue), ``execute`` runs each step
``plan`` decides (fast path, sentinels, triage, screen, drain, the full probe after it);
``rules`` its own pure rule (which nodes skip probing), ``triage`` the short read first,
``sentinel`` the fast path's sentinel reads."""
