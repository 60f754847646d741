"""The advisor's half of an end-to-end stack, every piece real and on 127.0.0.1: Prometheus
scraping the exporters a test started, Alertmanager 0.25 notifying its own loopback receiver,
a fake Slack and a webhook receiver, and ``gpuadvisor advisor`` querying Prometheus and
delivering to all three with fast cycles (1 s interval, hysteresis of 2, a quick outbox).

    with advisor_stack(tmp, scrape_jobs, cluster="e2e", secret="...") as parts:
        eventually(lambda: parts.alertmanager.alerts(), "an alert")

Everything started is stopped by PID on the way out, in reverse order; a test that restarts
Prometheus puts the new server in ``parts.prometheus`` so that it is the one stopped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.harness.alertmanager import AlertmanagerServer
from tests.harness.process import ManagedProcess, gpuadvisor_argv
from tests.harness.prometheus import PrometheusServer, ScrapeJob
from tests.harness.receiver import Receiver
from tests.ports import free_port

SECRET_ENV = "E2E_WEBHOOK_SECRET"
"""The environment variable the advisor reads the webhook's HMAC secret from."""
SLACK_PATH = "/services/T0/B0/secret"
WEBHOOK_PATH = "/hook"
ALERTMANAGER_PATH = "/alertmanager"


@dataclass
class AdvisorParts:
    tmp: Path
    prometheus: PrometheusServer
    scrape_jobs: list[ScrapeJob]
    alertmanager: AlertmanagerServer
    am_webhook: Receiver
    """Alertmanager's own webhook receiver (its notifications arrive under ALERTMANAGER_PATH)."""
    slack: Receiver
    webhook: Receiver
    advisor: ManagedProcess
    advisor_url: str


def advisor_yaml(
    prometheus_url: str, alertmanager_url: str, slack_url: str, webhook_url: str, *, cluster: str
) -> str:
    """The advisor's configuration: fast cycles, and the three sinks (Alertmanager with a
    ``cluster`` label, Slack, the webhook signed with the secret from SECRET_ENV)."""
    return f"""
interval: 1s
max_age: 15s
window: 10s
prometheus:
  url: {prometheus_url}
  timeout: 3s
hysteresis: {{hold_cycles: 2, clear_cycles: 2}}
outbox: {{base_delay: 200ms, max_delay: 1s, max_age: 5m, max_attempts: 1000}}
sinks:
  alertmanager:
    - url: {alertmanager_url}
      labels: {{cluster: {cluster}}}
  slack:
    - webhook_url: {slack_url}{SLACK_PATH}
  webhook:
    - url: {webhook_url}{WEBHOOK_PATH}
      secret_env: {SECRET_ENV}
"""


@contextmanager
def advisor_stack(
    tmp: Path,
    scrape_jobs: Sequence[ScrapeJob],
    *,
    cluster: str,
    secret: str,
    more_yaml: str = "",
    ready_timeout_s: float = 30.0,
) -> Iterator[AdvisorParts]:
    """Start Prometheus (scraping ``scrape_jobs``), Alertmanager, the receivers and the advisor
    (its YAML plus ``more_yaml``), wait until each is ready, and stop them all on exit."""
    with ExitStack() as stops:
        am_webhook, slack, webhook = Receiver(), Receiver(), Receiver()
        for receiver in (am_webhook, slack, webhook):
            stops.callback(receiver.stop)
        alertmanager = AlertmanagerServer(
            tmp / "alertmanager", f"{am_webhook.url}{ALERTMANAGER_PATH}"
        )
        stops.callback(alertmanager.stop)
        jobs = list(scrape_jobs)
        prometheus = PrometheusServer(tmp / "prometheus", jobs)
        parts: AdvisorParts | None = None

        def stop_prometheus() -> None:
            """The server in ``parts`` when it is there: a test may have restarted it."""
            (prometheus if parts is None else parts.prometheus).stop()

        stops.callback(stop_prometheus)
        prometheus.wait_ready()
        alertmanager.start().wait_ready()
        config = tmp / "advisor.yaml"
        config.write_text(
            advisor_yaml(prometheus.url, alertmanager.url, slack.url, webhook.url, cluster=cluster)
            + more_yaml
        )
        port = free_port()
        advisor = stops.enter_context(
            ManagedProcess(
                gpuadvisor_argv(
                    "advisor", "--config", str(config), "--web.listen-address", f"127.0.0.1:{port}"
                ),
                tmp / "advisor.log",
                env={SECRET_ENV: secret},
            )
        )
        advisor_url = f"http://127.0.0.1:{port}"
        advisor.wait_http(f"{advisor_url}/-/ready", timeout_s=ready_timeout_s)
        parts = AdvisorParts(
            tmp, prometheus, jobs, alertmanager, am_webhook, slack, webhook, advisor, advisor_url
        )
        yield parts
