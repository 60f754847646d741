"""End to end, every piece real and on 127.0.0.1: two simulated-GPU ``gpuadvisor agent``s whose
YAML spec has light jobs (low SM activity, little memory), ``gpuadvisor queue`` on a queue file
with those jobs running and a 3-GPU job waiting, Prometheus 2.42 scraping all three,
``gpuadvisor advisor`` querying it, Alertmanager 0.25, and the loopback receiver as the webhook.

Node gpu-a (4 GPUs) runs jobs 11, 12 and 13, one GPU each at 8 % SM activity and 6 GiB of
80 GiB; its fourth GPU is free. Node gpu-b (2 GPUs) runs job 14 hard. Job 21 waits for 3 GPUs of
one node. The advisor must find from Prometheus' series that 11, 12 and 13 fit one GPU (MIG,
1g.10gb each), that this frees 2 GPUs, and that with the free one job 21 could start; the advice
must reach Alertmanager, Slack (the loopback receiver) and the signed webhook, and the advisor's
/metrics must count it.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gpuadvisor.sinks.delivery.webhook import verify_signature
from gpuadvisor.sources.prometheus.live.profiles import GPUADVISOR
from tests.harness.alertmanager import AlertmanagerServer
from tests.harness.process import ManagedProcess, eventually, gpuadvisor_argv
from tests.harness.prometheus import PrometheusServer, ScrapeJob
from tests.harness.receiver import Receiver
from tests.ports import free_port

pytestmark = pytest.mark.e2e

SECRET = "share-webhook-secret"
HEAVY_NODE = """\
node: gpu-b
gpus: 2
timelines:
  0-1:
    utilization: [[0, 95]]
    jobs: [[0, "14"]]
"""


def light_node_spec() -> str:
    """gpu-a: GPUs 0, 1, 2 held by jobs 11, 12, 13 (a GPU takes one timeline key)."""
    return "node: gpu-a\ngpus: 4\ntimelines:\n" + "".join(
        f"  {gpu}:\n    utilization: [[0, 30]]\n    sm_active: [[0, 8]]\n"
        f'    memory: [[0, 7.5]]\n    jobs: [[0, "{job}"]]\n'
        for gpu, job in ((0, 11), (1, 12), (2, 13))
    )


def queue_file(now_s: float) -> str:
    started = now_s - 3600
    running = [(job, "gpu-a", [gpu]) for job, gpu in (("11", 0), ("12", 1), ("13", 2))] + [
        ("14", "gpu-b", [0, 1])
    ]
    jobs = [
        {
            "job_id": job,
            "user": "alice",
            "partition": "gpu",
            "state": "RUNNING",
            "gpus_per_node": len(gpus),
            "submit_time": started - 60,
            "start_time": started,
            "time_limit": 24 * 3600,
            "node_names": [node],
            "gpu_indices": {node: gpus},
        }
        for job, node, gpus in running
    ]
    jobs.append(
        {
            "job_id": "21",
            "user": "bob",
            "partition": "gpu",
            "state": "PENDING",
            "gpus_per_node": 3,
            "submit_time": now_s - 600,
            "time_limit": 3600,
        }
    )
    return json.dumps({"jobs": jobs})


def gpuadvisor(*args: str) -> list[str]:
    return gpuadvisor_argv(*args)


@dataclass
class Stack:
    prometheus: PrometheusServer
    alertmanager: AlertmanagerServer
    webhook: Receiver
    slack: Receiver
    light_agent: str
    advisor_url: str
    advisor: ManagedProcess


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("share")
    am_receiver, webhook, slack = Receiver(), Receiver(), Receiver()
    alertmanager = AlertmanagerServer(tmp / "alertmanager", f"{am_receiver.url}/am")
    procs: list[ManagedProcess] = []
    prometheus: PrometheusServer | None = None
    try:
        (tmp / "gpu-a.yaml").write_text(light_node_spec())
        (tmp / "gpu-b.yaml").write_text(HEAVY_NODE)
        (tmp / "queue.json").write_text(queue_file(time.time()))
        ports = {name: free_port() for name in ("gpu-a", "gpu-b", "queue", "advisor")}
        for node in ("gpu-a", "gpu-b"):
            procs.append(
                ManagedProcess(
                    gpuadvisor(
                        "agent",
                        "--backend",
                        "sim",
                        "--sim.spec",
                        str(tmp / f"{node}.yaml"),
                        "--collect.interval",
                        "0.5",
                        "--collect.samples-interval",  # every probe: a short window's rate
                        "0",
                        "--web.listen-address",
                        f"127.0.0.1:{ports[node]}",
                    ),
                    tmp / f"agent-{node}.log",
                )
            )
        procs.append(
            ManagedProcess(
                gpuadvisor(
                    "queue",
                    "--source",
                    "file",
                    "--file",
                    str(tmp / "queue.json"),
                    "--interval",
                    "1",
                    "--listen",
                    f"127.0.0.1:{ports['queue']}",
                ),
                tmp / "queue.log",
            )
        )
        agents = [f"127.0.0.1:{ports['gpu-a']}", f"127.0.0.1:{ports['gpu-b']}"]
        prometheus = PrometheusServer(
            tmp / "prometheus",
            [
                ScrapeJob("gpuadvisor-agent", agents),
                ScrapeJob("gpuadvisor-queue", [f"127.0.0.1:{ports['queue']}"]),
            ],
        ).wait_ready()
        alertmanager.start().wait_ready()
        config = tmp / "advisor.yaml"
        config.write_text(
            f"""
