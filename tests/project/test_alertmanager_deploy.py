"""deploy/alertmanager/: the example routing tree and its Slack templates.

``amtool check-config`` accepts the file and finds the templates; ``amtool config routes test``
sends each kind of alert where the file says; and a real Alertmanager running the file (with the
Slack and webhook addresses pointed at a local receiver, and short group waits) renders the
advice into Slack messages, posts it to the webhook, and holds back the advice of a cluster
whose inputs are down. The advice alerts are built by the advisor's own Alertmanager sink.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuadvisor.model.recommendation import Gain, Kind, Recommendation, Severity
from gpuadvisor.sinks.delivery.alertmanager import ALERTNAMES, alert_labels, alerts_json
from gpuadvisor.sinks.delivery.outbox import ActiveAdvice, Delivery
from gpuadvisor.sinks.delivery.payload import iso_utc
from tests.harness.alertmanager import AlertmanagerServer
from tests.harness.process import require_binary
from tests.harness.receiver import Received, Receiver
from tests.hostile import HOSTILE
from tests.sinks.monitoring.test_alert_rules import load_rules

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "deploy" / "alertmanager"
CONFIG = FOLDER / "alertmanager.yml"
ADVICE = "gpuadvisor-advice"


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_binary("amtool"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_amtool_accepts_the_config_and_its_templates() -> None:
    result = amtool("check-config", str(CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    assert "1 inhibit rules" in result.stdout
    assert "1 templates" in result.stdout


def advice_labels(kind: Kind, severity: Severity = Severity.CRITICAL) -> dict[str, str]:
    """The labels the advisor's own Alertmanager sink gives advice of ``kind`` (urgent advice,
    the kind a pager route would catch if it carried ``severity="critical"``)."""
    rec = Recommendation(kind, "4711", "gpu-07", "act", (), Gain(), (), severity=severity)
    return alert_labels(rec, (("cluster", "a"),))


ROUTES = [
    *[(advice_labels(kind), ADVICE) for kind in ALERTNAMES if kind != Kind.RECLAIM_IDLE],
    (advice_labels(Kind.RECLAIM_IDLE), "gpuadvisor-advice-webhook"),
    # Advice from a sink configured with severity: critical still goes to chat, not the pager.
    ({**advice_labels(Kind.START_NOW), "severity": "critical"}, ADVICE),
    ({"alertname": "GpuAdvisorXidCritical", "severity": "critical"}, "gpuadvisor-page"),
    ({"alertname": "GpuAdvisorInputStale", "severity": "warning"}, "gpuadvisor-ops"),
    ({"alertname": "GpuAdvisorAllocatedGpuIdle", "severity": "info"}, "gpuadvisor-ops"),
    ({"alertname": "NodeFilesystemFull", "severity": "critical"}, "ignore"),
]


@pytest.mark.parametrize(("labels", "receiver"), ROUTES, ids=str)
def test_amtool_routes_each_alert_to_its_receiver(labels: dict[str, str], receiver: str) -> None:
    args = [f"{k}={v}" for k, v in labels.items()]
    result = amtool(
        "config",
        "routes",
        "test",
        f"--config.file={CONFIG}",
        f"--verify.receivers={receiver}",
        *args,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_advice_is_info_and_marked_so_a_sites_pager_route_does_not_catch_it(
    tmp_path: Path,
) -> None:
    """A site's tree that pages on ``severity="critical"`` before anything else (the common
    case): the advisor's most urgent advice still does not page; a critical health alert does."""
    labels = advice_labels(Kind.START_NOW, Severity.CRITICAL)
    assert labels["severity"] == "info" and labels["advice_severity"] == "critical"
    assert labels["gpuadvisor_advice"] == "true"
    site = {
        "route": {
            "receiver": "chat",
            "routes": [{"receiver": "pager", "matchers": ['severity="critical"']}],
        },
        "receivers": [{"name": "chat"}, {"name": "pager"}],
    }
    config = tmp_path / "site.yml"
    config.write_text(yaml.safe_dump(site))
    for alert, receiver in (
        (labels, "chat"),
        ({"alertname": "GpuAdvisorXidCritical", "severity": "critical"}, "pager"),
    ):
        args = [f"{k}={v}" for k, v in alert.items()]
        result = amtool("config", "routes", "test", f"--config.file={config}", *args)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == receiver, alert


def test_every_alert_of_the_rules_reaches_a_receiver() -> None:
    for rule in load_rules():
        if "alert" in rule:
            labels = [f"alertname={rule['alert']}", f"severity={rule['labels']['severity']}"]
            result = amtool("config", "routes", "test", f"--config.file={CONFIG}", *labels)
            assert result.returncode == 0, result.stderr
            assert result.stdout.strip() in {"gpuadvisor-page", "gpuadvisor-ops"}, rule["alert"]


