"""Basic auth against the bcrypt hashes of ``--web.config.file``, which a flood of wrong passwords
cannot turn into CPU (issue 17, item 6).

A bcrypt check costs some 60 ms of CPU at cost 10, by design. Unbounded, 64 clients sending wrong
passwords keep every core busy and valid scrapes queue behind them. So, as the exporter-toolkit
does (``web/handler.go``: one comparison at a time, results cached), but written for asyncio:

- **bounded**: bcrypt runs on a dedicated pool of ``max_checks`` threads (default 1), never on
  the event loop; at most ``max_waiting`` more checks queue for it. A check beyond that is not
  queued: the request is answered ``429`` with ``Retry-After`` at once. The bound counts the
  pool's work itself, so a client that hangs up mid-check frees nothing early;
- **paced**: after each check its thread rests for ``rest_ratio`` times the check's own CPU time
  (default 1: bcrypt uses at most half a core however hard it is pushed), and the check threads
  run at a lower CPU priority (nice +10, a per-thread value on Linux), so that on a busy host
  the event loop serving valid scrapes gets the CPU first;
- **cached**: every result, right or wrong, is remembered under HMAC-SHA-256(user, hash,
  password) keyed with a random per-process salt, never the password itself. Repeating a wrong
  password costs no bcrypt, and neither does a scraper's every-15-s request. Successes and
  failures live in separate bounded LRU maps, so a flood of distinct wrong passwords can evict
  only other failures, never a scraper's cached success;
- **coalesced**: concurrent requests with the same credentials wait for one check;
- **held**: a refusal (401, or 429 decided at once) is sent after ``refusal_hold_s`` (default
  0.5 s) of ``asyncio.sleep``, which costs nothing. Without it a client in a loop gets
  thousands of cheap refusals a second, and parsing them is what then takes the event loop (a
  core) from valid scrapes; with it each connection is paced to two refusals a second.

What stays open: a credential not yet checked (the first scrape after a start or reload) competes
for the check queue with whatever floods it, and may get ``429`` until it is through once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import hashlib
import hmac
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import bcrypt
from aiohttp import web
from aiohttp.typedefs import Handler

REALM: Final = "gpuadvisor"

BCRYPT_MAX_PASSWORD_BYTES: Final = 72
"""bcrypt's key schedule reads at most 72 bytes of a password. Go's bcrypt (node_exporter and
every exporter-toolkit program) compares longer passwords on those 72 bytes; Python's bcrypt 5
raises instead, so the password is cut here, to accept what node_exporter accepts."""

DEFAULT_MAX_CHECKS: Final = 1
"""bcrypt checks running at once: the toolkit's one (its ``bcryptMtx``)."""

DEFAULT_MAX_WAITING: Final = 2
"""Checks that may queue behind those running; more are answered 429. Small, so that a wait for
a check is at most a few bcrypt times (some 0.2 s at cost 10), never a queue of a flood."""

DEFAULT_REST_RATIO: Final = 1.0
"""A check thread rests this many times the CPU time of the check it just did: 1 holds bcrypt to
half a core at most."""

MAX_CACHED_SUCCESSES: Final = 64
"""Distinct credentials that passed. Only the right password makes one, so a flood cannot fill
it; 64 is far more scrapers than one exporter has."""

MAX_CACHED_FAILURES: Final = 4096
"""Distinct wrong credentials remembered (32-byte key each, some 0.5 MB in all): at the paced
rate of at most some 8 checks a second, several minutes of a flood of distinct passwords."""

DEFAULT_REFUSAL_HOLD_S: Final = 0.5
"""How long a 401 or 429 waits before it is sent: a client that gets one waits this long."""

CHECK_NICE_INCREMENT: Final = 10
"""How much nicer than the rest of the process the check threads are: at +10 a check gets about
a tenth of the CPU share of a busy thread at the process's own priority."""

RETRY_AFTER_S: Final = 1
LOG_INTERVAL_S: Final = 60.0

log = logging.getLogger(__name__)


class Verdict(enum.Enum):
    ALLOWED = "allowed"
    REFUSED = "refused"
    BUSY = "busy"
    """Too many checks running or queued: not judged; 429."""


