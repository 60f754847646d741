"""The outbox: backoff with full jitter (seeded, fake clock), Retry-After, bounds that drop and
count, coalescing for Alertmanager, one item per event for Slack and webhooks, nothing lost."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from gpuadvisor.model.recommendation import Gain, Kind, Recommendation
from gpuadvisor.sinks.delivery.outbox import (
    ActiveAdvice,
    Coalescing,
    Delivery,
    Outbox,
    OutboxSettings,
    Outcome,
    SinkError,
    backoff_s,
    events,
    supersede,
)

T0 = 1_700_000_000.0


def make_rec(job_id: str, node: str = "gpu-01", kind: Kind = Kind.START_NOW) -> Recommendation:
    return Recommendation(
        kind=kind,
        job_id=job_id,
        node=node,
        action=f"Start job {job_id} now on {node}",
        commands=(("scontrol", "top", job_id),),
        gain=Gain(gpus_busy_now=1.0, gpu_hours_per_day=24.0, allocation_pp=12.5),
        evidence=(("gpus", "1"),),
        valid_until_s=T0 + 600,
    )


def active(*job_ids: str) -> tuple[ActiveAdvice, ...]:
    return tuple(ActiveAdvice(make_rec(j), T0) for j in job_ids)


def cycle(
    active_ids: Sequence[str] = (),
    new_ids: Sequence[str] = (),
    resolved_ids: Sequence[str] = (),
    now_s: float = T0,
) -> Delivery:
    return Delivery(
        now_s=now_s,
        interval_s=30.0,
        active=active(*active_ids),
        new=active(*new_ids),
        resolved=active(*resolved_ids),
    )


def job_ids(entries: Sequence[ActiveAdvice]) -> list[str]:
    return [a.recommendation.job_id for a in entries]


class FakeTime:
    """A clock that only moves when the outbox sleeps: every wait is recorded, none is real."""

    def __init__(self) -> None:
        self.now_s = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now_s

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_s += seconds
        await asyncio.sleep(0)


class ScriptedSink:
    """Fails as its script says (``None`` = accept), then accepts; records what it accepted."""

    def __init__(
        self, coalescing: Coalescing, script: Sequence[SinkError | None] = (), name: str = "test"
    ) -> None:
        self.coalescing = coalescing
        self.script = list(script)
        self.calls: list[Delivery] = []
        self.delivered: list[Delivery] = []
        self._name = name
        self.gate: asyncio.Event | None = None
        """When set, the next call waits for it (an attempt kept in flight)."""

    @property
    def name(self) -> str:
        return self._name

    async def deliver(self, cycle: Delivery) -> None:
        self.calls.append(cycle)
        if self.gate is not None:
            gate, self.gate = self.gate, None
            await gate.wait()
        outcome = self.script.pop(0) if self.script else None
        if outcome is not None:
            raise outcome
        self.delivered.append(cycle)

    async def aclose(self) -> None:
        self.closed = True


Outcomes = list[tuple[str, Outcome]]


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
async def running() -> AsyncIterator[Callable[[Outbox], None]]:
    """Starts ``Outbox.run`` tasks; cancels them after the test."""
    tasks: list[asyncio.Task[None]] = []
    yield lambda outbox: tasks.append(asyncio.create_task(outbox.run()))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def make_outbox(
    sink: ScriptedSink,
    fake_time: FakeTime,
    settings: OutboxSettings | None = None,
    seed: int = 7,
) -> tuple[Outbox, Outcomes]:
    seen: Outcomes = []
    outbox = Outbox(
        sink,
        settings or OutboxSettings(base_delay_s=1.0, max_delay_s=8.0),
        on_outcome=lambda name, outcome: seen.append((name, outcome)),
        rng=random.Random(seed),
        clock=fake_time,
        sleep=fake_time.sleep,
    )
    return outbox, seen


async def drained(outbox: Outbox) -> None:
    async with asyncio.timeout(5.0):
        await outbox.drain()


def test_full_jitter_stays_under_the_capped_exponential_ceiling() -> None:
    settings = OutboxSettings(base_delay_s=0.5, max_delay_s=4.0)
    rng = random.Random(1)
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 4.0), (60, 4.0)]:
        draws = [backoff_s(attempt, settings, rng) for _ in range(200)]
        assert all(0.0 <= d <= ceiling for d in draws)
        assert max(draws) > 0.8 * ceiling  # spread over the whole range, not a fixed step


async def test_retries_wait_seeded_full_jitter_backoff_then_deliver(
    fake_time: FakeTime, running: Callable[[Outbox], None]
) -> None:
    sink = ScriptedSink(Coalescing.EVENTS, [SinkError("HTTP 503")] * 3)
    outbox, seen = make_outbox(sink, fake_time, seed=42)
    running(outbox)
    outbox.submit(cycle(active_ids=["1"], new_ids=["1"]))
    await drained(outbox)

    expected_rng = random.Random(42)
    expected = [expected_rng.uniform(0, ceiling) for ceiling in (1.0, 2.0, 4.0)]
    assert fake_time.sleeps == pytest.approx(expected)
    assert len(sink.calls) == 4
    assert job_ids(sink.delivered[0].new) == ["1"]
    assert seen == [("test", Outcome.RETRIED)] * 3 + [("test", Outcome.DELIVERED)]
    assert outbox.counts == {Outcome.DELIVERED: 1, Outcome.RETRIED: 3, Outcome.DROPPED: 0}


async def test_the_same_seed_gives_the_same_waits(fake_time: FakeTime) -> None:
    async def waits(seed: int) -> list[float]:
        clock = FakeTime()
        sink = ScriptedSink(Coalescing.EVENTS, [SinkError("down")] * 5)
        outbox, _ = make_outbox(sink, clock, seed=seed)
        task = asyncio.create_task(outbox.run())
        outbox.submit(cycle(new_ids=["1"]))
        await drained(outbox)
        task.cancel()
        return clock.sleeps

    assert await waits(3) == await waits(3)
    assert await waits(3) != await waits(4)


async def test_retry_after_is_honoured_exactly(
    fake_time: FakeTime, running: Callable[[Outbox], None]
) -> None:
    sink = ScriptedSink(Coalescing.EVENTS, [SinkError("HTTP 429", retry_after_s=7.0)])
    outbox, seen = make_outbox(sink, fake_time)
    running(outbox)
    outbox.submit(cycle(new_ids=["1"]))
    await drained(outbox)
    assert fake_time.sleeps == [7.0]
    assert [o for _, o in seen] == [Outcome.RETRIED, Outcome.DELIVERED]


async def test_a_permanent_error_drops_at_once_and_logs_the_recommendations(
    fake_time: FakeTime, running: Callable[[Outbox], None], caplog: pytest.LogCaptureFixture
) -> None:
    sink = ScriptedSink(Coalescing.EVENTS, [SinkError("HTTP 404: no_service", permanent=True)])
    outbox, seen = make_outbox(sink, fake_time)
    running(outbox)
    with caplog.at_level(logging.ERROR):
        outbox.submit(cycle(new_ids=["4711"]))
        await drained(outbox)
    assert seen == [("test", Outcome.DROPPED)]
    assert fake_time.sleeps == []
    assert make_rec("4711").id in caplog.text
    assert "no_service" in caplog.text


async def test_max_attempts_drops_and_counts(
    fake_time: FakeTime, running: Callable[[Outbox], None]
) -> None:
    sink = ScriptedSink(Coalescing.EVENTS, [SinkError("down")] * 10)
    outbox, seen = make_outbox(sink, fake_time, OutboxSettings(max_attempts=3))
    running(outbox)
    outbox.submit(cycle(new_ids=["1"]))
    await drained(outbox)
    assert [o for _, o in seen] == [Outcome.RETRIED, Outcome.RETRIED, Outcome.DROPPED]
    assert len(sink.calls) == 3
    assert outbox.pending == 0


async def test_max_age_drops_before_a_wait_that_would_pass_it(
    fake_time: FakeTime, running: Callable[[Outbox], None]
) -> None:
    sink = ScriptedSink(Coalescing.EVENTS, [SinkError("slow down", retry_after_s=30.0)] * 10)
    outbox, seen = make_outbox(sink, fake_time, OutboxSettings(max_age_s=100.0))
    running(outbox)
    outbox.submit(cycle(new_ids=["1"]))
    await drained(outbox)
    # Waits of 30 s at 0, 30 and 60 s; a fourth would end at 120 s, past 100 s: dropped at 90 s.
    assert fake_time.sleeps == [30.0, 30.0, 30.0]
    assert [o for _, o in seen] == [Outcome.RETRIED] * 3 + [Outcome.DROPPED]


async def test_a_full_outbox_drops_the_oldest_waiting_event_and_counts_it(
    fake_time: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    sink = ScriptedSink(Coalescing.EVENTS)
    outbox, seen = make_outbox(sink, fake_time, OutboxSettings(max_items=3))
    with caplog.at_level(logging.ERROR):
        for job in ("1", "2", "3", "4", "5"):
            outbox.submit(cycle(active_ids=[job], new_ids=[job]))
    assert outbox.pending == 3
    assert seen == [("test", Outcome.DROPPED)] * 2
    assert make_rec("1").id in caplog.text and make_rec("2").id in caplog.text
    task = asyncio.create_task(outbox.run())
    await drained(outbox)
    task.cancel()
    assert [job_ids(c.new) for c in sink.delivered] == [["3"], ["4"], ["5"]]


async def test_the_event_in_flight_is_never_the_one_dropped(
    fake_time: FakeTime, running: Callable[[Outbox], None]
) -> None:
    sink = ScriptedSink(Coalescing.EVENTS)
    gate = sink.gate = asyncio.Event()
    outbox, _ = make_outbox(sink, fake_time, OutboxSettings(max_items=2))
    running(outbox)
    outbox.submit(cycle(new_ids=["1"]))
    async with asyncio.timeout(5.0):
        while not sink.calls:
            await asyncio.sleep(0)
    for job in ("2", "3", "4"):
        outbox.submit(cycle(new_ids=[job]))
    gate.set()
    await drained(outbox)
    assert [job_ids(c.new) for c in sink.delivered] == [["1"], ["4"]]
    assert outbox.counts[Outcome.DROPPED] == 2


async def test_an_event_sink_gets_new_and_resolved_as_separate_items(
    fake_time: FakeTime, running: Callable[[Outbox], None]
) -> None:
    # The resolved event fails once: only it is retried, the new-advice message is not re-sent.
    sink = ScriptedSink(Coalescing.EVENTS, [None, SinkError("HTTP 500")])
    outbox, seen = make_outbox(sink, fake_time)
    running(outbox)
    outbox.submit(cycle(active_ids=["2"], new_ids=["2"], resolved_ids=["1"]))
    await drained(outbox)
    assert [(job_ids(c.new), job_ids(c.resolved)) for c in sink.calls] == [
        (["2"], []),
        ([], ["1"]),
        ([], ["1"]),
    ]
    assert [o for _, o in seen] == [Outcome.DELIVERED, Outcome.RETRIED, Outcome.DELIVERED]


def test_events_of_a_quiet_cycle_are_none() -> None:
    assert events(cycle(active_ids=["1"])) == ()


def test_supersede_carries_resolved_alerts_unless_active_again() -> None:
    older = cycle(active_ids=["3"], resolved_ids=["1", "2"])
    newer = cycle(active_ids=["2", "3"], resolved_ids=[], now_s=T0 + 30)
    merged = supersede(older, newer)
    assert job_ids(merged.active) == ["2", "3"]
    assert job_ids(merged.resolved) == ["1"]
    assert merged.now_s == T0 + 30


async def test_a_newer_cycle_supersedes_a_waiting_alertmanager_batch(
    fake_time: FakeTime, running: Callable[[Outbox], None]
) -> None:
    sink = ScriptedSink(Coalescing.LATEST)
    outbox, seen = make_outbox(sink, fake_time)
    outbox.submit(cycle(active_ids=["1", "2"]))
    outbox.submit(cycle(active_ids=["2"], resolved_ids=["1"], now_s=T0 + 30))
    outbox.submit(cycle(active_ids=["2", "3"], now_s=T0 + 60))
    assert outbox.pending == 1
    running(outbox)
    await drained(outbox)
    (batch,) = sink.delivered
    assert batch.now_s == T0 + 60
    assert job_ids(batch.active) == ["2", "3"]
    assert job_ids(batch.resolved) == ["1"]  # carried over from the superseded cycle
    assert seen == [("test", Outcome.DELIVERED)]


async def test_a_failed_alertmanager_batch_folds_into_the_cycle_that_arrived_meanwhile(
    fake_time: FakeTime, running: Callable[[Outbox], None]
) -> None:
    sink = ScriptedSink(Coalescing.LATEST, [SinkError("connection refused")])
    gate = sink.gate = asyncio.Event()
    outbox, seen = make_outbox(sink, fake_time)
    running(outbox)
    outbox.submit(cycle(active_ids=["2"], resolved_ids=["1"]))
    async with asyncio.timeout(5.0):
        while not sink.calls:
            await asyncio.sleep(0)
    outbox.submit(cycle(active_ids=["2", "3"], now_s=T0 + 30))  # while the first is in flight
    assert outbox.pending == 2
    gate.set()
    await drained(outbox)
    assert len(sink.calls) == 2
    (batch,) = sink.delivered
    assert (job_ids(batch.active), job_ids(batch.resolved)) == (["2", "3"], ["1"])
    assert [o for _, o in seen] == [Outcome.RETRIED, Outcome.DELIVERED]


async def test_an_empty_alertmanager_cycle_sends_nothing(fake_time: FakeTime) -> None:
    outbox, seen = make_outbox(ScriptedSink(Coalescing.LATEST), fake_time)
    outbox.submit(cycle())
    assert outbox.pending == 0
    await drained(outbox)
    assert seen == []


def test_closing_counts_what_is_still_queued_as_dropped(fake_time: FakeTime) -> None:
    outbox, seen = make_outbox(ScriptedSink(Coalescing.EVENTS), fake_time)
    outbox.submit(cycle(new_ids=["1"], resolved_ids=["2"]))
    assert outbox.close() == 2
    assert seen == [("test", Outcome.DROPPED)] * 2
    assert outbox.pending == 0


async def test_an_unexpected_exception_is_retried_like_a_transient_error(
    fake_time: FakeTime, running: Callable[[Outbox], None]
) -> None:
    class Broken(ScriptedSink):
        async def deliver(self, cycle: Delivery) -> None:
            self.calls.append(cycle)
            if len(self.calls) == 1:
                raise KeyError("bug")
            self.delivered.append(cycle)

    sink = Broken(Coalescing.EVENTS)
    outbox, seen = make_outbox(sink, fake_time)
    running(outbox)
    outbox.submit(cycle(new_ids=["1"]))
    await drained(outbox)
    assert [o for _, o in seen] == [Outcome.RETRIED, Outcome.DELIVERED]


@pytest.mark.parametrize("seed", range(20))
async def test_every_event_is_delivered_or_counted_as_dropped(seed: int) -> None:
    """Random failures, bounds and arrivals: delivered + dropped == events submitted."""
    rng = random.Random(seed)
    clock = FakeTime()
    failures: list[SinkError | None] = []
    for _ in range(60):
        roll = rng.random()
        if roll < 0.3:
            failures.append(SinkError("HTTP 503"))
        elif roll < 0.4:
            failures.append(SinkError("HTTP 429", retry_after_s=rng.choice([0.5, 3.0])))
        elif roll < 0.45:
            failures.append(SinkError("HTTP 400", permanent=True))
        else:
            failures.append(None)
    sink = ScriptedSink(Coalescing.EVENTS, failures)
    settings = OutboxSettings(
        max_items=rng.randint(1, 6), max_attempts=rng.randint(1, 4), max_age_s=20.0
    )
    outbox, seen = make_outbox(sink, clock, settings, seed=seed)
    task = asyncio.create_task(outbox.run())
    submitted = 0
    for n in range(15):
        c = cycle(
            active_ids=[str(n)],
            new_ids=[str(n)] if rng.random() < 0.7 else [],
            resolved_ids=[str(n - 1)] if rng.random() < 0.5 else [],
        )
        submitted += len(events(c))
        outbox.submit(c)
        for _ in range(rng.randint(0, 5)):
            await asyncio.sleep(0)
    await drained(outbox)
    task.cancel()
    counts = outbox.counts
    assert counts[Outcome.DELIVERED] == len(sink.delivered)
    assert counts[Outcome.DELIVERED] + counts[Outcome.DROPPED] == submitted
    assert len(seen) == sum(counts.values())
