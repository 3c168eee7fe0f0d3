"""The run event stream: every SSE event of a run, in a Redis stream any worker can serve.

Both apps write to it (the run supervisor its translated output, askuser its cards and
answers); the SSE view reads it. Keys of one run share a hash tag (``{run:ID}``) so the Lua
append works on Redis Cluster too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .redis import decode_json, encode_json, get_async_redis, get_redis, key_prefix


def run_tag(run_id: int) -> str:
    return f"{{run:{run_id}}}"


def run_key(run_id: int, name: str) -> str:
    """A key of one run's live state; every app names its run keys through this."""
    return f"{key_prefix()}:{run_tag(run_id)}:{name}"


def events_key(run_id: int) -> str:
    return run_key(run_id, "events")


def seq_key(run_id: int) -> str:
    return run_key(run_id, "seq")


# Appends events with the next integer ids of the run, atomically, so ids are 1, 2, 3…
# whichever worker writes (the runner, relay-question, submit-answer). ARGV holds
# event/data pairs; one call appends a whole batch in one round trip.
_APPEND_LUA = """
local count = #ARGV / 2
local last = redis.call('INCRBY', KEYS[2], count)
local first = last - count + 1
for i = 0, count - 1 do
  redis.call('XADD', KEYS[1], '0-' .. (first + i), 'event', ARGV[2 * i + 1], 'data', ARGV[2 * i + 2])
end
return first
"""


@dataclass(frozen=True)
class Event:
    """One SSE event of a run: ``id`` is its position in the run, starting at 1.

    ``raw`` is the JSON text as stored, when known, so serving it needs no re-encoding.
    """

    id: int
    event: str
    data: dict[str, Any]
    raw: str | None = field(default=None, compare=False, repr=False)

    def to_sse(self) -> bytes:
        payload = self.raw if self.raw is not None else encode_json(self.data)
        # JSON never contains a raw newline, so one data: line is always enough.
        return f"id: {self.id}\nevent: {self.event}\ndata: {payload}\n\n".encode()


def _decode(entry_id: str, fields: dict[str, str]) -> Event:
    raw = fields["data"]
    return Event(id=int(entry_id.split("-", 1)[1]), event=fields["event"], data=decode_json(raw), raw=raw)


def _stream_id(event_id: int) -> str:
    return f"0-{event_id}"


async def append_events(run_id: int, events: list[tuple[str, dict[str, Any]]]) -> list[int]:
    """Append a batch to the run's event stream in one round trip; returns their ids."""
    if not events:
        return []
    client = get_async_redis()
    script = client.register_script(_APPEND_LUA)
    args = [part for event, data in events for part in (event, encode_json(data))]
    first = int(await script(keys=[events_key(run_id), seq_key(run_id)], args=args))
    return list(range(first, first + len(events)))


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


def stream_clear_sync(run_id: int) -> None:
    """Drop whatever stream a run of this id left, before a new run of the id starts."""
    get_redis().delete(events_key(run_id), seq_key(run_id))
