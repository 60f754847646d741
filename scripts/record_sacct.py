"""Record a real Slurm 22.05's ``sacct`` output into tests/data/slurm/recorded (README there).

Starts the test harness's cluster with accounting (``tests/harness/slurmdbd.py``: munged,
MariaDB, slurmdbd, slurmctld, slurmd, all on loopback in a temp dir), runs its workload
(``WORKLOAD``: completed, failed, timed-out, cancelled-while-running and cancelled-while-pending
jobs, two job arrays, one held job), waits until sacct lists every job as finished, and writes:

- ``sacct-22.05.json``: ``sacct --allusers --allocations --json``
- ``sacct-22.05-parsable2.txt``: ``SACCT_COMMAND`` (``--parsable2``, ``SACCT_FORMAT``, Unix times)
- ``sacct-22.05-held-parsable2.txt``: the same with ``--jobs HELD`` (the window leaves it out)
- ``workload-22.05.json``: the jobs as submitted and as slurmctld reported them
  (``squeue --json --states=all``), what the reader's output is checked against

Run as the tests run (root, Debian's packages installed: ``make system-deps``)::

    PYTHONPATH=. .venv/bin/python scripts/record_sacct.py [OUT_DIR]
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from tests.harness.slurmdbd import RECORDED, SlurmAccountingCluster, run_workload


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else RECORDED
    out.mkdir(parents=True, exist_ok=True)
    with SlurmAccountingCluster() as cluster:
        workload = run_workload(cluster)
    (out / "sacct-22.05.json").write_text(workload.sacct_json)
    (out / "sacct-22.05-parsable2.txt").write_text(workload.sacct_parsable2)
    (out / "sacct-22.05-held-parsable2.txt").write_text(workload.held_parsable2)
    jobs = {
        "held_job_id": workload.held_job_id,
        "jobs": [dataclasses.asdict(job) for job in workload.jobs],
    }
    (out / "workload-22.05.json").write_text(json.dumps(jobs, indent=2) + "\n")
    print(f"recorded {len(workload.jobs)} jobs into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
