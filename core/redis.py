"""Redis clients, the key prefix and JSON encoding: the one door to Redis for both apps.

Every key starts with ``key_prefix()``: ``REDIS_KEY_PREFIX`` (several apps or test runs can
share a Redis) followed by this database's instance id (``core.models.Instance``), so a
re-created database, a restored backup or a second deployment on the same Redis and
prefix never sees another database's runs. Key names themselves live in each app's
``live`` module (``promptmgr.live``, ``askuser.live``) and in ``core.events``.

Connections: the pool of each event loop keeps at most ``MAX_IDLE_CONNECTIONS`` idle
connections open, and closes those past ``KEEP_IDLE_CONNECTIONS`` left unused for
``IDLE_CLOSE_SECONDS``, so a burst (hundreds of requests at once) does not leave hundreds
of sockets behind; the two per-delta paths (the appends, the streams' shared read) use a
bare connection each (``bare_connection``), the read's closed when it is no longer wanted.
Outages: whoever meets an unreachable Redis reports it through ``outage_seen``, and the log
gets one warning per outage and one line when it is over, however many requests and runs
meet it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import hiredis
import orjson
import redis
import redis.asyncio as aredis
from django.conf import settings

from .loops import PerLoop

_sync_client: redis.Redis | None = None
_instance_uid: str | None = None

logger = logging.getLogger(__name__)

# Above the longest blocking call we make (the 25 s long-poll, the SSE heartbeat wait);
# redis-py's own default of 5 s would cut those off.
SOCKET_TIMEOUT = 65
# Idle connections each event loop's pool keeps open; the rest are closed on release.
# A worker under load (bench/scale.py: 60 live runs, 500 watchers) has a few dozen short
# commands in flight at once (owner leases, cancel checks, inboxes, streams' checks): at
# 4 it opened and closed up to 140 connections a second, each a connect, a handshake and
# redis-py's costly Connection set-up (4% of the worker's samples); at 32, none.
MAX_IDLE_CONNECTIONS = 32
# Past this many, an idle connection unused for IDLE_CLOSE_SECONDS is closed, so a crowd
# that has gone leaves no connections behind (bench/streams_footprint.py). One: what a
# worker at rest needs (its few periodic commands come one at a time). With 4, a pool at
# rest held as many as its past had needed at once, up to 4: 2 after a gentle warm-up on a
# busy machine, 4 after any crowd, and the footprint test read that as connections left.
KEEP_IDLE_CONNECTIONS = 1
IDLE_CLOSE_SECONDS = 3.0

MSG_NO_INSTANCE = (
    "The instance id is not loaded: call core.redis.load_instance_uid() at start-up "
    "(the ASGI lifespan and management commands do)."
)


def load_instance_uid() -> str:
    """Read (or make, once) this database's instance id and use it in every key from now on.

    Sync: call it from start-up code or through ``sync_to_async``.
    """
    from .models import Instance

    global _instance_uid
    instance, _created = Instance.objects.get_or_create(pk=Instance.SINGLETON_PK)
    _instance_uid = instance.uid.hex
    return _instance_uid


def set_instance_uid(uid: str | None) -> None:
    """Use ``uid`` as the instance id (tests; ``None`` forgets it)."""
    global _instance_uid
    _instance_uid = uid


def _instance() -> str:
    if _instance_uid is not None:
        return _instance_uid
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return load_instance_uid()  # sync code (a command, a script) may load it on first use
    raise RuntimeError(MSG_NO_INSTANCE)


def key_prefix() -> str:
    """The start of every key: the configured prefix and this database's instance id."""
    return f"{settings.REDIS_KEY_PREFIX}:{_instance()}"


def connection_name(part: str) -> str | None:
    """The name (``CLIENT SETNAME``) of a connection of this part of the worker: ``pm-loop``
    (an event loop's pool), ``pm-appends`` (an event loop's event appends), ``pm-sync``
    (``get_redis``), ``pm-tails`` (the streams' shared reader), ``pm-queue`` and
    ``pm-queue-parked`` (the run queue's broker and its parked consumers). None unless
    ``REDIS_CLIENT_NAMES`` asks for names: a Redis whose ACL refuses CLIENT commands
    refuses a connection that names itself. Named, ``CLIENT LIST`` tells which part holds
    which connection (bench/streams_footprint.py counts by these)."""
    return f"pm-{part}" if settings.REDIS_CLIENT_NAMES else None


