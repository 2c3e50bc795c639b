"""Capture tests/data/ior/cluster/ (README.md there): real IOR through jobs/ior.sbatch on a
4-node emulated cluster. Run from the repository root: .venv/bin/python
tests/data/ior/capture_cluster.py OUT_DIR (needs `make ior`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from deploy.minicluster import Cluster, ClusterHandle
from deploy.minicluster.slots import claim_slot
from tests.hooked_cluster import pace_devices
from tests.ior_job import submit_ior, wait_ior


def main(out: Path) -> None:
    with claim_slot() as slot:
        mc = Cluster(slot.state_dir)
        try:
            info = mc.up(4, subnet=slot.subnet, slurm_port_base=slot.slurm_port_base)
            h = ClusterHandle(mc, info)
            nodes = h.nodes[:4]
            pace_devices(h, nodes)
            for name, slow in (("healthy", None), ("throttled", "20M")):
                d = out / name
                d.mkdir(parents=True, exist_ok=True)
                if slow:
                    h.inject(nodes[1], "slow_read", slow)
                job = submit_ior(h, d, nodes, "16m", 2)
                wait_ior(h, job, d)
                print(name, job, flush=True)
                if slow:
                    h.inject(nodes[1], "slow_read", "300M")
            # transient: node03 reads at 120M until iteration 0's rows are in the CSV
            d = out / "transient"
            d.mkdir(parents=True, exist_ok=True)
            h.inject(nodes[2], "slow_read", "120M")
            job = submit_ior(h, d, nodes, "256m", 3)
            csv = d / f"ior-{job}.ranks.csv"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if csv.exists() and len(csv.read_text().splitlines()) >= 9:
                    break
                time.sleep(0.05)
            h.inject(nodes[2], "slow_read", "300M")
            wait_ior(h, job, d)
            print("transient", job, flush=True)
        finally:
            mc.down()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