interval: 1s
max_age: 15s
window: 10s
prometheus: {{url: {prometheus.url}, timeout: 3s}}
hysteresis: {{hold_cycles: 2, clear_cycles: 2}}
share: {{window: 15s}}
outbox: {{base_delay: 200ms, max_delay: 1s, max_age: 5m, max_attempts: 1000}}
sinks:
  alertmanager:
    - url: {alertmanager.url}
      labels: {{cluster: share}}
  slack:
    - webhook_url: {slack.url}/services/T0/B0/share
  webhook:
    - url: {webhook.url}/hook
      secret_env: SHARE_WEBHOOK_SECRET
"""
        )
        advisor = ManagedProcess(
            gpuadvisor(
                "advisor",
                "--config",
                str(config),
                "--web.listen-address",
                f"127.0.0.1:{ports['advisor']}",
            ),
            tmp / "advisor.log",
            env={"SHARE_WEBHOOK_SECRET": SECRET},
        )
        procs.append(advisor)
        advisor_url = f"http://127.0.0.1:{ports['advisor']}"
        advisor.wait_http(f"{advisor_url}/-/ready", timeout_s=60)
        light = agents[0]
        yield Stack(prometheus, alertmanager, webhook, slack, light, advisor_url, advisor)
    finally:
        for proc in reversed(procs):
            proc.stop()
        if prometheus is not None:
            prometheus.stop()
        alertmanager.stop()
        for receiver in (am_receiver, webhook, slack):
            receiver.stop()


def share_alerts(stack: Stack) -> list[dict[str, Any]]:
    return [
        a
        for a in stack.alertmanager.alerts(active=True, silenced=False, inhibited=False)
        if a["labels"].get("alertname") == "GpuAdvisorShare"
    ]


def metric(url: str, name: str, **labels: str) -> float | None:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    line_start = f"{name}{{{want}}} " if want else f"{name} "
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.split()[-1])
    return None


def test_light_jobs_get_share_advice_through_prometheus_to_the_sinks(stack: Stack) -> None:
    # the agents' series the advice reads are in Prometheus
    sm = 'gpuadvisor_gpu_sm_active_ratio{job="gpuadvisor-agent"}'
    eventually(lambda: len(stack.prometheus.query(sm)) == 6, "SM activity of all 6 GPUs")

    eventually(lambda: bool(share_alerts(stack)), "a GpuAdvisorShare alert", timeout_s=90)
    (alert,) = share_alerts(stack)
    labels = alert["labels"]
    assert (labels["kind"], labels["job_id"], labels["node"]) == ("share", "11,12,13", "gpu-a")
    assert labels["cluster"] == "share" and labels["advice_severity"] == "warning"
    assert labels["severity"] == "info" and labels["gpuadvisor_advice"] == "true"
    action = json.dumps(alert["annotations"])
    assert "free 2 GPU(s)" in action and "start job(s) 21 now" in action
    assert "1g.10gb" in action and "Interference risk low" in action
    assert "SM activity 8 / 8 / 8 % on average, 8 / 8 / 8 % at p95" in action
    assert "peak memory 6.0 / 6.0 / 6.0 GiB of 80" in action

    def shared() -> list[dict[str, Any]]:
        out = []
        for got in stack.webhook.received("/hook"):
            body = got.json()
            ok = verify_signature(
                SECRET,
                got.headers["x-gpuadvisor-timestamp"],
                got.body,
                got.headers["x-gpuadvisor-signature"],
                now_s=time.time(),
            )
            out += [r for r in body["recommendations"] if r["kind"] == "share" and ok]
        return out

    eventually(lambda: bool(shared()), "a signed webhook with the share advice")
    rec = shared()[0]
    evidence = rec["evidence"]
    assert evidence["gpus_freed"] == "2" and evidence["startable_jobs"] == "21"
    assert evidence["mechanism"] == "mig" and evidence["signal"] == "sm_active"
    assert rec["gain"]["gpus_busy_now"] == 3

    # Slack: a Block Kit digest naming the share advice
    messages = stack.slack.wait_for(
        lambda got: any("1g.10gb" in r.body.decode() for r in got),
        path="/services/T0/B0/share",
        what="a Slack message with the share advice",
    )
    digest = next(m.json() for m in messages if "1g.10gb" in m.body.decode())
    assert digest["text"] and 0 < len(digest["blocks"]) <= 50

    assert metric(stack.advisor_url, "gpuadvisor_advisor_recommendations", kind="share") == 1.0
    assert metric(stack.advisor_url, "gpuadvisor_advisor_share_freeable_gpus") == 2.0


def test_the_utilization_fallback_reads_the_agents_real_histogram(stack: Stack) -> None:
    """Where a GPU has no SM activity the loads come from utilization: the profile's queries,
    run on the real agents' series, give the light GPUs' 30 % (p95 inside the 0.2-0.3 bucket)."""
    exprs = GPUADVISOR.render(window_s=10, share_window_s=15)
    by_gpu: dict[str, dict[str, float]] = {}
    for name in ("gpu_busy_share_mean", "gpu_busy_share_p95"):
        for row in stack.prometheus.query(exprs[name]):
            if row["metric"]["instance"] == stack.light_agent:
                by_gpu.setdefault(row["metric"]["gpu_uuid"], {})[name] = float(row["value"][1])
    light = [v for v in by_gpu.values() if v.get("gpu_busy_share_mean", 0) > 0]
    assert len(light) == 3, by_gpu
    for v in light:
        assert abs(v["gpu_busy_share_mean"] - 0.3) < 0.02, v
        assert 0.2 < v["gpu_busy_share_p95"] <= 0.3, v
    assert metric(stack.advisor_url, "gpuadvisor_advisor_share_freeable_gpus") == 2.0
