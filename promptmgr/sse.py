"""Server-Sent Events for a run: replay from Last-Event-ID, then tail live.

The generator is independent of HTTP: it takes its event source as an argument, so tests
feed it a finite source. Any worker can serve any run's events: they live in Redis (and
in the database once the run has ended and its stream expired).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Protocol

from asgiref.sync import sync_to_async

from core import events as live_events
from core.events import Event

from .services.runs import run_is_active, stored_events

logger = logging.getLogger(__name__)

RETRY_MS = 2000
# Seconds an ended run's stream waits for its closing events before giving up on them.
CLOSING_GRACE = 5.0


class EventSource(Protocol):
    async def next_batch(self, after: int, wait_seconds: float) -> list[Event]:
        """Events with id > ``after``, waiting up to ``wait_seconds`` for the first."""

    async def finished(self) -> bool:
        """True when no further events will come."""


class RunEventSource:
    """A run's events from Redis, or from the database once Redis has let them go."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self._in_redis = False  # the stream was seen in Redis; it stays there for hours

    async def next_batch(self, after: int, wait_seconds: float) -> list[Event]:
        # One round trip per batch while the run streams: the existence check is repeated
        # only when a wait comes back empty (the stream may have expired meanwhile).
        if self._in_redis or await live_events.stream_exists(self.run_id):
            events = await live_events.wait_events(
                self.run_id, after, block_ms=max(1, int(wait_seconds * 1000))
            )
            self._in_redis = bool(events) or await live_events.stream_exists(self.run_id)
            if events or self._in_redis:
                return events
        stored = await sync_to_async(stored_events)(self.run_id, after)
        if stored:
            return stored
        await asyncio.sleep(min(wait_seconds, 1.0))
        return []

    async def finished(self) -> bool:
        return not await sync_to_async(run_is_active)(self.run_id)


async def event_stream(
    source: EventSource, *, after: int, heartbeat: float, closing_grace: float = CLOSING_GRACE
) -> AsyncGenerator[bytes, None]:
    """SSE bytes: each event with ``id:`` and ``event:``, comments as heartbeats, ``done`` last."""
    yield f"retry: {RETRY_MS}\n\n".encode()
    quiet_since = asyncio.get_running_loop().time()
    closing = False  # the run has ended; its closing events are awaited for a moment
    try:
        while True:
            batch = await source.next_batch(after, closing_grace if closing else heartbeat)
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
            now = asyncio.get_running_loop().time()
            if batch:
                quiet_since = now
                continue
            if closing:
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
        logger.debug("SSE client went away at event %s", after)
        raise
