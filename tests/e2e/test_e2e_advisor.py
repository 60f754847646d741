"""End to end, every piece real and on 127.0.0.1: a single-node Slurm 22.05 with the recorded
head-of-line block, ``gpuadvisor queue`` reading its ``squeue --json``, a simulated-GPU
``gpuadvisor agent`` following Slurm's GPU assignments, Prometheus 2.42 scraping both,
``gpuadvisor advisor`` querying it, Alertmanager 0.25, a fake Slack and a webhook receiver.

The advice (start job 5 now) must reach Alertmanager (its API and its own webhook), Slack as
Block Kit and the webhook signed; ``gpuadvisor apply --yes`` runs it on the real Slurm; the
alerts then resolve. Prometheus going down stops the advice (``source_up 0``) until it returns.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuadvisor.sinks.delivery.webhook import verify_signature
from gpuadvisor.sources.slurm.parse import parse_squeue
from tests.harness.advisor_stack import SLACK_PATH, WEBHOOK_PATH, advisor_stack
from tests.harness.alertmanager import AlertmanagerServer
from tests.harness.exposition_server import ExpositionServer
from tests.harness.process import ManagedProcess, gpuadvisor_argv
from tests.harness.prometheus import PrometheusServer, ScrapeJob
from tests.harness.receiver import Received, Receiver
from tests.harness.slurm import SlurmCluster, submit_head_of_line
from tests.harness.wait import eventually
from tests.ports import free_port
from tests.sources.prometheus.test_prometheus_live import dcgm_text, ksm_text

pytestmark = pytest.mark.e2e

SECRET = "e2e-webhook-secret"


def gpuadvisor(*args: str) -> list[str]:
    return gpuadvisor_argv(*args)


def sync_job_mapping(cluster: SlurmCluster, mapping_dir: Path) -> None:
    """Play Slurm's prolog/epilog: one file per GPU index holding the job that owns it."""
    snapshot = parse_squeue(cluster.squeue_json(), time_s=time.time()).snapshot
    owners = {
        index: entry.job_id
        for entry in snapshot.running
        for _node, indices in entry.gpu_indices
        for index in indices
    }
    for index in range(cluster.gpus):
        path = mapping_dir / str(index)
        if index in owners:
            path.write_text(owners[index] + "\n")
        else:
            path.unlink(missing_ok=True)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.load(reply)


def metric_samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@dataclass
class Stack:
    tmp: Path
    cluster: SlurmCluster
    ids: list[str]
    mapping_dir: Path
    prometheus: PrometheusServer
    scrape_jobs: list[ScrapeJob]
    alertmanager: AlertmanagerServer
    am_webhook: Receiver
    slack: Receiver
    webhook: Receiver
    advisor_url: str
    advisor: ManagedProcess


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("e2e")
    with ExitStack() as stops:
        cluster = stops.enter_context(SlurmCluster())
        ids = submit_head_of_line(cluster)
        mapping_dir = tmp / "gpu-jobs"
        mapping_dir.mkdir()
        sync_job_mapping(cluster, mapping_dir)
        queue_port, agent_port = free_port(), free_port()
        queue = ["queue", "--source", "slurm", "--interval", "1"]
        stops.enter_context(
            ManagedProcess(
                gpuadvisor(*queue, "--listen", f"127.0.0.1:{queue_port}"),
                tmp / "queue.log",
                env=cluster.env,
            )
        )
        agent = ["agent", "--backend", "sim", "--sim.node", cluster.node, "--sim.gpus", "8"]
        agent += ["--jobs.mapping-dir", str(mapping_dir), "--collect.interval", "0.5"]
        stops.enter_context(
            ManagedProcess(
                gpuadvisor(*agent, "--web.listen-address", f"127.0.0.1:{agent_port}"),
                tmp / "agent.log",
            )
        )
        scrape_jobs = [
            ScrapeJob("gpuadvisor-queue", [f"127.0.0.1:{queue_port}"]),
            ScrapeJob("gpuadvisor-agent", [f"127.0.0.1:{agent_port}"]),
        ]
        parts = stops.enter_context(
            advisor_stack(
                tmp,
                scrape_jobs,
                cluster="e2e",
                secret=SECRET,
                more_yaml="web:\n  external_url: http://127.0.0.1\n",
            )
        )
        stack = Stack(
            tmp,
            cluster,
            ids,
            mapping_dir,
            parts.prometheus,
            scrape_jobs,
            parts.alertmanager,
            parts.am_webhook,
            parts.slack,
            parts.webhook,
            parts.advisor_url,
            parts.advisor,
        )
        yield stack
        parts.prometheus = stack.prometheus  # a test may have replaced it (restarted Prometheus)


