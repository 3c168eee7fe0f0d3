"""The run event stream: every SSE event of a run, in a Redis stream any worker can serve.

Both apps write to it (the run supervisor its translated output, through an
``EventWriter`` that holds events through a Redis outage; askuser its cards and answers);
the SSE view reads it, through one ``RunTail`` per run and worker however many clients
watch. Keys of one run share a hash tag (``{run:ID}``) so the Lua append works on Redis
Cluster too.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import hashlib
import uuid
from typing import Any

import redis
from redis.exceptions import NoScriptError

from . import malloc
from .loops import PerLoop
from .redis import (
    SOCKET_TIMEOUT,
    append_connection,
    bare_connection,
    bare_exchange,
    decode_json,
    encode_json,
    get_async_redis,
    get_redis,
    key_prefix,
    outage_over,
    outage_seen,
)

# Retrying Redis after a failure: the first pause, doubled up to the last.
BACKOFF_START = 0.25
BACKOFF_MAX = 4.0
# The most events one append call carries (a backlog held through an outage goes in parts).
APPEND_CHUNK = 1000


def run_tag(run_id: int | str) -> str:
    """The hash tag in every key of one run (``run_id``, or ``*`` in a pattern for any run)."""
    return f"{{run:{run_id}}}"


def run_key(run_id: int, name: str) -> str:
    """A key of one run's live state; every app names its run keys through this."""
    return f"{key_prefix()}:{run_tag(run_id)}:{name}"


def events_key(run_id: int) -> str:
    return run_key(run_id, "events")


def seq_key(run_id: int) -> str:
    return run_key(run_id, "seq")


# Appends events with the next integer ids of the run, atomically, so ids are 1, 2, 3…
# whichever worker writes (the runner, relay-question, submit-answer). ``args`` holds
# event/data pairs from ``from``; one call appends a whole batch in one round trip. A Lua
# function, so that a script of another app can append in the same step as its own work
# (``askuser.live``'s replace-unless-taken).
APPEND_LUA_FUNCTION = """
local function append_events(events_key, seq_key, args, from)
  local count = (#args - from + 1) / 2
  local last = redis.call('INCRBY', seq_key, count)
  local first = last - count + 1
  for i = 0, count - 1 do
    redis.call('XADD', events_key, '0-' .. (first + i), 'event', args[from + 2 * i], 'data', args[from + 2 * i + 1])
  end
  return first
end
"""
_APPEND_LUA = APPEND_LUA_FUNCTION + "return append_events(KEYS[1], KEYS[2], ARGV, 1)\n"
# Redis names a loaded script by the SHA-1 of its text.
_APPEND_SHA = hashlib.sha1(_APPEND_LUA.encode()).hexdigest()


class Event:
    """One SSE event of a run: ``id`` is its position in the run, starting at 1.

    ``raw`` is the JSON text as stored, when known, so serving it needs no re-encoding.
    An event read from Redis has only its text until ``data`` is first asked for: a stream
    serves ``raw`` as it is, and decoding every delta for every worker's streams was work
    nobody used.
    """

    __slots__ = ("_data", "event", "id", "raw")

    def __init__(
        self, id: int, event: str, data: dict[str, Any] | None = None, raw: str | None = None
    ) -> None:
        if data is None and raw is None:
            raise TypeError("an Event needs its data or its raw JSON text")
        self.id = id
        self.event = event
        self._data = data
        self.raw = raw

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            assert self.raw is not None
            self._data = decode_json(self.raw)
        return self._data

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self.id, self.event, self.data) == (other.id, other.event, other.data)

    __hash__ = None  # type: ignore[assignment]  # equal by its data, a dict

    def __repr__(self) -> str:
        return f"Event(id={self.id!r}, event={self.event!r}, data={self.data!r})"

    def to_sse(self) -> bytes:
        payload = self.raw if self.raw is not None else encode_json(self.data)
        # JSON never contains a raw newline, so one data: line is always enough.
        return f"id: {self.id}\nevent: {self.event}\ndata: {payload}\n\n".encode()


def _decode(entry_id: str, fields: dict[str, str]) -> Event:
    return Event(id=int(entry_id.split("-", 1)[1]), event=fields["event"], raw=fields["data"])


def _stream_id(event_id: int) -> str:
    return f"0-{event_id}"