class _Lru:
    """A bounded map from key digests to nothing: membership in least-recently-used order."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def hit(self, key: bytes) -> bool:
        if key in self._keys:
            self._keys.move_to_end(key)
            return True
        return False

    def add(self, key: bytes) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.max_entries:
            self._keys.popitem(last=False)

    def __len__(self) -> int:
        return len(self._keys)


class BasicAuthGuard:
    """The server side of basic auth (a middleware): checks ``Authorization: Basic`` against
    bcrypt hashes; see the module's docstring. (``transport.auth.BasicAuth`` is the client's
    credentials.)

    Unknown users are checked against a dummy hash of the lowest cost in the file, so that they
    take as long as known ones. ``checkpw`` is bcrypt's, or a test's wrapper around it;
    ``sleep`` holds refusals. The counters are for tests and the benchmark."""

    def __init__(
        self,
        users: Mapping[str, bytes],
        *,
        max_checks: int = DEFAULT_MAX_CHECKS,
        max_waiting: int = DEFAULT_MAX_WAITING,
        rest_ratio: float = DEFAULT_REST_RATIO,
        max_cached_successes: int = MAX_CACHED_SUCCESSES,
        max_cached_failures: int = MAX_CACHED_FAILURES,
        refusal_hold_s: float = DEFAULT_REFUSAL_HOLD_S,
        checkpw: Callable[[bytes, bytes], bool] = bcrypt.checkpw,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_checks < 1 or max_waiting < 0 or rest_ratio < 0 or refusal_hold_s < 0:
            raise ValueError("max_checks >= 1; max_waiting, rest_ratio, refusal_hold_s >= 0")
        self._users = dict(users)
        rounds = min((int(h[4:6]) for h in self._users.values()), default=10)
        self._dummy = bcrypt.hashpw(b"gpuadvisor-dummy", bcrypt.gensalt(rounds=max(rounds, 4)))
        self._salt = os.urandom(32)
        self._successes = _Lru(max_cached_successes)
        self._failures = _Lru(max_cached_failures)
        self._checkpw = checkpw
        self._refusal_hold_s = refusal_hold_s
        self._sleep = sleep
        self._max_pending = max_checks + max_waiting
        self._rest_ratio = rest_ratio
        self._pool = ThreadPoolExecutor(
            max_workers=max_checks, thread_name_prefix="bcrypt", initializer=_lower_priority
        )
        self._running: dict[bytes, asyncio.Future[bool]] = {}
        self._clock = clock
        self._logged_at: float | None = None
        self._busy_unlogged = 0
        self._told_long = False
        self.bcrypt_checks = 0
        """bcrypt comparisons started."""
        self.busy_refusals = 0
        """Requests answered 429 because the check queue was full."""
        self.most_pending = 0
        """The most checks ever running or queued at once."""

    def _key(self, user: str, hashed: bytes, password: bytes) -> bytes:
        digest = hmac.new(self._salt, digestmod=hashlib.sha256)
        for part in (user.encode(), hashed, password):
            digest.update(len(part).to_bytes(4, "big"))
            digest.update(part)
        return digest.digest()

    def _bcrypt(self, password: bytes, hashed: bytes) -> bool:
        """In a pool thread: the comparison, then the rest that paces the next one."""
        started_s = time.thread_time()
        if len(password) > BCRYPT_MAX_PASSWORD_BYTES:
            password = password[:BCRYPT_MAX_PASSWORD_BYTES]
        try:
            ok = self._checkpw(password, hashed)
        except ValueError:
            ok = False
        if self._rest_ratio > 0:
            time.sleep((time.thread_time() - started_s) * self._rest_ratio)
        return ok

    def _tell_long(self) -> None:
        if not self._told_long:
            self._told_long = True
            log.warning(
                "a basic-auth password longer than %d bytes was given: it is checked on its "
                "first %d bytes, as bcrypt and node_exporter do (logged once)",
                BCRYPT_MAX_PASSWORD_BYTES,
                BCRYPT_MAX_PASSWORD_BYTES,
            )

    def _tell_busy(self) -> None:
        self.busy_refusals += 1
        self._busy_unlogged += 1
        now = self._clock()
        if self._logged_at is None or now - self._logged_at >= LOG_INTERVAL_S:
            self._logged_at = now
            log.warning(
                "basic auth: %d request(s) answered 429 since the last such line: more than %d "
                "password checks at once (wrong passwords from a client in a loop?)",
                self._busy_unlogged,
                self._max_pending,
            )
            self._busy_unlogged = 0

    def _start_check(self, key: bytes, password: bytes, hashed: bytes) -> asyncio.Future[bool]:
        self.bcrypt_checks += 1
        if len(password) > BCRYPT_MAX_PASSWORD_BYTES:
            self._tell_long()
        check = asyncio.get_running_loop().run_in_executor(
            self._pool, self._bcrypt, password, hashed
        )
        self._running[key] = check
        self.most_pending = max(self.most_pending, len(self._running))

        def settle(done: asyncio.Future[bool]) -> None:
            del self._running[key]
            if not done.cancelled() and done.exception() is None:
                (self._successes if done.result() else self._failures).add(key)

        check.add_done_callback(settle)
        return check

    async def judge(self, header: str | None) -> Verdict:
        credentials = _parse_basic(header)
        if credentials is None:
            return Verdict.REFUSED
        user, password = credentials
        hashed = self._users.get(user)
        known = hashed is not None
        key = self._key(user, hashed if hashed is not None else self._dummy, password)
        if self._successes.hit(key):
            return Verdict.ALLOWED if known else Verdict.REFUSED
        if self._failures.hit(key):
            return Verdict.REFUSED
        check = self._running.get(key)
        if check is None:
            if len(self._running) >= self._max_pending:
                self._tell_busy()
                return Verdict.BUSY
            check = self._start_check(key, password, hashed or self._dummy)
        # shield: a client that hangs up does not cancel the check, whose result is cached.
        ok = await asyncio.shield(check)
        return Verdict.ALLOWED if ok and known else Verdict.REFUSED

    async def check(self, header: str | None) -> bool:
        return await self.judge(header) is Verdict.ALLOWED

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        verdict = await self.judge(request.headers.get("Authorization"))
        if verdict is Verdict.ALLOWED:
            return await handler(request)
        if self._refusal_hold_s > 0:
            await self._sleep(self._refusal_hold_s)
        if verdict is Verdict.BUSY:
            return web.Response(
                status=429,
                text="429 Too Many Requests: too many password checks at once\n",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        return web.Response(
            status=401,
            text="401 Unauthorized\n",
            headers={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'},
        )


def _lower_priority() -> None:
    """In a check thread: be nicer than the process (Linux keeps a nice value per thread)."""
    tid = threading.get_native_id()
    try:
        nice = os.getpriority(os.PRIO_PROCESS, tid) + CHECK_NICE_INCREMENT
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError as exc:  # not permitted or not Linux: the check still runs, at equal priority
        log.debug("check threads keep the process's CPU priority: %s", exc)


def _parse_basic(header: str | None) -> tuple[str, bytes] | None:
    if header is None:
        return None
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None
