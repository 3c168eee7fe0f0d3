"""Server-Sent Events for a run: replay from Last-Event-ID, then tail live.

The generator is independent of HTTP: it takes its event source as an argument, so tests
feed it a finite source. Any worker can serve any run's events: they live in Redis (and
in the database once the run has ended and its stream expired).

An open stream costs no thread and no connection of its own: the clients of a run share
one Redis reader per worker (``core.events.RunTail``, which stops once nobody waits on
it), and the database is asked only when a stream starts, at each heartbeat (one
question per run for all its streams, ``SHARED_CHECK_MAX_AGE``) and when Redis no longer
has the events. When
Redis is unreachable the stream keeps waiting, with heartbeats, and carries on from where
it was when Redis is back; past ``REDIS_OUTAGE_SECONDS`` it ends cleanly, with a retry
hint and a ``reconnect`` event, never with a broken body.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

import redis
from asgiref.sync import sync_to_async

from core import events as live_events
from core.events import Event, RunTail
from core.loops import PerLoop
from core.redis import encode_json, outage_seen

from . import lifecycle
from .services.runs import run_is_active, stored_events

logger = logging.getLogger(__name__)

RETRY_MS = 2000
# The retry hint of a stream that ends because its events cannot be read right now.
RECONNECT_RETRY_MS = 5000
# Seconds an ended run's stream waits for its closing events before giving up on them.
CLOSING_GRACE = 5.0
# Redis calls of all streams of a worker at once (catching up, existence checks): a
# crowd of clients opening together must not open a connection each.
_REDIS_CALLS = 8
_redis_slots: PerLoop[asyncio.Semaphore] = PerLoop(lambda _loop: asyncio.Semaphore(_REDIS_CALLS))
T = TypeVar("T")


# How long (seconds) one answer to "does the run's stream exist" and "is the run active"
# serves every stream of this worker that asks about the same run. Each stream asks at
# every heartbeat, and the watchers of a run beat together: 500 watchers on 10 runs made
# 500 checks of each kind per heartbeat (bench/scale.py: 6% of a loaded worker's samples,
# the database check in a thread each), now 10. A run's end reaches its streams through
# its "done" event; this only delays a stream's noticing a run whose worker vanished.
SHARED_CHECK_MAX_AGE = 1.0


class _SharedChecks:
    """One call at a time per question, and its answer for ``SHARED_CHECK_MAX_AGE``, for
    all the streams of one event loop (``_checks``). A failed call is not kept, and neither
    is a "no" that may soon turn "yes" (``keep_no=False``: a new run's stream about to
    appear)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.answers: dict[tuple[str, int], tuple[float, asyncio.Future[bool]]] = {}

    async def ask(
        self,
        question: tuple[str, int],
        call: Callable[[], Coroutine[Any, Any, bool]],
        *,
        keep_no: bool = True,
    ) -> bool:
        loop = self.loop
        now = loop.time()
        kept = self.answers.get(question)
        if kept is None or now - kept[0] > SHARED_CHECK_MAX_AGE:
            if len(self.answers) > 256:
                self.answers = {q: a for q, a in self.answers.items() if now - a[0] <= SHARED_CHECK_MAX_AGE}
            # A fresh context: the call outlives the request that happened to start it.
            kept = self.answers[question] = (now, loop.create_task(call(), context=contextvars.Context()))
            kept[1].add_done_callback(lambda done: self._settled(question, done, keep_no))
        # A stream that goes away must not cancel the call the others wait on.
        return await asyncio.shield(kept[1])

    def _settled(self, question: tuple[str, int], done: asyncio.Future[bool], keep_no: bool) -> None:
        # Looked at even when unused, so a failure nobody waited for is not reported as lost.
        failed = done.cancelled() or done.exception() is not None
        if self.answers.get(question, (0.0, None))[1] is not done:
            return  # a newer call has taken its place
        if failed or (not keep_no and not done.result()):
            del self.answers[question]


# The running loop's (``core.loops``): a loop must never await another loop's call.
_shared_checks: PerLoop[_SharedChecks] = PerLoop(_SharedChecks)


class SourceUnavailable(Exception):
    """The events cannot be read at the moment (Redis is unreachable)."""


class EventSource(Protocol):
    async def next_batch(self, after: int, wait_seconds: float) -> list[Event]:
        """Events with id > ``after``, waiting up to ``wait_seconds`` for the first.

        Raises ``SourceUnavailable`` while the events cannot be read.
        """

    async def finished(self) -> bool:
        """True when no further events will come."""

    def close(self) -> None:
        """The stream is over: let go of what it held."""


async def _limited(call: Awaitable[T]) -> T:
    async with _redis_slots.get():
        return await call