def start_now_alerts(stack: Stack, job_id: str) -> list[dict[str, Any]]:
    return [
        a
        for a in stack.alertmanager.alerts(active=True, silenced=False, inhibited=False)
        if a["labels"].get("alertname") == "GpuAdvisorStartNow"
        and a["labels"].get("job_id") == job_id
    ]


def webhook_events(stack: Stack, event: str) -> list[dict[str, Any]]:
    out = []
    for got in stack.webhook.received(WEBHOOK_PATH):
        body = got.json()
        if body["event"] == event:
            out.append(body)
    return out


def signed(got: Received) -> bool:
    return verify_signature(
        SECRET,
        got.headers["x-gpuadvisor-timestamp"],
        got.body,
        got.headers["x-gpuadvisor-signature"],
        now_s=time.time(),
    )


def test_head_of_line_advice_reaches_every_sink_and_resolves_once_applied(stack: Stack) -> None:
    job5 = stack.ids[4]
    eventually(lambda: bool(start_now_alerts(stack, job5)), "a start-now alert for job 5")
    (alert,) = start_now_alerts(stack, job5)
    assert alert["labels"]["cluster"] == "e2e"
    assert alert["labels"]["kind"] == "start-now"
    assert alert["labels"]["gpuadvisor_advice"] == "true"
    assert alert["labels"]["severity"] == "info"  # never a paging severity by default
    assert f"scontrol top {job5}" in alert["annotations"]["command"]

    # Alertmanager routed it to its own receiver
    stack.am_webhook.wait_for(
        lambda got: any(
            a["labels"].get("job_id") == job5
            for r in got
            for a in r.json()["alerts"]
            if a["labels"].get("alertname") == "GpuAdvisorStartNow"
        ),
        what="Alertmanager's notification for job 5",
    )
    # Slack: Block Kit with a text fallback
    messages = stack.slack.wait_for(bool, path=SLACK_PATH)
    first = messages[0].json()
    assert first["text"] and first["blocks"] and len(first["blocks"]) <= 50
    assert any(job5 in json.dumps(block) for block in first["blocks"])
    # generic webhook: signed
    eventually(lambda: bool(webhook_events(stack, "firing")), "a signed firing webhook")
    firing = [r for r in stack.webhook.received(WEBHOOK_PATH) if r.json()["event"] == "firing"]
    assert all(signed(r) for r in firing)
    assert any(rec["job_id"] == job5 for rec in firing[0].json()["recommendations"])

    # apply the advice on the real Slurm
    log = stack.tmp / "apply.log"
    applied = subprocess.run(
        [*gpuadvisor("apply", "--advisor", stack.advisor_url, "--yes", "--log", str(log))],
        env={**os.environ, **stack.cluster.env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr
    stack.cluster.wait_state(job5, "RUNNING")
    assert stack.cluster.job_state(stack.ids[2]) == "PENDING"  # the head still waits
    assert f'"scontrol", "top", "{job5}"' in log.read_text()
    sync_job_mapping(stack.cluster, stack.mapping_dir)

    # the alert resolves, and the webhook and Slack hear about it
    eventually(lambda: not start_now_alerts(stack, job5), "the start-now alert resolved")
    eventually(
        lambda: any(
            rec["job_id"] == job5
            for body in webhook_events(stack, "resolved")
            for rec in body["recommendations"]
        ),
        "a resolved webhook for job 5",
    )
    assert len(stack.slack.received(SLACK_PATH)) >= 2

    sinks = metric_samples(stack.advisor_url)
    delivered = {
        dict(labels)["sink"]
        for (name, labels), value in sinks.items()
        if name == "gpuadvisor_sink_deliveries_total"
        and dict(labels)["outcome"] == "delivered"
        and value > 0
    }
    assert len(delivered) == 3, delivered
    assert not any(
        value
        for (name, labels), value in sinks.items()
        if name == "gpuadvisor_sink_deliveries_total" and dict(labels)["outcome"] == "dropped"
    )


def test_prometheus_down_stops_the_advice_until_it_returns(stack: Stack) -> None:
    def source_up() -> float | None:
        return metric_samples(stack.advisor_url).get(
            ("gpuadvisor_advisor_source_up", (("source", "prometheus"),))
        )

    eventually(lambda: source_up() == 1.0, "Prometheus up to begin with")
    port = stack.prometheus.port
    stack.prometheus.stop()
    eventually(lambda: source_up() == 0.0, "source_up{source=prometheus} 0")
    body = get_json(f"{stack.advisor_url}/api/v1/recommendations")
    assert body["trusted"] is False
    # untrusted cycles are misses: the advice is withdrawn after clear_cycles of them
    eventually(
        lambda: get_json(f"{stack.advisor_url}/api/v1/recommendations")["recommendations"] == [],
        "the advice withdrawn after clear_cycles untrusted cycles",
    )
    cycles = metric_samples(stack.advisor_url)
    assert cycles[("gpuadvisor_advisor_cycles_total", (("outcome", "untrusted"),))] >= 1
    assert not any(name.startswith("gpuadvisor_cluster_") for name, _ in cycles)
    assert stack.advisor.proc.poll() is None  # still running

    stack.prometheus = PrometheusServer(
        stack.tmp / "prometheus", stack.scrape_jobs, port=port
    ).wait_ready()
    eventually(lambda: source_up() == 1.0, "Prometheus back and trusted again", timeout_s=60.0)
    eventually(
        lambda: ("gpuadvisor_cluster_gpus", ()) in metric_samples(stack.advisor_url),
        "cluster numbers again",
    )


def test_kubernetes_profile_advises_from_kube_state_metrics_and_dcgm(tmp_path: Path) -> None:
    """The same path with the ``kubernetes`` profile: Prometheus scrapes kube-state-metrics and
    dcgm-exporter expositions (their real metric names and labels) served on 127.0.0.1."""
    ksm, dcgm, am_webhook = ExpositionServer(), ExpositionServer(), Receiver()
    ksm.set(ksm_text())
    dcgm.set(dcgm_text())
    jobs = [
        ScrapeJob("kube-state-metrics", [ksm.address]),
        ScrapeJob("dcgm-exporter", [dcgm.address]),
    ]
    alertmanager = AlertmanagerServer(tmp_path / "alertmanager", f"{am_webhook.url}/am")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    try:
        with PrometheusServer(tmp_path / "prometheus", jobs).wait_ready() as prometheus:
            alertmanager.start().wait_ready()
            config = tmp_path / "advisor.yaml"
            config.write_text(
                f"interval: 1s\nprofile: kubernetes\nmax_age: 15s\nwindow: 10s\n"
                f"prometheus: {{url: {prometheus.url}}}\n"
                "hysteresis: {hold_cycles: 2, clear_cycles: 2}\n"
                f"sinks:\n  alertmanager:\n    - url: {alertmanager.url}\n"
            )
            with ManagedProcess(
                gpuadvisor(
                    "advisor", "--config", str(config), "--web.listen-address", f"127.0.0.1:{port}"
                ),
                tmp_path / "advisor.log",
            ) as advisor:
                advisor.wait_http(f"{url}/-/ready")

                def small_pod_alerts() -> list[dict[str, Any]]:
                    return [
                        a
                        for a in alertmanager.alerts(active=True)
                        if a["labels"].get("alertname") == "GpuAdvisorStartNow"
                        and a["labels"].get("job_id") == "ml/small-3"
                    ]

                eventually(lambda: bool(small_pod_alerts()), "start-now for pod ml/small-3")
                (alert,) = small_pod_alerts()
                assert alert["labels"]["node"] == "gpu-a"
                recs = get_json(f"{url}/api/v1/recommendations")["recommendations"]
                start = next(r for r in recs if r["kind"] == "start-now")
                assert start["commands"] == []  # no command reorders a pending pod
                # the pod is scheduled: the advice is withdrawn and the alert resolves
                ksm.set(ksm_text(started={"small-3": "gpu-a"}))
                eventually(lambda: not small_pod_alerts(), "the alert for ml/small-3 resolved")
    finally:
        alertmanager.stop()
        for server in (ksm, dcgm):
            server.stop()
        am_webhook.stop()