class _Appender:
    """The appends of every run of one event loop, sent to Redis together.

    Each append waits for its own reply, but whatever the loop's runs (and requests) ask to
    append while one round trip is under way goes in the next one, as one pipeline: 50
    runs printing 50 deltas a second each cost a few hundred round trips a second, not
    2,500 (bench/scale.py). A lone append still goes at once.

    Each append names the script by its hash (EVALSHA), not by its 403-byte text, which
    was most of each append's bytes and which Redis hashed again for every delta
    (bench/machinery.py, "append by hash": 5% less of Redis's CPU). A connection's first
    exchange sends the text (EVAL), which loads the script, so a restarted Redis is served
    from its first append; if Redis forgets it anyway (SCRIPT FLUSH, a failover to a
    replica that never saw it) the appends it refused go again by text, in their order,
    in the next exchange. A run's ids stay in the order of its appends: a refused append wrote
    nothing, and the ones after it in that exchange are refused too, unless another
    client loads the script inside the same exchange (a SCRIPT FLUSH and another app's
    EVAL within microseconds of each other).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: list[tuple[list[str], list[str], asyncio.Future[int]]] = []
        self.sending: asyncio.Task[None] | None = None

    async def append(self, keys: list[str], args: list[str]) -> int:
        """The id of the first event appended."""
        done: asyncio.Future[int] = self.loop.create_future()
        self.pending.append((keys, args, done))
        if self.sending is None:
            # A fresh context: the sending outlives the request that happened to start it.
            self.sending = self.loop.create_task(self._send(), context=contextvars.Context())
        return await done

    async def _send(self) -> None:
        try:
            while self.pending:
                batch, self.pending = self.pending, []
                try:
                    replies = await _append_exchange([(keys, args) for keys, args, _done in batch])
                except BaseException as exc:
                    for _keys, _args, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for (_keys, _args, done), reply in zip(batch, replies, strict=True):
                    if done.done():
                        continue
                    if isinstance(reply, Exception):
                        done.set_exception(reply)
                    else:
                        done.set_result(int(reply))
        finally:
            self.sending = None
            for _keys, _args, done in self.pending:  # cancelled with appends still waiting
                if not done.done():
                    done.set_exception(redis.ConnectionError("the event loop is stopping"))
            self.pending = []


async def _append_exchange(appends: list[tuple[list[str], list[str]]]) -> list[Any]:
    """Send ``appends`` in one round trip, by the script's hash unless the connection is
    new; the ones Redis no longer knows the script for go again, by text, in a second.

    A reply is the first id, or the exception that append met. When the second round trip
    fails, only its appends get the failure: the others were written, and a caller told
    otherwise would write them again."""
    connection = append_connection()
    by_text = not connection.is_connected
    replies = await bare_exchange(
        connection,
        [_append_call(keys, args, by_text=by_text) for keys, args in appends],
        timeout=SOCKET_TIMEOUT,
    )
    forgotten = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if forgotten:
        again: list[Any]
        try:
            again = await bare_exchange(
                connection,
                [_append_call(*appends[i], by_text=True) for i in forgotten],
                timeout=SOCKET_TIMEOUT,
            )
        except redis.RedisError as exc:
            again = [exc] * len(forgotten)
        for i, reply in zip(forgotten, again, strict=True):
            replies[i] = reply
    return replies


def _append_call(keys: list[str], args: list[str], *, by_text: bool) -> list[str | int]:
    if by_text:
        return ["EVAL", _APPEND_LUA, len(keys), *keys, *args]
    return ["EVALSHA", _APPEND_SHA, len(keys), *keys, *args]


_appenders: PerLoop[_Appender] = PerLoop(_Appender)


async def append_events(run_id: int, events: list[tuple[str, dict[str, Any]]]) -> list[int]:
    """Append a batch to the run's event stream in one round trip; returns their ids."""
    if not events:
        return []
    first = await _appenders.get().append([events_key(run_id), seq_key(run_id)], append_args(events))
    return list(range(first, first + len(events)))


# A run's id and events to append in the same step as another write (the hand-offs of
# ``askuser.live``), so a page sees them before anything that write sets going.
RunEvents = tuple[int, list[tuple[str, dict[str, Any]]]]