# ---------------------------------------------------------------------------- a real Alertmanager


def local_config(folder: Path, receiver: Receiver) -> str:
    """The example with Slack and every webhook pointed at ``receiver`` (paths ``/slack``,
    ``/hook``...), templates by absolute path, and group waits short enough for a test."""
    doc: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
    secret = folder / "slack-webhook-url"
    secret.write_text(f"{receiver.url}/slack\n")
    doc["global"]["slack_api_url_file"] = str(secret)
    doc["templates"] = [str(FOLDER / t) for t in doc["templates"]]

    def fast(route: dict[str, Any]) -> None:
        route.update(group_wait="1s", group_interval="1s")
        for child in route.get("routes", []):
            fast(child)

    fast(doc["route"])
    for entry in doc["receivers"]:
        for hook in entry.get("webhook_configs", []):
            hook["url"] = f"{receiver.url}/hook/{entry['name']}"
    return yaml.safe_dump(doc, sort_keys=False)


def advice(job_id: str, node: str) -> Recommendation:
    return Recommendation(
        kind=Kind.START_NOW,
        job_id=job_id,
        node=node,
        action=f"Start job {job_id} (2 GPU) now on {node}",
        commands=(("scontrol", "top", job_id),),
        gain=Gain(gpus_busy_now=2.0, gpu_hours_per_day=12.5, allocation_pp=25.0),
        evidence=(("gpus", "2"),),
        severity=Severity.WARNING,
        valid_until_s=4_000_000_000.0,
    )


def input_stale(cluster: str) -> dict[str, Any]:
    """The rules' GpuAdvisorInputStale as Prometheus would send it."""
    (rule,) = [r for r in load_rules() if r.get("alert") == "GpuAdvisorInputStale"]
    return {
        "labels": {
            "alertname": rule["alert"],
            "cluster": cluster,
            "source": "queue",
            **rule["labels"],
        },
        "annotations": {
            "summary": rule["annotations"]["summary"],
            "description": f"The advisor of {cluster} has not trusted its queue input.",
            "runbook_url": rule["annotations"]["runbook_url"],
        },
    }


