"""Slurm-facing flows: the PrologSlurmctld/EpilogSlurmctld hooks, the sweep, admin resume.

``decide`` holds the pure rules (job selection, fast path, drain reasons, the mass-drain
guard, the resume rule); the flow modules do the I/O around them.
"""