def append_args(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The event/data pairs ``APPEND_LUA_FUNCTION`` takes."""
    return [part for event, data in events for part in (event, encode_json(data))]


async def append_event(run_id: int, event: str, data: dict[str, Any]) -> int:
    """Append one event to the run's event stream; returns its id."""
    [event_id] = await append_events(run_id, [(event, data)])
    return event_id


def append_event_sync(run_id: int, event: str, data: dict[str, Any]) -> int:
    script = get_redis().register_script(_APPEND_LUA)
    return int(script(keys=[events_key(run_id), seq_key(run_id)], args=[event, encode_json(data)]))


async def read_events(run_id: int, after: int, *, count: int = 500) -> list[Event]:
    """Events with id > ``after`` already in the stream (no waiting)."""
    client = get_async_redis()
    # redis-py's stubs type replies as unions of bytes/str; decode_responses makes them str.
    entries: Any = await client.xrange(events_key(run_id), min=f"({_stream_id(after)}", count=count)
    return [_decode(entry_id, fields) for entry_id, fields in entries]


def read_all_events_sync(run_id: int) -> list[Event]:
    entries: Any = get_redis().xrange(events_key(run_id))
    return [_decode(entry_id, fields) for entry_id, fields in entries]


async def wait_events(run_id: int, after: int, *, block_ms: int, count: int = 500) -> list[Event]:
    """Events with id > ``after``, waiting up to ``block_ms`` for the first one."""
    client = get_async_redis()
    result: Any = await client.xread({events_key(run_id): _stream_id(after)}, block=block_ms, count=count)
    events: list[Event] = []
    for _key, entries in result or []:
        events.extend(_decode(entry_id, fields) for entry_id, fields in entries)
    return events


async def stream_exists(run_id: int) -> bool:
    return bool(await get_async_redis().exists(events_key(run_id)))


async def expire_stream(run_id: int, ttl: int) -> None:
    """Keep a finished run's stream for ``ttl`` seconds (the database keeps the history)."""
    pipe = get_async_redis().pipeline(transaction=False)
    for key in (events_key(run_id), seq_key(run_id)):
        pipe.expire(key, ttl)
    await pipe.execute()


async def bound_stream(run_id: int, ttl: int) -> None:
    """Give a live run's stream a TTL unless it has one (so no key lives for ever should the
    run never end); its end sets the finished stream's TTL (``expire_stream``)."""
    pipe = get_async_redis().pipeline(transaction=False)
    for key in (events_key(run_id), seq_key(run_id)):
        pipe.expire(key, ttl, nx=True)
    await pipe.execute()


def expire_stream_sync(run_id: int, ttl: int) -> None:
    """``expire_stream`` for the sweep, which runs in a thread of its own."""
    pipe = get_redis().pipeline(transaction=False)
    for key in (events_key(run_id), seq_key(run_id)):
        pipe.expire(key, ttl)
    pipe.execute()


def stream_clear_sync(run_id: int) -> None:
    """Drop whatever stream a run of this id left, before a new run of the id starts."""
    get_redis().delete(events_key(run_id), seq_key(run_id))


# --- Writing through an outage ---------------------------------------------------------------


class RedisOutageTooLong(redis.ConnectionError):
    """Redis stayed unreachable longer than a run may hold its events."""


MSG_OUTAGE_TOO_LONG = "Redis was unreachable for more than {seconds:.0f} s"


class EventWriter:
    """Appends one run's events in order; while Redis is unreachable it holds them and
    retries with backoff, so a run outlives a short outage with every event kept.

    Past ``max_outage`` seconds without a successful write, ``write`` raises
    ``RedisOutageTooLong``.
    """

    def __init__(self, run_id: int, *, max_outage: float) -> None:
        self.run_id = run_id
        self.max_outage = max_outage
        self.held: list[tuple[str, dict[str, Any]]] = []
        self._last_written = 0  # the id of the last event this writer wrote
        # How many events at the head of ``held`` went out in an append whose reply never
        # came: Redis may have written them (stopped between the write and its reply).
        self._unsure = 0
        self._failing_since: float | None = None
        self._retry_at = 0.0
        self._backoff = BACKOFF_START

    async def write(self, batch: list[tuple[str, dict[str, Any]]]) -> list[Event]:
        """Append ``batch`` after whatever is held; returns the events written now.

        During an outage nothing is written and ``[]`` comes back; the batch waits for the
        next call after the backoff.
        """
        self.held.extend(batch)
        if not self.held:
            return []
        now = asyncio.get_running_loop().time()
        if now < self._retry_at:
            self._check_limit(now)
            return []
        written: list[Event] = []
        try:
            await self._append_held(written)
        except redis.RedisError as exc:
            self._failed(exc)
        return written

    async def drain(self) -> list[Event]:
        """Write everything held once Redis answers, waiting as long as the outage limit
        allows; returns the events written."""
        written: list[Event] = []
        while True:
            await asyncio.sleep(max(0.0, self._retry_at - asyncio.get_running_loop().time()))
            try:
                if not self.held:
                    await get_async_redis().ping()
                await self._append_held(written)
                return written
            except redis.RedisError as exc:
                self._failed(exc)

    def held_events(self) -> list[Event]:
        """What is still held, numbered on after the last event written, for a run that
        ends while Redis stays away: its database copy keeps these too, in order."""
        last = self._last_written
        return [Event(id=last + i, event=e, data=d) for i, (e, d) in enumerate(self.held, start=1)]

    def outage(self, exc: BaseException) -> None:
        """A Redis call of this run failed: note it, and give up past the limit."""
        outage_seen(exc)
        now = asyncio.get_running_loop().time()
        if self._failing_since is None:
            self._failing_since = now
        self._check_limit(now)

    async def _append_held(self, written: list[Event]) -> None:
        if self._unsure:
            await self._take_landed(written)
        while self.held:
            chunk = self.held[:APPEND_CHUNK]
            self._unsure = len(chunk)
            ids = await append_events(self.run_id, chunk)
            self._unsure = 0
            del self.held[: len(chunk)]
            written.extend(Event(id=i, event=e, data=d) for i, (e, d) in zip(ids, chunk, strict=True))
            self._last_written = ids[-1]
        if self._failing_since is not None:
            outage_over()
        self._failing_since, self._backoff, self._retry_at = None, BACKOFF_START, 0.0

    async def _take_landed(self, written: list[Event]) -> None:
        """Count the unsure append as written if its events are in the stream after the
        last one this writer knows it wrote, side by side (one append writes them so; other
        writers' events may come before or after): sending them again would show each twice."""
        count = self._unsure
        wanted = [(event, encode_json(data)) for event, data in self.held[:count]]
        stored = await read_events(self.run_id, self._last_written)
        for start in range(len(stored) - count + 1):
            window = stored[start : start + count]
            if [(e.event, e.raw) for e in window] == wanted:
                landed = zip(window, self.held[:count], strict=True)
                written.extend(Event(id=e.id, event=e.event, data=d) for e, (_, d) in landed)
                del self.held[:count]
                self._last_written = window[-1].id
                break
        self._unsure = 0

    def _failed(self, exc: BaseException) -> None:
        self.outage(exc)
        self._retry_at = asyncio.get_running_loop().time() + self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_MAX)

    def _check_limit(self, now: float) -> None:
        if self._failing_since is not None and now - self._failing_since > self.max_outage:
            raise RedisOutageTooLong(MSG_OUTAGE_TOO_LONG.format(seconds=self.max_outage))