class RunEventSource:
    """A run's events from Redis, or from the database once Redis has let them go."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self._in_redis = False  # the stream was seen in Redis; it stays there for hours
        self._tail: RunTail | None = None

    async def next_batch(self, after: int, wait_seconds: float) -> list[Event]:
        try:
            if not self._in_redis:
                self._in_redis = await self._stream_exists()
            if self._in_redis:
                events = await self._from_redis(after, wait_seconds)
                if not events and self._tail is not None and self._tail.failing:
                    raise SourceUnavailable  # the shared reader cannot read either
                # An empty wait may mean the stream expired meanwhile: look again.
                self._in_redis = bool(events) or await self._stream_exists()
                if events or self._in_redis:
                    return events
        except redis.RedisError as exc:
            outage_seen(exc)
            await asyncio.sleep(min(wait_seconds, 1.0))
            raise SourceUnavailable from exc
        stored = await sync_to_async(stored_events)(self.run_id, after)
        if stored:
            return stored
        await asyncio.sleep(min(wait_seconds, 1.0))
        return []

    async def _from_redis(self, after: int, wait_seconds: float) -> list[Event]:
        tail = self._tail
        if tail is None or tail.stopped:
            tail = self._tail = live_events.run_tail(self.run_id, after)
        if after < tail.last_id:
            # Behind the shared reader: catch up on what it has passed.
            return await _limited(live_events.read_events(self.run_id, after))
        return await tail.wait(after, wait_seconds)

    async def _stream_exists(self) -> bool:
        return await _shared_checks.get().ask(
            ("stream", self.run_id), lambda: _limited(live_events.stream_exists(self.run_id)), keep_no=False
        )

    async def finished(self) -> bool:
        return not await _shared_checks.get().ask(
            ("active", self.run_id), lambda: sync_to_async(run_is_active)(self.run_id)
        )

    def close(self) -> None:
        # The tail stops by itself once no client waits on it.
        self._tail = None


def reconnect_event(after: int, *, reason: str = "unavailable") -> bytes:
    """The end of a stream that cannot go on now: the client reconnects from ``after``.

    Its id repeats the last event's, so the reconnection resumes exactly there.
    ``reason``: "unavailable" (Redis), or "shutdown" (this worker is stopping).
    """
    data = encode_json({"reason": reason, "retry_ms": RECONNECT_RETRY_MS})
    return f"retry: {RECONNECT_RETRY_MS}\nid: {after}\nevent: reconnect\ndata: {data}\n\n".encode()


async def event_stream(
    source: EventSource,
    *,
    after: int,
    heartbeat: float,
    closing_grace: float = CLOSING_GRACE,
    max_outage: float = 60.0,
) -> AsyncGenerator[bytes, None]:
    """SSE bytes: each event with ``id:`` and ``event:``, comments as heartbeats, ``done`` last."""
    yield f"retry: {RETRY_MS}\n\n".encode()
    loop = asyncio.get_running_loop()
    quiet_since = loop.time()
    closing = False  # the run has ended; its closing events are awaited for a moment
    unavailable_since: float | None = None
    waits = lifecycle.Interruptible()
    try:
        while True:
            if waits.shutting_down:
                yield reconnect_event(after, reason="shutdown")
                return
            try:
                # The worker's shutdown cuts the wait short (lifecycle.begin_drain).
                with waits:
                    batch = await source.next_batch(after, closing_grace if closing else heartbeat)
            except SourceUnavailable:
                now = loop.time()
                unavailable_since = unavailable_since or now
                if now - unavailable_since > max_outage:
                    yield reconnect_event(after)
                    return
                batch = []
            else:
                unavailable_since = None
            # One write per batch, not per event: a burst of deltas is one chunk on the wire.
            chunk = bytearray()
            for event in batch:
                chunk += event.to_sse()
                after = event.id
                if event.event == "done":
                    yield bytes(chunk)
                    return
            if chunk:
                yield bytes(chunk)
            now = loop.time()
            if batch:
                quiet_since = now
                continue
            if closing and unavailable_since is None:
                # A run whose worker vanished never writes "done"; do not hang forever.
                yield Event(id=after + 1, event="done", data={"status": "unknown"}).to_sse()
                return
            if now - quiet_since >= heartbeat:
                yield b": keep-alive\n\n"
                quiet_since = now
                # The run is recorded as ended a moment before its closing events are
                # written: wait for them rather than end the stream with a made-up "done".
                closing = await source.finished()
    except asyncio.CancelledError:
        if not lifecycle.interrupted():
            logger.debug("SSE client went away at event %s", after)
            raise
        # This worker is shutting down: the client goes on elsewhere, from this event.
        yield reconnect_event(after, reason="shutdown")
    except Exception:
        # A broken body would leave the client guessing; end cleanly and let it come back.
        logger.exception("the event stream of a run failed at event %s", after)
        yield reconnect_event(after)
    finally:
        source.close()
