"""docs/metrics.md: every metric gpuadvisor exposes, generated from the three definition lists
(agent, queue exporter, advisor), so the docs cannot drift from the code."""

from __future__ import annotations

from gpuadvisor.sinks.exposition.advisor import ADVISOR_METRICS
from gpuadvisor.sinks.exposition.agent import AGENT_METRICS
from gpuadvisor.sinks.exposition.metrics import metrics_table
from gpuadvisor.sinks.exposition.ports import ADVISOR_PORT, AGENT_PORT, QUEUE_PORT
from gpuadvisor.sinks.exposition.queue import QUEUE_METRICS
from gpuadvisor.sinks.exposition.serving import SERVING_METRICS


def metrics_markdown() -> str:
    """The text of docs/metrics.md."""
    return "\n".join(
        [
            "# Metrics",
            "",
            "Generated from `AGENT_METRICS`, `QUEUE_METRICS` and `ADVISOR_METRICS`",
            "(`gpuadvisor/sinks/exposition/`: `agent.py`, `queue.py`, `advisor.py`);",
            "do not edit by hand. Regenerate with",
            "`UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_exposition.py`.",
            "",
            "Names are a public API (CHANGELOG.md). `gpu_uuid` is the identity label; metadata",
            "lives in `*_info` series joined in PromQL. A field a GPU does not support has no",
            "series at all, never a fake zero. Host, cluster and instance labels come from",
            "Prometheus target labels.",
            "",
            f"## Node agent (`gpuadvisor agent`, one per GPU node, :{AGENT_PORT})",
            "",
            metrics_table(AGENT_METRICS),
            f"## Queue exporter (`gpuadvisor queue`, one per scheduler, :{QUEUE_PORT})",
            "",
            "Also: `gpuadvisor_queue_job_gpu_info` (the GPU indices the scheduler",
            "assigned, where it tells), the exporter's own read time and last success, and",
            "`gpuadvisor_queue_job_gpus` is the job's total (GPUs per node × nodes). While the",
            "source fails, `gpuadvisor_queue_up` is 0 and no job series are served.",
            "Jobs that have ended and Slurm still lists (`MinJobAge`) keep their series with",
            "their final state in lower case (`completed`, `failed`, `timeout`, `cancelled`…)",
            "and `gpuadvisor_queue_job_end_timestamp_seconds`; the node series come from",
            "`sinfo --json`, read apart from squeue (`gpuadvisor_queue_nodes_up`). A rebuild",
            "from these series is exact to the second for every time the exporter saw, else",
            "good to one scrape interval (queue.md, section History).",
            "",
            metrics_table(QUEUE_METRICS),
            f"## Advisor (`gpuadvisor advisor`, one per cluster, :{ADVISOR_PORT})",
            "",
            "The `gpuadvisor_cluster_*` gauges are absent while an input is stale or down.",
            "",
            metrics_table(ADVISOR_METRICS),
            "## Every server (agent, queue exporter, advisor)",
            "",
            "Appended to each server's `/metrics` (not to `name[]`-filtered answers); they go on",
            "counting across configuration reloads (docs/reliability.md).",
            "",
            metrics_table(SERVING_METRICS),
        ]
    )