# --- Reading for many clients ----------------------------------------------------------------


class RunTail:
    """One run's new events, read once per worker for every client waiting on them.

    The worker's tails share one reader (``_TailHub``), which hands each batch to whoever
    waits, so a hundred clients of a run cost no connection and no read of their own.
    Through an outage the reader retries with backoff, and resumes from the last event
    each tail saw. Clients catch up on older events with ``read_events`` themselves.

    It stops ``LINGER`` seconds after its last waiter left: a stream whose client went
    away is not always closed at once (Django leaves a stream's generator suspended when
    the client disconnects), so nothing waits for that.
    """

    LINGER = 2.0

    def __init__(self, run_id: int, after: int) -> None:
        loop = asyncio.get_running_loop()
        self.run_id = run_id
        self.key = events_key(run_id)
        self.last_id = after
        self.loop = loop
        self.waiters = 0
        self.stopped = False
        self._idle_since = loop.time()
        self._linger_check = False  # a check whether it is still used is scheduled
        self._waiting: set[asyncio.Future[list[Event]]] = set()
        self._hub = _hubs.get()
        self._hub.add(self)

    @property
    def failing(self) -> bool:
        """Its last read met an unreachable Redis."""
        return self._hub.failing

    async def wait(self, after: int, timeout: float) -> list[Event]:
        """Events with id > ``after`` among the next batch, if it comes within ``timeout``."""
        self.waiters += 1
        # A future of its own per waiter: a timeout cancels only that one (a shared future
        # needed a shield and wait_for per waiter and batch, the stream's costliest step).
        # Its timeout is a bare timer that hands it an empty batch: every waiter waits once
        # per batch, and asyncio.timeout's own bookkeeping was 7% of a loaded worker's
        # samples (bench/scale.py).
        arrived: asyncio.Future[list[Event]] = self.loop.create_future()
        self._waiting.add(arrived)
        expiry = self.loop.call_later(timeout, _nothing_arrived, arrived)
        try:
            batch = await arrived
        finally:
            expiry.cancel()
            self._waiting.discard(arrived)
            self.waiters -= 1
            if not self.waiters:
                self._idle_since = self.loop.time()
                if not self._linger_check:
                    # One check at a time: it looks again if a waiter came and went meanwhile.
                    self._linger_check = True
                    self.loop.call_later(self.LINGER, self._stop_if_unused)
        return [event for event in batch if event.id > after]

    def _stop_if_unused(self) -> None:
        if self.waiters or self.stopped:
            self._linger_check = False  # the next waiter to leave schedules the next check
            return
        idle = self.loop.time() - self._idle_since
        if idle >= self.LINGER:
            self._linger_check = False
            self.close()
        else:  # a waiter came and went meanwhile: look again when its linger is over
            self.loop.call_later(self.LINGER - idle, self._stop_if_unused)

    def _deliver(self, batch: list[Event]) -> None:
        batch = [event for event in batch if event.id > self.last_id]
        if batch:
            self.last_id = batch[-1].id
            waiting, self._waiting = self._waiting, set()
            for arrived in waiting:
                if not arrived.done():
                    arrived.set_result(batch)

    def close(self) -> None:
        """Stop reading (the shared reader stops, closing its connection, with the last tail)."""
        self.stopped = True
        if _tails.get((id(self.loop), self.run_id)) is self:
            del _tails[(id(self.loop), self.run_id)]
        self._hub.remove(self)
        if not any(loop_id == id(self.loop) for loop_id, _run in _tails):
            self.loop.call_later(self.LINGER, _collect_what_streams_left, self.loop)