def get_redis() -> redis.Redis:
    """The process-wide synchronous client (management commands, sync services)."""
    global _sync_client
    if _sync_client is None:
        _sync_client = redis.Redis.from_url(
            settings.REDIS_URL,
            decode_responses=True,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=5,
            client_name=connection_name("sync"),
        )
    return _sync_client


def close_idle_sync_connections() -> None:
    """Close the idle connections of ``get_redis``'s client; the next command opens one.

    In a web worker that client's one user is the orphaned-run sweep (every
    ``RUN_SWEEP_SECONDS``, 10 s by default: longer than any pool here keeps an idle
    connection), and it touches Redis only when a run it does not supervise is active.
    Kept, its connection stayed open at rest in a worker whose sweep had once met a queued
    run, and not in one whose sweep had not: the footprint test read 4 Redis connections
    at rest, 5 after a crowd (bench/streams_footprint.py).
    """
    if _sync_client is not None:
        _sync_client.connection_pool.disconnect(inuse_connections=False)


class TrimmedConnectionPool(aredis.ConnectionPool):
    """A pool that keeps at most ``MAX_IDLE_CONNECTIONS`` idle connections open, and past
    ``KEEP_IDLE_CONNECTIONS`` closes those left unused for ``IDLE_CLOSE_SECONDS``.

    redis-py's pool keeps every connection it ever opened: after a burst of requests the
    worker held one idle socket per request of the burst, for good.

    A surplus connection leaves the pool altogether. Closed but kept, it went to the end of
    the pool's list, which hands out its last entry first: every later command took that
    closed one, connected it again (a TCP connect and a handshake) and, the limit being
    idle already, closed it again on release, once the pool had ever held one more than
    the limit (bench/scale.py: 9% of a worker's time under load, one connect per command).
    The list's head holds the connections unused the longest: those are the ones closed.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._idle_since: dict[int, float] = {}  # id(connection) -> when it was last released
        self._trim_timer: asyncio.TimerHandle | None = None
        self._trimming: asyncio.Task[None] | None = None

    async def release(self, connection: Any) -> None:
        idle = sum(1 for c in self._available_connections if c.is_connected)
        # A connection leaves the pool when enough are idle already, or when its socket is
        # gone (a cancelled or failed command closes it): kept, a closed one took one of the
        # few places kept at rest with no socket behind it, and the count that arms the trim
        # missed it once reused, so a worker at rest held 3 to 5 open connections instead of
        # 4 (bench/streams_footprint.py). The pool makes a new one when none is left (its
        # limit counts those in use).
        leaves = idle >= MAX_IDLE_CONNECTIONS or not connection.is_connected
        if leaves:
            # Still ours (not back in the pool yet), so nobody is using it.
            await connection.disconnect()
        await super().release(connection)
        if leaves:
            with contextlib.suppress(ValueError):
                self._available_connections.remove(connection)
            self._idle_since.pop(id(connection), None)
            return
        self._idle_since[id(connection)] = time.monotonic()
        if idle >= KEEP_IDLE_CONNECTIONS and self._trim_timer is None:
            self._trim_timer = asyncio.get_running_loop().call_later(IDLE_CLOSE_SECONDS, self._start_trim)

    def _start_trim(self) -> None:
        self._trim_timer = None
        if self._trimming is None or self._trimming.done():
            self._trimming = asyncio.get_running_loop().create_task(self._trim())

    async def _trim(self) -> None:
        """Close the connections past ``KEEP_IDLE_CONNECTIONS`` unused for
        ``IDLE_CLOSE_SECONDS``; look again later while surplus ones are younger."""
        now = time.monotonic()
        # Closed while idle (the server went away): nothing to keep.
        self._available_connections[:] = [c for c in self._available_connections if c.is_connected]
        surplus = self._available_connections[
            : max(0, len(self._available_connections) - KEEP_IDLE_CONNECTIONS)
        ]
        stale = [c for c in surplus if now - self._idle_since.get(id(c), now) >= IDLE_CLOSE_SECONDS]
        for connection in stale:
            # Out of the list first: from then on nobody can take it.
            self._available_connections.remove(connection)
            self._idle_since.pop(id(connection), None)
        # Only idle connections need a time; one in use gets its own when released.
        idle = {id(c) for c in self._available_connections}
        self._idle_since = {key: at for key, at in self._idle_since.items() if key in idle}
        for connection in stale:
            with contextlib.suppress(Exception):  # closing a dead socket may fail; it is gone either way
                await connection.disconnect()
        if len(surplus) > len(stale):
            self._trim_timer = asyncio.get_running_loop().call_later(IDLE_CLOSE_SECONDS, self._start_trim)

    async def disconnect(self, inuse_connections: bool = True) -> None:
        if self._trim_timer is not None:
            self._trim_timer.cancel()
            self._trim_timer = None
        await super().disconnect(inuse_connections)


class TrimmedSyncConnectionPool(redis.ConnectionPool):
    """The synchronous twin of ``TrimmedConnectionPool``, keeping at most ``max_idle`` idle
    connections: the run queue's broker is used from several threads at once (its
    consumers park on a wake list while a send or an acknowledgement needs another
    connection), and redis-py would keep the most it ever had at once, for good."""

    def __init__(self, *, max_idle: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_idle = max_idle

    def release(self, connection: Any) -> None:
        super().release(connection)
        with self._lock:
            idle = sum(1 for c in self._available_connections if c.is_connected)
            if idle <= self.max_idle or connection not in self._available_connections:
                return
            self._available_connections.remove(connection)
            # Counted against max_connections until now; the pool makes another when needed.
            self._created_connections -= 1
        connection.disconnect()


def _client_options() -> dict[str, Any]:
    return {"decode_responses": True, "socket_timeout": SOCKET_TIMEOUT, "socket_connect_timeout": 5}


def _async_client(_loop: asyncio.AbstractEventLoop) -> aredis.Redis:
    pool = TrimmedConnectionPool.from_url(
        settings.REDIS_URL,
        # Each ask-user long-poll holds a connection while it blocks.
        max_connections=settings.REDIS_MAX_CONNECTIONS,
        client_name=connection_name("loop"),
        **_client_options(),
    )
    return aredis.Redis(connection_pool=pool)


# redis.asyncio connections are bound to their loop: a client per loop.
_async_clients: PerLoop[aredis.Redis] = PerLoop(_async_client)


def get_async_redis() -> aredis.Redis:
    """An asyncio client for the running event loop."""
    return _async_clients.get()


def bare_connection(part: str) -> aredis.Connection:
    """A connection of its own, used directly, for the per-delta paths: the appends
    (``append_connection``) and the streams' shared read (``core.events._TailHub``).

    Through redis-py's client a command passes its retry wrapper, the pool's checkout and
    release, its observability hooks, a task for the send's timeout and the response
    callbacks: at one run's pace that was a quarter of the worker's CPU per delta, more
    than the command's own socket write (bench/scale.py, py-spy). Here one task at a time
    sends and reads on the connection itself through ``bare_exchange``, which bounds each
    exchange with one timer (the connection has no socket timeout, so a send needs no
    task) and meets failures as the client did: ``redis.ConnectionError`` and
    ``redis.TimeoutError``, the connection closed, the next send connecting again. RESP2,
    so replies are plain lists and the handshake has no ``HELLO``.
    """
    pool = aredis.ConnectionPool.from_url(
        settings.REDIS_URL,
        client_name=connection_name(part),
        decode_responses=True,
        socket_timeout=None,
        socket_connect_timeout=5,
        protocol=2,
    )
    connection: aredis.Connection = pool.make_connection()  # type: ignore[no-untyped-call]
    return connection


def pack(*args: str | bytes | int) -> bytes:
    """One command in Redis's protocol, for ``bare_exchange``:
    hiredis packs in C what redis-py's ``pack_command`` builds in Python, in a fifth of
    the time (``tests/units/test_redis_pack.py`` holds them to the same bytes)."""
    # hiredis's stub types the argument as a one-element tuple; it takes any length.
    packed: bytes = hiredis.pack_command(args)  # type: ignore[arg-type]
    return packed


async def bare_exchange(
    connection: aredis.Connection, commands: Sequence[Sequence[str | int]], *, timeout: float
) -> list[Any]:
    """Send ``commands`` on a ``bare_connection`` in one write and read their replies, all
    within ``timeout`` seconds. An error reply is that command's reply (it was read whole,
    so the connection stays in step); anything else raises: ``redis.ConnectionError``, or
    ``redis.TimeoutError`` with the connection closed (the next exchange connects again).

    The bound is a bare timer that cancels the exchange's task, not ``asyncio.timeout``:
    this runs once per append round trip and shared read, and ``asyncio.timeout``'s own
    set-up and clean-up (its state machine, a ``current_task()`` and a rescheduled handle
    on the way in, its checks on the way out) was 3% of a loaded worker's samples
    (bench/scale.py, py-spy). A cancellation from elsewhere is told apart by the task's
    cancel count, as ``asyncio.timeout`` tells it."""
    packed = b"".join(pack(*command) for command in commands)
    replies: list[Any] = []
    try:
        with _Bound(timeout):
            await connection.send_packed_command(packed, check_health=False)
            for _command in commands:
                try:
                    replies.append(await connection.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
    except TimeoutError:
        await connection.disconnect(nowait=True)
        raise redis.TimeoutError(f"Redis did not answer {commands[0][0]} within {timeout:g} s") from None
    return replies


class _Bound:
    """``asyncio.timeout(timeout)`` for ``bare_exchange``, without its state machine: a
    timer that cancels the running task, and on the way out, as ``asyncio.timeout`` does,
    the timer disarmed, the bound's own cancellation taken back whatever escapes, and a
    ``CancelledError`` that was the bound's alone turned into ``TimeoutError``. A
    cancellation the task was already in, or one from elsewhere, is told apart by the
    task's cancel count."""

    __slots__ = ("_cancelling", "_expired", "_task", "_timeout", "_timer")

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout

    def __enter__(self) -> None:
        task = asyncio.current_task()
        assert task is not None, "bare_exchange runs in a task"
        self._task = task
        self._expired = False
        self._cancelling = task.cancelling()
        self._timer = task.get_loop().call_later(self._timeout, self._expire)

    def _expire(self) -> None:
        self._expired = True
        self._task.cancel()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self._timer.cancel()
        if self._expired and self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError


