"""Wrong basic-auth passwords in a flood cost a bounded number of bcrypt checks (issue 17, item 6).

The agent's real app and the real bcrypt, on a loopback port. The bcrypt comparison is wrapped in
a gate the test opens, so that "64 requests arrive while a check runs" is a fact of the test, not
a race it hopes to win: counts are asserted, never durations (bench/auth_flood.py measures those).
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import AsyncIterator

import aiohttp
import bcrypt
import pytest
from aiohttp.test_utils import TestServer

from gpuadvisor.services.agent import AgentSettings, create_app
from gpuadvisor.services.basicauth import BasicAuthGuard
from gpuadvisor.sources.simnode.node import SimulatedProbe, default_spec

ONCE = AgentSettings(interval_s=3600.0, probe_timeout_s=2.0)
PASSWORD = "right-scrape-password"
FLOOD = 64
MAX_CHECKS, MAX_WAITING = 1, 2


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


class GatedBcrypt:
    """The real ``bcrypt.checkpw``, held until ``gate`` is set; counts the calls it gets."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        with self._lock:
            self.calls += 1
        if not self.gate.wait(timeout=120):
            raise AssertionError("the test never opened the gate")
        return bcrypt.checkpw(password, hashed)


@pytest.fixture(scope="module")
def users() -> dict[str, bytes]:
    return {"prometheus": bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4))}


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
        yield client


async def serve(auth: BasicAuthGuard) -> TestServer:
    probe = SimulatedProbe(default_spec("auth-node", 2, 2), time.time)
    server = TestServer(create_app(ONCE, probe, middlewares=(auth.middleware,)), host="127.0.0.1")
    await server.start_server()
    return server


async def scrape(
    session: aiohttp.ClientSession, server: TestServer, headers: dict[str, str]
) -> tuple[int, str | None]:
    async with session.get(server.make_url("/metrics"), headers=headers) as response:
        await response.read()
        return response.status, response.headers.get("Retry-After")


async def test_a_flood_of_distinct_wrong_passwords_gets_a_bounded_number_of_checks(
    users: dict[str, bytes], session: aiohttp.ClientSession
) -> None:
    gated = GatedBcrypt()
    auth = BasicAuthGuard(
        users,
        max_checks=MAX_CHECKS,
        max_waiting=MAX_WAITING,
        rest_ratio=0,
        refusal_hold_s=0,
        checkpw=gated,
    )
    server = await serve(auth)
    try:
        wrong = [basic("prometheus", f"guess-{i}") for i in range(FLOOD)]
        tasks = [asyncio.create_task(scrape(session, server, h)) for h in wrong]
        async with asyncio.timeout(120):  # a hang guard, not a bound on speed
            while sum(t.done() for t in tasks) < FLOOD - MAX_CHECKS - MAX_WAITING:
                await asyncio.sleep(0.01)
        answered = [t.result() for t in tasks if t.done()]
        # While the gate is shut every request beyond the queue was answered at once: 429.
        assert answered == [(429, "1")] * (FLOOD - MAX_CHECKS - MAX_WAITING)
        assert auth.bcrypt_checks == MAX_CHECKS + MAX_WAITING
        assert auth.busy_refusals == FLOOD - MAX_CHECKS - MAX_WAITING
        gated.gate.set()
        judged = [result for result in await asyncio.gather(*tasks) if result[0] != 429]
        assert judged == [(401, None)] * (MAX_CHECKS + MAX_WAITING)
        assert gated.calls == auth.bcrypt_checks == MAX_CHECKS + MAX_WAITING
        assert auth.most_pending == MAX_CHECKS + MAX_WAITING

        # The flood over, a valid scrape is checked once, then served from the cache.
        for _ in range(3):
            assert await scrape(session, server, basic("prometheus", PASSWORD)) == (200, None)
        assert gated.calls == MAX_CHECKS + MAX_WAITING + 1
    finally:
        await server.close()