def _nothing_arrived(arrived: asyncio.Future[list[Event]]) -> None:
    if not arrived.done():
        arrived.set_result([])


class _TailHub:
    """The reader of every tail of one event loop: one blocking ``XREAD`` over all their
    streams, on one connection of its own.

    One reader per run cost a connection, a round trip and a task wake-up per run for
    every event: with 50 runs streaming, 2,500 reads a second. Together, a read returns
    what all runs appended since the last one (bench/scale.py). A tail that joins wakes
    the read under way (its streams are fixed when it is sent) by adding to a wake stream
    of this reader's own, which the read includes; a tail that leaves is only dropped
    from the next read. (Several streams in one read need them in one hash slot on Redis
    Cluster, which the app's client does not speak.)
    """

    BLOCK_MS = 10_000
    # While reads come back at once (many runs streaming), the next one waits this long
    # (seconds), so that it takes what all runs appended meanwhile: one read names every
    # tailed stream, and at one event per read that was a read of 50 streams per delta.
    # After a quiet moment an event is read at once (as ``processes.READ_INTERVAL``).
    READ_INTERVAL = 0.003
    WAKE_TTL = 60  # seconds the wake stream outlives its last wake
    WAKE_KEEP = 8  # wake entries kept (only the newest id matters)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.tails: dict[int, RunTail] = {}
        self.failing = False  # the last read met an unreachable Redis
        self.wake_key = f"{key_prefix()}:tails:{uuid.uuid4().hex}"
        self._task: asyncio.Task[None] | None = None
        self._waking: set[asyncio.Task[None]] = set()

    def add(self, tail: RunTail) -> None:
        self.tails[tail.run_id] = tail
        if self._task is None or self._task.done():
            # A fresh context: the reader outlives the request that started it.
            self._task = self.loop.create_task(self._read(), name="tails", context=contextvars.Context())
        else:
            wake = self.loop.create_task(self._wake(), context=contextvars.Context())
            self._waking.add(wake)  # held until done: the loop keeps only weak references
            wake.add_done_callback(self._waking.discard)

    def remove(self, tail: RunTail) -> None:
        if self.tails.get(tail.run_id) is tail:
            del self.tails[tail.run_id]
        if not self.tails and self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            # Held until it has finished: the loop keeps only weak references to tasks.
            _closing.add(task)
            task.add_done_callback(_closing.discard)

    async def _wake(self) -> None:
        try:
            pipe = get_async_redis().pipeline(transaction=False)
            pipe.xadd(self.wake_key, {"w": "1"}, maxlen=self.WAKE_KEEP, approximate=False)
            pipe.expire(self.wake_key, self.WAKE_TTL)
            await pipe.execute()
        except redis.RedisError as exc:
            outage_seen(exc)  # the read fails too, and is sent again with the new tail

    async def _read(self) -> None:
        connection = bare_connection("tails")
        backoff = BACKOFF_START
        wake_id = "0-0"  # the first read takes what wakes there are, then only newer ones
        try:
            while self.tails:
                reading = {tail.key: tail for tail in self.tails.values()}
                streams = {key: _stream_id(tail.last_id) for key, tail in reading.items()}
                streams[self.wake_key] = wake_id
                sent = self.loop.time()
                xread: list[str | int] = ["XREAD", "COUNT", 500, "BLOCK", self.BLOCK_MS, "STREAMS"]
                xread += [*streams, *streams.values()]
                try:
                    [reply] = await bare_exchange(
                        connection, [xread], timeout=self.BLOCK_MS / 1000 + SOCKET_TIMEOUT
                    )
                    if isinstance(reply, redis.ResponseError):
                        raise reply
                except redis.RedisError as exc:
                    outage_seen(exc)
                    self.failing = True
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX)
                    continue
                if self.failing:
                    outage_over()
                    self.failing, backoff = False, BACKOFF_START
                for key, entries in reply or []:
                    if key == self.wake_key:
                        wake_id = entries[-1][0]
                        continue
                    tail = reading.get(key)
                    if tail is not None and not tail.stopped and entries:
                        tail._deliver([_decode(entry_id, _fields(flat)) for entry_id, flat in entries])
                if self.loop.time() - sent < self.READ_INTERVAL:
                    await asyncio.sleep(self.READ_INTERVAL)
        finally:
            await connection.disconnect()


