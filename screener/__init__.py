"""screener: find HPC nodes whose local NVMe reads far slower than peers, before the job runs."""

__version__ = "0.1.0"