async def test_repeated_wrong_passwords_cost_one_check_and_no_429(
    users: dict[str, bytes], session: aiohttp.ClientSession
) -> None:
    gated = GatedBcrypt()
    auth = BasicAuthGuard(users, rest_ratio=0, refusal_hold_s=0, checkpw=gated)
    server = await serve(auth)
    try:
        same = basic("prometheus", "the-same-wrong-one")
        tasks = [asyncio.create_task(scrape(session, server, same)) for _ in range(FLOOD)]
        async with asyncio.timeout(120):
            while auth.bcrypt_checks < 1:
                await asyncio.sleep(0.01)
        gated.gate.set()  # the requests already waiting share the one check in flight
        assert await asyncio.gather(*tasks) == [(401, None)] * FLOOD
        again = [scrape(session, server, same) for _ in range(FLOOD)]
        assert await asyncio.gather(*again) == [(401, None)] * FLOOD  # from the cache
        assert gated.calls == 1
        assert auth.busy_refusals == 0
    finally:
        await server.close()


async def test_a_flood_evicts_old_failures_but_never_a_cached_success(
    users: dict[str, bytes], session: aiohttp.ClientSession
) -> None:
    gated = GatedBcrypt()
    gated.gate.set()
    auth = BasicAuthGuard(
        users, rest_ratio=0, refusal_hold_s=0, max_cached_failures=4, checkpw=gated
    )
    server = await serve(auth)
    try:
        good = basic("prometheus", PASSWORD)
        assert await scrape(session, server, good) == (200, None)
        for i in range(20):  # five times the failures the cache holds, one after the other
            assert await scrape(session, server, basic("prometheus", f"x{i}")) == (401, None)
        assert gated.calls == 21
        assert await scrape(session, server, good) == (200, None)
        assert await scrape(session, server, basic("prometheus", "x19")) == (401, None)
        assert gated.calls == 21  # the success and the newest failures are still cached
        assert await scrape(session, server, basic("prometheus", "x0")) == (401, None)
        assert gated.calls == 22  # the oldest failure was evicted: checked again
    finally:
        await server.close()


async def test_a_check_whose_client_hung_up_still_holds_its_place_and_is_cached(
    users: dict[str, bytes], session: aiohttp.ClientSession
) -> None:
    gated = GatedBcrypt()
    auth = BasicAuthGuard(
        users, max_checks=1, max_waiting=0, rest_ratio=0, refusal_hold_s=0, checkpw=gated
    )
    server = await serve(auth)
    try:
        wrong = basic("prometheus", "gone")
        task = asyncio.create_task(scrape(session, server, wrong))
        async with asyncio.timeout(120):
            while gated.calls < 1:
                await asyncio.sleep(0.01)
        task.cancel()  # the client hangs up; the thread keeps comparing
        other = basic("prometheus", "another")
        assert await scrape(session, server, other) == (429, "1")  # the place is still taken
        gated.gate.set()
        # Asked again: it joins the check still in flight, or finds its cached result.
        assert await scrape(session, server, wrong) == (401, None)
        assert gated.calls == 1
    finally:
        await server.close()


async def test_every_refusal_is_held_and_no_valid_scrape_is(
    users: dict[str, bytes], session: aiohttp.ClientSession
) -> None:
    held: list[float] = []

    async def record(seconds: float) -> None:
        held.append(seconds)

    gated = GatedBcrypt()
    auth = BasicAuthGuard(
        users, max_checks=1, max_waiting=0, rest_ratio=0, refusal_hold_s=0.5, sleep=record,
        checkpw=gated,
    )  # fmt: skip
    server = await serve(auth)
    try:
        first = asyncio.create_task(scrape(session, server, basic("prometheus", "a")))
        async with asyncio.timeout(120):
            while gated.calls < 1:
                await asyncio.sleep(0.01)
        assert await scrape(session, server, basic("prometheus", "b")) == (429, "1")
        gated.gate.set()
        assert await first == (401, None)
        assert await scrape(session, server, {}) == (401, None)
        for _ in range(3):
            assert await scrape(session, server, basic("prometheus", PASSWORD)) == (200, None)
        assert held == [0.5, 0.5, 0.5]  # the 429, the wrong password, no credentials
    finally:
        await server.close()


def test_the_cache_keeps_no_password() -> None:
    password = b"never-stored-anywhere"
    hashed = bcrypt.hashpw(password, bcrypt.gensalt(rounds=4))
    auth = BasicAuthGuard({"prometheus": hashed}, rest_ratio=0)
    key = auth._key("prometheus", hashed, password)  # the key is the point
    assert len(key) == 32 and password not in key
    other = BasicAuthGuard({"prometheus": hashed}, rest_ratio=0)
    assert other._key("prometheus", hashed, password) != key  # salted per process
