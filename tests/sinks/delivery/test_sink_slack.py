"""Slack incoming webhook against a local fake Slack on 127.0.0.1: Block Kit shape and limits, the
digest's "…and K more", 429 with Retry-After, one message per second, errors, a secret URL."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpuadvisor.errors import ConfigError
from gpuadvisor.model.recommendation import Gain, Kind, Recommendation, Severity
from gpuadvisor.sinks.delivery.outbox import (
    ActiveAdvice,
    Delivery,
    Outbox,
    OutboxSettings,
    Outcome,
    SinkError,
)
from gpuadvisor.sinks.delivery.slack import (
    MAX_BLOCKS,
    MAX_SECTION_CHARS,
    MAX_TOP_N,
    SlackSettings,
    SlackSink,
    message_json,
    mrkdwn_escape,
    plain_text,
    truncate,
)
from tests.hostile import HOSTILE, SLACK_SPECIAL
from tests.ports import free_port

T0 = 1_700_000_000.0
SECRET_PATH = "/services/T0001/B0001/s3cretT0kenXYZ"


def make_rec(
    job_id: str,
    *,
    gpus: float = 1.0,
    severity: Severity = Severity.INFO,
    action: str | None = None,
) -> Recommendation:
    return Recommendation(
        kind=Kind.START_NOW,
        job_id=job_id,
        node="gpu-07",
        action=action or f"Start job {job_id} now on gpu-07",
        commands=(("scontrol", "top", job_id),),
        gain=Gain(gpus_busy_now=gpus, gpu_hours_per_day=gpus * 24, allocation_pp=gpus * 1.5),
        evidence=(("gpus", f"{gpus:g}"), ("head_job", "4702")),
        severity=severity,
        valid_until_s=T0 + 600,
    )


def entries(recs: Sequence[Recommendation]) -> tuple[ActiveAdvice, ...]:
    return tuple(ActiveAdvice(r, T0) for r in recs)


def firing(*recs: Recommendation) -> Delivery:
    return Delivery(T0, 30.0, active=entries(recs), new=entries(recs), advisor_url="http://adv:9")


@dataclass
class FakeSlack:
    """An incoming webhook that checks Block Kit's limits as Slack does (400 invalid_blocks) and
    answers from a script of (status, headers, body), then 200 ok."""

    script: list[tuple[int, dict[str, str], str]] = field(default_factory=list)
    received: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    server: TestServer | None = None

    async def handle(self, request: web.Request) -> web.Response:
        now = asyncio.get_running_loop().time()
        if request.path != SECRET_PATH:
            return web.Response(status=404, text="no_service")
        message = await request.json()
        self.received.append((now, message))
        if self.script:
            status, headers, body = self.script.pop(0)
            return web.Response(status=status, headers=headers, text=body)
        problem = block_kit_problem(message)
        if problem:
            return web.Response(status=400, text=f"invalid_blocks: {problem}")
        return web.Response(text="ok")

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url(SECRET_PATH))

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [m for _, m in self.received]


def block_kit_problem(message: dict[str, Any]) -> str:
    """Why Slack would refuse ``message`` (empty when it would not)."""
    if not isinstance(message.get("text"), str) or not message["text"]:
        return "no text fallback"
    blocks = message.get("blocks", [])
    if len(blocks) > MAX_BLOCKS:
        return f"{len(blocks)} blocks"
    for block in blocks:
        if block["type"] == "header":
            text = block["text"]
            if text["type"] != "plain_text" or len(text["text"]) > 150:
                return "header"
        elif block["type"] == "section":
            text = block["text"]
            if text["type"] != "mrkdwn" or not 0 < len(text["text"]) <= MAX_SECTION_CHARS:
                return "section text"
        elif block["type"] == "context":
            if not 0 < len(block["elements"]) <= 10:
                return "context elements"
            if any(len(e["text"]) > MAX_SECTION_CHARS for e in block["elements"]):
                return "context text"
        else:
            return f"unexpected block {block['type']}"
    return ""


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    app = web.Application()
    app.router.add_post("/{tail:.*}", fake.handle)
    fake.server = TestServer(app, host="127.0.0.1")
    await fake.server.start_server()
    yield fake
    await fake.server.close()


@pytest.fixture
async def tasks() -> AsyncIterator[list[asyncio.Task[None]]]:
    running: list[asyncio.Task[None]] = []
    yield running
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)


def sections(message: dict[str, Any]) -> list[str]:
    return [b["text"]["text"] for b in message["blocks"] if b["type"] == "section"]


async def test_new_advice_is_one_block_kit_message_with_a_text_fallback(slack: FakeSlack) -> None:
    sink = SlackSink(SlackSettings(slack.url, title="cluster-a"))
    await sink.deliver(firing(make_rec("4711", gpus=2.0), make_rec("4712")))
    await sink.aclose()
    (message,) = slack.messages
    assert block_kit_problem(message) == ""
    header, first, first_gain, second, _, footer = message["blocks"]
    assert header["text"]["text"] == "2 new GPU recommendations · cluster-a"
    assert first["text"]["text"].startswith("*Start job 4711 now on gpu-07*")
    assert "`scontrol top 4711`" in first["text"]["text"]
    assert "head_job: 4702" in first["text"]["text"]
    assert first_gain["elements"][0]["text"].startswith("+2 GPUs busy now · 48 GPU-h/day · +3 pp")
    assert "4712" in second["text"]["text"]
    assert "http://adv:9/api/v1/recommendations" in footer["elements"][0]["text"]
    assert message["text"].startswith("gpuadvisor: 2 new GPU recommendations · cluster-a: Start")


async def test_resolved_advice_is_a_second_message(slack: FakeSlack) -> None:
    sink = SlackSink(SlackSettings(slack.url, min_interval_s=0.0))
    done = entries([make_rec("1")])
    await sink.deliver(Delivery(T0, 30.0, resolved=done))
    await sink.aclose()
    (message,) = slack.messages
    assert message["blocks"][0]["text"]["text"] == "1 GPU recommendation resolved"
    assert sections(message) == ["*Resolved:* ~Start job 1 now on gpu-07~"]


def test_the_digest_shows_the_top_n_most_severe_and_largest_then_and_k_more() -> None:
    recs = [make_rec(str(n), gpus=float(n % 7 + 1)) for n in range(25)]
    recs.append(make_rec("urgent", gpus=0.5, severity=Severity.CRITICAL))
    message = message_json(entries(recs), resolved=False, top_n=10)
    texts = sections(message)
    assert len(texts) == 11
    assert "urgent" in texts[0]  # critical first, though its gain is the smallest
    assert all("7 GPU" not in t for t in texts)  # sanity: actions do not name the size
    assert texts[-1] == "…and 16 more"
    gains = [
        float(b["elements"][0]["text"].split()[0])
        for b in message["blocks"]
        if b["type"] == "context"
    ]
    assert gains[1:] == sorted(gains[1:], reverse=True)
    assert message["text"].endswith("; …and 16 more")


def test_no_digest_exceeds_fifty_blocks() -> None:
    recs = [make_rec(str(n)) for n in range(200)]
    for resolved in (False, True):
        message = message_json(entries(recs), resolved=resolved, top_n=MAX_TOP_N, advisor_url="u")
        assert len(message["blocks"]) <= MAX_BLOCKS
        assert block_kit_problem(message) == ""
        assert sections(message)[-1] == f"…and {200 - MAX_TOP_N} more"


def test_long_text_is_cut_to_3000_characters_with_an_ellipsis() -> None:
    rec = make_rec("1", action="Start job 1 & <its friends> " * 400)
    message = message_json(entries([rec]), resolved=False)
    (text,) = sections(message)
    assert MAX_SECTION_CHARS - 4 <= len(text) <= MAX_SECTION_CHARS
    assert text.endswith("…")
    assert "<its" not in text  # mrkdwn's reserved characters are escaped
    assert block_kit_problem(message) == ""
    assert len(message["text"]) <= 3000


def test_truncation_never_splits_an_entity() -> None:
    assert truncate("ab&amp;cd", 5) == "ab…"
    assert truncate("abc", 3) == "abc"


def test_top_n_outside_what_fifty_blocks_hold_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="top_n"):
        SlackSettings("https://hooks.slack.com/services/x", top_n=MAX_TOP_N + 1)
    with pytest.raises(ConfigError, match="url"):
        SlackSettings("hooks.slack.com/services/x")


def test_the_webhook_url_is_never_shown() -> None:
    settings = SlackSettings("https://hooks.slack.com/services/T0/B0/s3cretT0kenXYZ")
    sink = SlackSink(settings)
    assert "s3cret" not in repr(settings)
    assert sink.name.startswith("slack:hooks.slack.com#")
    assert "s3cret" not in sink.name


async def test_429_waits_retry_after_then_delivers(
    slack: FakeSlack, tasks: list[asyncio.Task[None]]
) -> None:
    slack.script = [(429, {"Retry-After": "2"}, "rate_limited")]
    seen: list[tuple[str, Outcome]] = []
    sink = SlackSink(SlackSettings(slack.url, min_interval_s=0.0))
    outbox = Outbox(
        sink, OutboxSettings(), on_outcome=lambda s, o: seen.append((s, o)), rng=random.Random(1)
    )
    tasks.append(asyncio.create_task(outbox.run()))
    outbox.submit(firing(make_rec("1")))
    async with asyncio.timeout(10.0):
        await outbox.drain()
    await sink.aclose()
    (first_at, _), (second_at, _) = slack.received
    assert second_at - first_at >= 2.0
    assert second_at - first_at < 3.5
    assert seen == [(sink.name, Outcome.RETRIED), (sink.name, Outcome.DELIVERED)]


async def test_at_most_one_message_per_second(slack: FakeSlack) -> None:
    sink = SlackSink(SlackSettings(slack.url))  # the default: 1 s
    recs = entries([make_rec("1")])
    await sink.deliver(Delivery(T0, 30.0, active=recs, new=recs, resolved=entries([make_rec("0")])))
    await sink.aclose()
    (first_at, _), (second_at, _) = slack.received
    assert second_at - first_at >= 0.99


async def test_pacing_counts_every_post_on_the_injected_clock(slack: FakeSlack) -> None:
    now = [0.0]
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    sink = SlackSink(SlackSettings(slack.url), clock=lambda: now[0], sleep=sleep)
    for n in range(4):
        await sink.deliver(firing(make_rec(str(n))))
        now[0] += 0.25
    await sink.aclose()
    assert len(slack.messages) == 4
    assert waits == pytest.approx([0.75, 0.75, 0.75])


async def test_other_4xx_is_dropped_and_logged_with_the_body_not_the_url(
    slack: FakeSlack, tasks: list[asyncio.Task[None]], caplog: pytest.LogCaptureFixture
) -> None:
    slack.script = [(404, {}, "no_service")]
    sink = SlackSink(SlackSettings(slack.url))
    outbox = Outbox(sink)
    tasks.append(asyncio.create_task(outbox.run()))
    with caplog.at_level(logging.DEBUG):
        outbox.submit(firing(make_rec("1")))
        async with asyncio.timeout(5.0):
            await outbox.drain()
    await sink.aclose()
    assert outbox.counts == {Outcome.DELIVERED: 0, Outcome.RETRIED: 0, Outcome.DROPPED: 1}
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("gpuadvisor"))
    assert f"sink {sink.name} dropped" in ours
    assert "HTTP 404: no_service" in ours
    assert "s3cret" not in ours


async def test_5xx_is_retried(slack: FakeSlack) -> None:
    slack.script = [(503, {}, "")]
    sink = SlackSink(SlackSettings(slack.url, min_interval_s=0.0))
    with pytest.raises(SinkError) as failed:
        await sink.deliver(firing(make_rec("1")))
    assert not failed.value.permanent and failed.value.retry_after_s is None
    await sink.deliver(firing(make_rec("1")))
    await sink.aclose()
    assert len(slack.received) == 2


async def test_a_refused_connection_is_retried_and_names_no_secret() -> None:
    url = f"http://127.0.0.1:{free_port()}{SECRET_PATH}"
    sink = SlackSink(SlackSettings(url))
    with pytest.raises(SinkError) as failed:
        await sink.deliver(firing(make_rec("1")))
    await sink.aclose()
    assert not failed.value.permanent
    assert "s3cret" not in str(failed.value)


def test_the_fake_checks_what_it_claims() -> None:
    assert block_kit_problem({"blocks": []}) == "no text fallback"
    too_long = {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}
    assert block_kit_problem({"text": "t", "blocks": [too_long]}) == "section text"
    assert block_kit_problem({"text": "t", "blocks": [too_long] * 51}) == "51 blocks"
    assert json.dumps(message_json(entries([make_rec("1")]), resolved=False))


# ------------------------------------------------------------------ hostile job fields (issue 17)

_RAW_AMPERSAND = re.compile(r"&(?!amp;|lt;|gt;)")
_UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def shown_by_slack(mrkdwn: str) -> str:
    """What Slack displays for escaped text: the three entities decoded, nothing else."""
    return mrkdwn.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def mrkdwn_texts(message: dict[str, Any]) -> list[str]:
    """Every text Slack parses as mrkdwn: the ``text`` fallback, sections and context lines."""
    texts = [message["text"]]
    for block in message["blocks"]:
        if block["type"] == "section":
            texts.append(block["text"]["text"])
        elif block["type"] == "context":
            texts += [e["text"] for e in block["elements"]]
    return texts


def hostile_rec(value: str) -> Recommendation:
    """``value`` as the job id, inside the action and the command, and as evidence."""
    return Recommendation(
        kind=Kind.START_NOW,
        job_id=value,
        node="gpu-07",
        action=f"Start job {value} now on gpu-07",
        commands=(("scontrol", "top", value),),
        gain=Gain(gpus_busy_now=1.0, gpu_hours_per_day=24.0, allocation_pp=1.5),
        evidence=(("name", value), ("user", value)),
        severity=Severity.WARNING,
        valid_until_s=T0 + 600,
    )


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
@pytest.mark.parametrize("resolved", [False, True], ids=["new", "resolved"])
def test_hostile_job_fields_reach_slack_escaped_in_blocks_and_fallback(
    value: str, resolved: bool
) -> None:
    message = message_json(entries([hostile_rec(value)]), resolved=resolved, title=value[:200])
    assert block_kit_problem(message) == ""
    assert len(message["text"]) <= 3000
    json.dumps(message, ensure_ascii=False).encode("utf-8")  # valid Unicode: no lone surrogate
    for text in mrkdwn_texts(message):
        assert "<" not in text and ">" not in text, text[:200]
        assert not _RAW_AMPERSAND.search(text), text[:200]
        assert not _UNSHOWN.search(text), text[:200]
    header = message["blocks"][0]["text"]["text"]
    assert not _UNSHOWN.search(header) and len(header) <= 150
    first = mrkdwn_texts(message)[1]
    if len(value) > 1000:
        assert first.endswith("…") and message["text"].endswith("…")  # cut, visibly
    else:  # Slack shows the value as typed, but for the characters it cannot show
        assert plain_text(value) in shown_by_slack(first)
        assert plain_text(value) in shown_by_slack(message["text"])


def test_the_text_fallback_of_a_channel_ping_job_is_escaped() -> None:
    """The issue's case: the blocks were escaped, the notification fallback was not."""
    rec = hostile_rec("<!channel> <https://evil.example|click>")
    message = message_json(entries([rec]), resolved=False)
    assert "&lt;!channel&gt; &lt;https://evil.example|click&gt;" in message["text"]
    assert not any(s in message["text"] for s in SLACK_SPECIAL)


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_the_escaping_helper_leaves_no_markup_slack_acts_on(value: str) -> None:
    escaped = mrkdwn_escape(value)
    assert "<" not in escaped and ">" not in escaped and not _RAW_AMPERSAND.search(escaped)
    assert not _UNSHOWN.search(escaped)
    assert shown_by_slack(escaped) == plain_text(value)
