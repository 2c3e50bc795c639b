"""The EpilogSlurmctld flow (`screener epilog`): ``hook`` stops and stores in-job iostat;
``ingest`` ingests the job's IOR/fio outputs (and, if configured, drains in-job outliers)."""