def _fields(flat: list[str]) -> dict[str, str]:
    """A stream entry's fields, from RESP2's flat list."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


_hubs: PerLoop[_TailHub] = PerLoop(_TailHub)


_closing: set[asyncio.Task[None]] = set()
_tails: dict[tuple[int, int], RunTail] = {}


def _collect_what_streams_left(loop: asyncio.AbstractEventLoop) -> None:
    """Nobody watches a run in this worker any more: give back what the streams used.

    Django leaves the generator of a stream whose client went away suspended, in a
    reference cycle, for the garbage collector; a full collection frees those now (cheap:
    what start-up loaded is frozen, ``promptmgr.lifecycle``), and ``malloc_trim`` hands
    the freed heap back to the OS instead of keeping it for a next crowd.
    """
    if any(loop_id == id(loop) for loop_id, _run in _tails):
        return
    gc.collect()
    malloc.trim()


async def tails_delivered(run_ids: list[int], *, timeout: float) -> None:
    """Wait, at most ``timeout``, until this loop's tails of these runs have handed every
    event written so far to the clients waiting on them, and those have taken it.

    For a worker's shutdown: it tells every open stream to reconnect next, and a stream of
    a run that ended here should end with the run's own closing events (its last one was
    written a moment ago; the shared reader hands it over on its next read)."""
    loop = asyncio.get_running_loop()
    tails = [tail for run_id in run_ids if (tail := _tails.get((id(loop), run_id))) is not None]
    if not tails:
        return
    try:
        pipe = get_async_redis().pipeline(transaction=False)
        for tail in tails:
            pipe.get(seq_key(tail.run_id))
        written = [int(last or 0) for last in await pipe.execute()]
    except redis.RedisError as exc:
        outage_seen(exc)
        return
    deadline = loop.time() + timeout

    def behind() -> bool:
        # A waiter handed its batch has not resumed yet while it still counts as waiting.
        return any(
            not tail.stopped and (tail.last_id < last or tail.waiters)
            for tail, last in zip(tails, written, strict=True)
        )

    while behind() and loop.time() < deadline:
        await asyncio.sleep(0.005)


def run_tail(run_id: int, after: int) -> RunTail:
    """The run's tail in this event loop, started at ``after`` if none is running."""
    loop = asyncio.get_running_loop()
    tail = _tails.get((id(loop), run_id))
    if tail is None or tail.loop is not loop or tail.stopped:
        tail = _tails[(id(loop), run_id)] = RunTail(run_id, after)
    return tail