def post(url: str, alerts: list[Any]) -> None:
    request = urllib.request.Request(
        f"{url}/api/v2/alerts",
        data=json.dumps(alerts).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as reply:
        assert reply.status == 200


def slack_texts(got: list[Received]) -> list[str]:
    return [json.dumps(r.json()) for r in got]


@pytest.mark.e2e
def test_advice_reaches_slack_and_the_webhook_unless_its_inputs_are_down(tmp_path: Path) -> None:
    receiver = Receiver()
    server = AlertmanagerServer(tmp_path / "am", "", config=local_config(tmp_path, receiver))
    try:
        server.start().wait_ready()
        now_s = 3_999_999_000.0  # the advice's validity; Alertmanager takes startsAt as given
        for cluster, rec in (("a", advice("4711", "gpu-07")), ("b", advice("4800", "gpu-09"))):
            cycle = Delivery(
                now_s, 30.0, active=(ActiveAdvice(rec, now_s),), advisor_url="http://adv:19844"
            )
            if cluster == "b":
                post(server.url, [input_stale("b")])
            body = alerts_json(cycle, (("cluster", cluster),))
            for alert in body:
                alert.pop("startsAt")  # Alertmanager's clock: the alert starts now
                alert.pop("endsAt")
            post(server.url, body)

        hook = receiver.wait_for(bool, path=f"/hook/{ADVICE}", what="advice")
        messages = receiver.wait_for(
            lambda got: len(got) >= 2, path="/slack", what="advice and the health message"
        )
        (sent,) = [a for r in hook for a in r.json()["alerts"]]
        assert sent["labels"]["cluster"] == "a" and sent["labels"]["job_id"] == "4711"

        attachments = [a for m in messages for a in m.json()["attachments"]]
        by_title = {a["title"]: a for a in attachments}
        assert set(by_title) == {
            "1 GPU recommendation · start-now · a",
            "[FIRING:1] Advisor input stale or down · b",
        }, by_title
        text = by_title["1 GPU recommendation · start-now · a"]["text"]
        assert "*Start job 4711 (2 GPU) now on gpu-07* `scontrol top 4711`" in text
        assert "Expected gain: +2 GPUs busy now" in text
        assert by_title["1 GPU recommendation · start-now · a"]["color"] == "warning"
        assert by_title["1 GPU recommendation · start-now · a"]["title_link"].startswith(
            "http://adv:19844/api/v1/recommendations?id="
        )
        health = by_title["[FIRING:1] Advisor input stale or down · b"]["text"]
        assert "runbooks.md#gpuadvisorinputstale|runbook>" in health
        assert not any("4800" in t for t in slack_texts(receiver.received()))

        (held,) = [a for a in server.alerts() if a["labels"].get("job_id") == "4800"]
        assert held["status"]["inhibitedBy"], held["status"]
        (free,) = [a for a in server.alerts() if a["labels"].get("job_id") == "4711"]
        assert not free["status"]["inhibitedBy"]

        # The advisor withdraws job 4711's advice: endsAt in the past, by Alertmanager's clock.
        withdrawn = {
            "labels": free["labels"],
            "annotations": free["annotations"],
            "endsAt": iso_utc(time.time() - 1.0),
        }
        post(server.url, [withdrawn])
        resolved = receiver.wait_for(
            lambda got: any("withdrawn" in json.dumps(r.json()) for r in got),
            path="/slack",
            what="the withdrawal",
        )
        (gone,) = [
            a
            for m in resolved
            for a in m.json()["attachments"]
            if a["title"] == "GPU recommendations withdrawn · start-now · a"
        ]
        assert "~Start job 4711 (2 GPU) now on gpu-07~ withdrawn" in gone["text"]
        assert gone["color"] == "good"
    finally:
        server.stop()
        receiver.stop()


# ------------------------------------------------------------ hostile job fields (issue 17)

_UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_RAW_AMPERSAND = re.compile(r"&(?!amp;|lt;|gt;)")


def slack_escaped(value: str) -> str:
    """What the templates' ``gpuadvisor.slack.escape`` makes of ``value``, written again in
    Python: lone surrogates arrive as U+FFFD (Alertmanager's JSON decoder), cut at 1000
    characters with "…", control characters and bidi overrides as U+FFFD, ``& < >`` as
    entities."""
    text = re.sub("[\ud800-\udfff]", "\ufffd", value)
    if len(text) > 1000:
        text = text[:1000] + "…"
    text = _UNSHOWN.sub("\ufffd", text)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@pytest.mark.e2e
def test_hostile_job_fields_arrive_in_slack_escaped_through_a_real_alertmanager(
    tmp_path: Path,
) -> None:
    """Every string of the shared corpus as a job id (so in the alert's labels, summary,
    description and command), and as a health alert's description, through the shipped templates
    in Debian's Alertmanager to a loopback Slack: nothing pings, links or controls a terminal."""
    receiver = Receiver()
    server = AlertmanagerServer(tmp_path / "am", "", config=local_config(tmp_path, receiver))
    try:
        server.start().wait_ready()
        now_s = 3_999_999_000.0
        recs = [advice(value, "gpu-07") for value in HOSTILE.values()]
        cycle = Delivery(now_s, 30.0, active=tuple(ActiveAdvice(r, now_s) for r in recs))
        body = alerts_json(cycle, (("cluster", "a"),))
        for alert in body:
            alert.pop("startsAt")
            alert.pop("endsAt")
        health = input_stale("<!here>")
        health["annotations"]["description"] = HOSTILE["slack-ping-and-link"]
        post(server.url, [*body, health])

        def both(got: list[Received]) -> bool:
            return len([a for r in got for a in r.json()["attachments"]]) >= 2

        messages = receiver.wait_for(both, path="/slack", what="advice and health messages")
        by_title = {a["title"]: a for m in messages for a in m.json()["attachments"]}
        advice_title = f"{len(recs)} GPU recommendations · start-now · a"
        health_title = "[FIRING:1] Advisor input stale or down · &lt;!here&gt;"
        assert set(by_title) == {advice_title, health_title}, list(by_title)

        text = by_title[advice_title]["text"]
        assert "&lt;!channel&gt; &lt;https://evil.example|click&gt;" in text  # the case
        for rec in recs:
            assert f"*{slack_escaped(rec.action)}*" in text, rec.job_id[:80]
            assert f"`{slack_escaped(rec.command)}`" in text, rec.job_id[:80]
        health_text = by_title[health_title]["text"]
        assert health_text.startswith(
            "• &lt;!channel&gt; &lt;https://evil.example|click&gt; <https://"
        ), health_text
        for attachment in (by_title[advice_title], by_title[health_title]):
            for key in ("title", "text", "fallback"):
                shown = attachment[key].replace("|runbook>", "").replace("<https://", "")
                assert "<" not in shown and ">" not in shown, (key, shown[:300])
                assert not _RAW_AMPERSAND.search(shown), (key, shown[:300])
                assert not _UNSHOWN.search(shown.replace("\n", "")), (key, shown[:300])
        assert len(text) < 2000 * len(recs)  # the 1 MB value is cut
    finally:
        server.stop()
        receiver.stop()