_append_connections: PerLoop[aredis.Connection] = PerLoop(lambda _loop: bare_connection("appends"))


def append_connection() -> aredis.Connection:
    """The running event loop's connection for event appends (``core.events._Appender``)."""
    return _append_connections.get()


# --- Outages ------------------------------------------------------------------------------

_outage_since: float | None = None
MSG_OUTAGE = "Redis is unreachable (%s); streams wait and runs keep their events until it is back"
MSG_RECOVERED = "Redis is reachable again after %.1f s"


def outage_seen(exc: BaseException) -> float:
    """Report a failed Redis call; returns how long the outage has lasted, in seconds.

    The first report of an outage logs one warning; later ones stay quiet.
    """
    global _outage_since
    now = time.monotonic()
    if _outage_since is None:
        _outage_since = now
        logger.warning(MSG_OUTAGE, exc)
    return now - _outage_since


def outage_over() -> None:
    """Report a Redis call that worked: an outage in progress is over."""
    global _outage_since
    if _outage_since is not None:
        logger.warning(MSG_RECOVERED, time.monotonic() - _outage_since)
        _outage_since = None


def outage_seconds() -> float:
    """How long Redis has been unreachable (0 when it is not known to be)."""
    return 0.0 if _outage_since is None else time.monotonic() - _outage_since


def reset_clients() -> None:
    """Forget cached clients, and any outage they met (tests switch REDIS_URL between sessions)."""
    global _sync_client, _outage_since
    _sync_client = None
    _async_clients.clear()
    _append_connections.clear()
    _outage_since = None


def encode_json(data: Any) -> str:
    """Compact JSON, fast (orjson) with the standard library as the fallback."""
    try:
        return orjson.dumps(data).decode()
    except TypeError:  # e.g. an integer beyond 64 bits
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def decode_json(text: str | bytes) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        # orjson refuses some valid JSON (integers beyond 64 bits); the stdlib does not.
        return json.loads(text)
