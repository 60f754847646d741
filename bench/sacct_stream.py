"""Peak memory of reading ``sacct --json``: the streaming reader against ``json.load`` of the file.

    .venv/bin/python bench/sacct_stream.py [--jobs 100000] [--work /tmp]

A file of ``--jobs`` jobs is written by repeating the 11 jobs of a real Slurm 23.11 recording
(tests/data/slurm/recorded/sacct-23.11-recorded.json, 3-5 KB a job as sacct writes them, steps
included) with fresh job ids, written one job at a time (never the whole document in memory).
Then, each measured with tracemalloc (Python allocations: what the reader holds, not the
interpreter's own footprint):

- ``stream``: ``read_sacct`` on the open file, the code the advisor and ``whatif`` run: one job
  decoded at a time from a 1 MiB window; what grows with the file is only the ``FinishedJob``s it
  returns;
- ``json.load``: the whole document decoded at once, as the reader did before (its records were
  built after that, so its peak was higher still).

Prints the file size, each peak in MB and per 100,000 jobs, and the stream's peak less what its
result holds (the reader's own working memory).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuadvisor.sources.slurm.sacct import read_sacct  # noqa: E402

RECORDED = ROOT / "tests" / "data" / "slurm" / "recorded" / "sacct-23.11-recorded.json"


def write_file(path: Path, jobs: int) -> int:
    """``jobs`` jobs of the recording, renumbered; returns the file's size in bytes."""
    doc = json.loads(RECORDED.read_text())
    templates = doc.pop("jobs")
    with path.open("w") as out:
        out.write('{"jobs": [\n')
        for i in range(jobs):
            job = templates[i % len(templates)]
            job["job_id"] = 1000 + i
            if job.get("array", {}).get("job_id"):
                job["array"]["job_id"] = 1000 + i
            out.write(("," if i else "") + json.dumps(job, indent=2) + "\n")
        out.write("],\n")
        out.write(",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items()))
        out.write("}\n")
    return path.stat().st_size


def measure(read: Callable[[], object]) -> tuple[float, float, object]:
    """(peak bytes, seconds, result) of ``read()`` under tracemalloc."""
    gc.collect()
    tracemalloc.start()
    start = time.perf_counter()
    result = read()
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return float(peak), seconds, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--work", default=tempfile.gettempdir())
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        path = Path(tmp) / "sacct.json"
        size = write_file(path, args.jobs)
        print(f"{args.jobs} jobs, {size / 1e6:.1f} MB ({size / args.jobs:.0f} B a job)")
        per = 100_000 / args.jobs

        def stream() -> object:
            with path.open("rb") as f:
                return read_sacct(f, source=str(path))

        peak, seconds, result = measure(stream)
        jobs = len(getattr(result, "jobs", ()))
        del result
        gc.collect()
        tracemalloc.start()
        with path.open("rb") as f:
            kept = read_sacct(f, source=str(path))
        holding = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del kept
        print(
            f"stream:    peak {peak / 1e6:8.1f} MB ({peak * per / 1e6:.1f} MB per 100k jobs), "
            f"{seconds:.1f} s, {jobs} records; the result holds {holding / 1e6:.1f} MB, the "
            f"reader's own working memory {(peak - holding) / 1e6:.1f} MB"
        )

        def whole() -> object:
            with path.open("rb") as f:
                return json.load(f)

        peak, seconds, _ = measure(whole)
        print(
            f"json.load: peak {peak / 1e6:8.1f} MB ({peak * per / 1e6:.1f} MB per 100k jobs), "
            f"{seconds:.1f} s (the document alone, before any record is built)"
        )


if __name__ == "__main__":
    main()
