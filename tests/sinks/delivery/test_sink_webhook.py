"""Generic webhook against a local receiver on 127.0.0.1 that checks the HMAC and the timestamp;
tampered and replayed requests refused; real payloads checked against docs/webhook.schema.json."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpuadvisor.errors import ConfigError
from gpuadvisor.model.recommendation import Gain, Kind, Recommendation, Severity
from gpuadvisor.sinks.delivery.outbox import ActiveAdvice, Delivery, SinkError
from gpuadvisor.sinks.delivery.payload import recommendation_json
from gpuadvisor.sinks.delivery.webhook import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WebhookSettings,
    WebhookSink,
    envelope_body,
    envelope_json,
    sign,
    verify_signature,
)
from tests.hostile import HOSTILE, SHORT

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "docs" / "webhook.schema.json"
SECRET = "whsec-test-0123456789"
T0 = 1_700_000_000.0


def make_rec(job_id: str, node: str = "gpu-07", kind: Kind = Kind.START_NOW) -> Recommendation:
    return Recommendation(
        kind=kind,
        job_id=job_id,
        node=node,
        action=f"Start job {job_id} now on {node}",
        commands=(("scontrol", "top", job_id), ("scontrol", "update", f"jobid={job_id}")),
        gain=Gain(gpus_busy_now=2.0, gpu_hours_per_day=48.0, allocation_pp=25.0),
        evidence=(("gpus", "2"), ("head_job", "4702")),
        severity=Severity.WARNING,
        valid_until_s=T0 + 600,
    )


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return loaded


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}


def schema_problems(
    value: Any, node: dict[str, Any], root: dict[str, Any], at: str = "$"
) -> list[str]:
    """Where ``value`` breaks ``node``: the keywords docs/webhook.schema.json uses (``type``,
    ``const``, ``enum``, ``required``, ``properties``, ``additionalProperties``, ``items``,
    ``$ref`` into ``$defs``, ``format: date-time``). An unknown keyword fails loudly."""
    known = {"$schema", "title", "description", "type", "const", "enum", "required", "properties"}
    known |= {"additionalProperties", "items", "$ref", "$defs", "format"}
    unknown = set(node) - known
    assert not unknown, f"the checker does not know {unknown} (at {at})"
    if "$ref" in node:
        name = node["$ref"].removeprefix("#/$defs/")
        return schema_problems(value, root["$defs"][name], root, at)
    problems: list[str] = []
    if "type" in node:
        expected = _TYPES[node["type"]]
        if (isinstance(value, bool) and bool not in expected) or not isinstance(value, expected):
            return [f"{at}: {type(value).__name__}, not {node['type']}"]
    if "const" in node and value != node["const"]:
        problems.append(f"{at}: {value!r} is not {node['const']!r}")
    if "enum" in node and value not in node["enum"]:
        problems.append(f"{at}: {value!r} not in {node['enum']}")
    if node.get("format") == "date-time" and not (
        isinstance(value, str) and value.endswith("Z") and _parses(value)
    ):
        problems.append(f"{at}: {value!r} is not an ISO-8601 UTC time")
    if isinstance(value, dict):
        problems += [f"{at}: missing {k!r}" for k in node.get("required", ()) if k not in value]
        for key, item in value.items():
            sub = node.get("properties", {}).get(key, node.get("additionalProperties", True))
            if sub is False:
                problems.append(f"{at}: unexpected {key!r}")
            elif isinstance(sub, dict):
                problems += schema_problems(item, sub, root, f"{at}.{key}")
    if isinstance(value, list) and "items" in node:
        for n, item in enumerate(value):
            problems += schema_problems(item, node["items"], root, f"{at}[{n}]")
    return problems


def _parses(text: str) -> bool:
    try:
        time.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return False
    return True


@dataclass
class Receiver:
    """A webhook receiver as docs/webhook.md describes one: verify, then accept (204)."""

    secret: str = SECRET
    fail_first: int = 0
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    accepted: list[dict[str, Any]] = field(default_factory=list)
    server: TestServer | None = None

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = dict(request.headers)
        self.received.append((headers, body))
        timestamp = request.headers.get(TIMESTAMP_HEADER, "")
        signature = request.headers.get(SIGNATURE_HEADER, "")
        if not verify_signature(self.secret, timestamp, body, signature, now_s=time.time()):
            return web.Response(status=401, text="bad signature")
        if self.fail_first > 0:
            self.fail_first -= 1
            return web.Response(status=503, text="busy")
        self.accepted.append(json.loads(body))
        return web.Response(status=204)

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("/hooks/gpuadvisor?token=abc123"))


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    fake = Receiver()
    app = web.Application()
    app.router.add_post("/hooks/gpuadvisor", fake.handle)
    fake.server = TestServer(app, host="127.0.0.1")
    await fake.server.start_server()
    yield fake
    await fake.server.close()


def cycle_with(new: list[Recommendation], resolved: list[Recommendation]) -> Delivery:
    fresh = tuple(ActiveAdvice(r, T0 - 60) for r in new)
    return Delivery(
        now_s=T0,
        interval_s=30.0,
        active=fresh,
        new=fresh,
        resolved=tuple(ActiveAdvice(r, T0 - 600) for r in resolved),
        advisor_url="http://127.0.0.1:9899",
    )


async def test_firing_and_resolved_arrive_signed_and_match_the_schema(receiver: Receiver) -> None:
    settings = WebhookSettings(receiver.url, SECRET, labels=(("cluster", "a"),))
    sink = WebhookSink(settings)
    await sink.deliver(cycle_with([make_rec("4711"), make_rec("4712")], [make_rec("4700")]))
    await sink.aclose()
    firing, resolved = receiver.accepted
    assert (firing["event"], resolved["event"]) == ("firing", "resolved")
    assert [r["job_id"] for r in firing["recommendations"]] == ["4711", "4712"]
    assert [r["job_id"] for r in resolved["recommendations"]] == ["4700"]
    assert firing["advisor"]["labels"] == {"cluster": "a"}
    assert firing["advisor"]["cycle_at"] == "2023-11-14T22:13:20.000Z"
    assert firing["recommendations"][0]["first_seen"] == "2023-11-14T22:12:20.000Z"
    for envelope in receiver.accepted:
        assert schema_problems(envelope, schema(), schema()) == []
    headers, _ = receiver.received[0]
    assert headers[SIGNATURE_HEADER].startswith("sha256=")
    assert abs(int(headers[TIMESTAMP_HEADER]) - time.time()) < 5


def test_the_recommendation_form_keeps_its_field_names_and_types() -> None:
    out = recommendation_json(make_rec("4711"), first_seen_s=T0)
    assert out == {
        "id": make_rec("4711").id,
        "kind": "start-now",
        "job_id": "4711",
        "node": "gpu-07",
        "subject": "job 4711 on gpu-07",
        "action": "Start job 4711 now on gpu-07",
        "commands": [["scontrol", "top", "4711"], ["scontrol", "update", "jobid=4711"]],
        "command": "scontrol top 4711 && scontrol update jobid=4711",
        "gain": {"gpus_busy_now": 2.0, "gpu_hours_per_day": 48.0, "allocation_pp": 25.0},
        "evidence": {"gpus": "2", "head_job": "4702"},
        "severity": "warning",
        "valid_until": "2023-11-14T22:23:20.000Z",
        "first_seen": "2023-11-14T22:13:20.000Z",
    }
    rec_schema = schema()["$defs"]["recommendation"]
    assert schema_problems(out, rec_schema, schema()) == []
    assert set(rec_schema["required"]) <= set(out)


def test_repeated_evidence_keys_keep_every_value() -> None:
    rec = Recommendation(
        Kind.HOLD_NODE, "", "gpu-01", "Hold gpu-01", (), Gain(), (("why", "a"), ("why", "b"))
    )
    assert recommendation_json(rec)["evidence"] == {"why": "a; b"}


def test_the_schema_checker_finds_what_is_wrong() -> None:
    good = recommendation_json(make_rec("1"))
    node = schema()["$defs"]["recommendation"]
    missing = {k: v for k, v in good.items() if k != "command"}
    assert schema_problems(missing, node, schema()) == ["$: missing 'command'"]
    assert schema_problems({**good, "commands": ["scontrol top 1"]}, node, schema()) == [
        "$.commands[0]: str, not array"
    ]
    assert schema_problems({**good, "kind": "reorder"}, node, schema()) != []
    assert schema_problems({**good, "valid_until": "tomorrow"}, node, schema()) != []
    assert schema_problems({**good, "evidence": {"gpus": 2}}, node, schema()) != []


def test_a_tampered_body_or_replayed_timestamp_fails_verification() -> None:
    body = b'{"event":"firing"}'
    timestamp = "1700000000"
    signature = sign(SECRET, timestamp, body)
    assert verify_signature(SECRET, timestamp, body, signature, now_s=T0 + 10)
    assert not verify_signature(SECRET, timestamp, body + b" ", signature, now_s=T0)
    assert not verify_signature(SECRET, "1700000001", body, signature, now_s=T0)
    assert not verify_signature("other-secret", timestamp, body, signature, now_s=T0)
    assert not verify_signature(SECRET, timestamp, body, signature, now_s=T0 + 301)
    assert not verify_signature(SECRET, timestamp, body, signature, now_s=T0 - 301)
    assert not verify_signature(
        SECRET, timestamp, body, signature.removeprefix("sha256="), now_s=T0
    )
    assert not verify_signature(SECRET, "soon", body, signature, now_s=T0)
    assert not verify_signature(SECRET, timestamp, body, "sha256=é", now_s=T0)


async def test_the_receiver_refuses_a_tampered_request(receiver: Receiver) -> None:
    sink = WebhookSink(WebhookSettings(receiver.url, SECRET))
    await sink.deliver(cycle_with([make_rec("4711")], []))
    await sink.aclose()
    headers, body = receiver.received[0]
    tampered = body.replace(b"4711", b"4712")
    forwarded = {k: headers[k] for k in (TIMESTAMP_HEADER, SIGNATURE_HEADER, "Content-Type")}
    async with aiohttp.ClientSession() as session:
        async with session.post(receiver.url, data=tampered, headers=forwarded) as reply:
            assert reply.status == 401
        async with session.post(receiver.url, data=body, headers=forwarded) as reply:
            assert reply.status == 204  # the untouched request still verifies
    assert len(receiver.accepted) == 2


async def test_a_wrong_secret_is_a_permanent_failure(receiver: Receiver) -> None:
    sink = WebhookSink(WebhookSettings(receiver.url, "not-the-secret"))
    with pytest.raises(SinkError) as failed:
        await sink.deliver(cycle_with([make_rec("1")], []))
    await sink.aclose()
    assert failed.value.permanent
    assert "HTTP 401: bad signature" in str(failed.value)
    assert "abc123" not in str(failed.value)


async def test_each_retry_is_signed_afresh(receiver: Receiver) -> None:
    receiver.fail_first = 1
    clock = [time.time() - 200]
    sink = WebhookSink(WebhookSettings(receiver.url, SECRET), clock=lambda: clock[0])
    with pytest.raises(SinkError) as failed:
        await sink.deliver(cycle_with([make_rec("1")], []))
    assert not failed.value.permanent
    clock[0] += 150
    await sink.deliver(cycle_with([make_rec("1")], []))
    await sink.aclose()
    first, second = (int(h[TIMESTAMP_HEADER]) for h, _ in receiver.received)
    assert second - first == 150
    assert len(receiver.accepted) == 1


def test_settings_refuse_an_empty_secret_and_hide_secrets() -> None:
    with pytest.raises(ConfigError, match="secret"):
        WebhookSettings("https://example.invalid/hook", "")
    settings = WebhookSettings("https://example.invalid/hook?token=abc123", SECRET)
    assert SECRET not in repr(settings) and "abc123" not in repr(settings)
    name = WebhookSink(settings).name
    assert name.startswith("webhook:example.invalid#") and "abc123" not in name


# ------------------------------------------------------------------ hostile job fields (issue 17)


def hostile_rec(value: str) -> Recommendation:
    rec = make_rec(value)
    return Recommendation(
        kind=rec.kind,
        job_id=value,
        node=value,
        action=rec.action,
        commands=rec.commands,
        gain=rec.gain,
        evidence=((value, value), ("name", value)),
        severity=rec.severity,
        valid_until_s=rec.valid_until_s,
    )


def as_unicode(value: str) -> str:
    return re.sub("[\ud800-\udfff]", "\ufffd", value)


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_job_fields_stay_data_in_the_envelope(value: str) -> None:
    """Every field carries the value as typed (as a JSON string, never spliced into markup),
    the body is strict UTF-8 JSON a strict parser accepts, and it matches the schema."""
    rec = hostile_rec(value)
    cycle = cycle_with([rec], [])
    body = envelope_body(envelope_json(cycle, "firing", sent_s=T0, labels=(("cluster", value),)))
    text = body.decode("ascii")  # every non-ASCII character is a JSON escape
    back = json.loads(text)
    assert schema_problems(back, schema(), schema()) == []
    (got,) = back["recommendations"]
    shown = as_unicode(value)
    assert (got["job_id"], got["node"], back["advisor"]["labels"]["cluster"]) == (shown,) * 3
    assert got["action"] == f"Start job {shown} now on gpu-07"
    assert got["commands"][0] == ["scontrol", "top", shown]
    assert got["evidence"] == {shown: shown, "name": shown}
    json.dumps(back, ensure_ascii=False).encode("utf-8")  # no lone surrogate survived


async def test_the_hostile_corpus_is_delivered_signed_in_one_envelope(receiver: Receiver) -> None:
    sink = WebhookSink(WebhookSettings(receiver.url, SECRET))
    recs = [hostile_rec(value) for value in SHORT.values()]  # the receiver takes 1 MB at most
    await sink.deliver(cycle_with(recs, []))
    await sink.aclose()
    (envelope,) = receiver.accepted
    assert [r["job_id"] for r in envelope["recommendations"]] == [
        as_unicode(v) for v in SHORT.values()
    ]
    assert schema_problems(envelope, schema(), schema()) == []
