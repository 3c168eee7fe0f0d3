"""All Redis access: clients, key names, TTLs and the per-run event stream.

Redis holds the live state every web worker shares: run event streams (for SSE replay),
the ask-user question cache and answer hand-off, relay-token hashes, cancel signals and
run ownership. Key names live here and nowhere else. Keys of one run share a hash tag
(``{run:ID}``) so the Lua append works on Redis Cluster too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis
import redis.asyncio as aredis
from django.conf import settings

# A cache of clients per event loop: redis.asyncio connections are bound to their loop.
_async_clients: dict[int, tuple[object, aredis.Redis]] = {}
_sync_client: redis.Redis | None = None

# Above the longest blocking call we make (the 25 s long-poll, the SSE heartbeat wait);
# redis-py's own default of 5 s would cut those off.
SOCKET_TIMEOUT = 65
QUESTION_TTL_GRACE = 60  # seconds a question stays cached after it expires
RELAY_TOKEN_TTL_GRACE = 300
# Longer than any question lives (900 s at most), so a late poll still learns "consumed".
ANSWER_TAKEN_TTL = 3600
# Pushed in place of an answer to end a long-poll early; never a real answer's shape.
ANSWER_WAKE: dict[str, Any] = {"wake": True}


def _prefix() -> str:
    """Every key starts with REDIS_KEY_PREFIX, so several apps (or test runs) can share a Redis."""
    return str(settings.REDIS_KEY_PREFIX)


def run_tag(run_id: int) -> str:
    return f"{{run:{run_id}}}"


def events_key(run_id: int) -> str:
    return f"{_prefix()}:{run_tag(run_id)}:events"


def seq_key(run_id: int) -> str:
    return f"{_prefix()}:{run_tag(run_id)}:seq"


def control_channel(run_id: int) -> str:
    return f"{_prefix()}:{run_tag(run_id)}:control"


def cancel_key(run_id: int) -> str:
    return f"{_prefix()}:{run_tag(run_id)}:cancel"


def owner_key(run_id: int) -> str:
    return f"{_prefix()}:{run_tag(run_id)}:owner"


def question_cache_key(run_id: int) -> str:
    """The design card's question cache: the run's pending question, as JSON."""
    return f"{_prefix()}:{run_tag(run_id)}:question"


def question_shown_key(run_id: int) -> str:
    """Question ids already pushed to the run's event stream (pushed at most once)."""
    return f"{_prefix()}:{run_tag(run_id)}:shown"


def answer_tag(question_id: str) -> str:
    return f"{{answer:{question_id}}}"


def answer_key(question_id: str) -> str:
    """A one-element list the answer is pushed to; poll-answer pops it (consumed once)."""
    return f"{_prefix()}:{answer_tag(question_id)}:handoff"


def answer_taken_key(question_id: str) -> str:
    """Where a popped answer is moved: its existence says a waiting side collected it."""
    # Same hash tag as answer_key: the atomic move works on Redis Cluster too.
    return f"{_prefix()}:{answer_tag(question_id)}:taken"


def relay_token_key(run_id: int) -> str:
    """The SHA-256 hash of the run's relay token (the token itself is never stored)."""
    return f"{_prefix()}:{run_tag(run_id)}:relay-token"


def active_runs_key() -> str:
    return f"{_prefix()}:runs:active"


def user_runs_key(user_id: int) -> str:
    return f"{_prefix()}:runs:user:{user_id}"


def get_redis() -> redis.Redis:
    """The process-wide synchronous client (management commands, sync services)."""
    global _sync_client
    if _sync_client is None:
        _sync_client = redis.Redis.from_url(
            settings.REDIS_URL, decode_responses=True, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=5
        )
    return _sync_client


def get_async_redis() -> aredis.Redis:
    """An asyncio client for the running event loop."""
    import asyncio

    loop = asyncio.get_running_loop()
    cached = _async_clients.get(id(loop))
    # The identity check guards against a new loop reusing a dead loop's id.
    if cached is not None and cached[0] is loop:
        return cached[1]
    client = aredis.Redis.from_url(
        settings.REDIS_URL,
        decode_responses=True,
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=5,
        # Every open SSE stream and long-poll holds a connection while it blocks.
        max_connections=settings.REDIS_MAX_CONNECTIONS,
    )
    _async_clients[id(loop)] = (loop, client)
    return client


def reset_clients() -> None:
    """Forget cached clients (tests switch REDIS_URL between sessions)."""
    global _sync_client
    _sync_client = None
    _async_clients.clear()


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

# Starts a run only while the user's and the global caps allow it.
_CLAIM_SLOT_LUA = """
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return -1 end
if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[3]) then return -2 end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
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


_encode = encode_json


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
    args = [part for event, data in events for part in (event, _encode(data))]
    first = int(await script(keys=[events_key(run_id), seq_key(run_id)], args=args))
    return list(range(first, first + len(events)))


async def append_event(run_id: int, event: str, data: dict[str, Any]) -> int:
    """Append one event to the run's event stream; returns its id."""
    [event_id] = await append_events(run_id, [(event, data)])
    return event_id


def append_event_sync(run_id: int, event: str, data: dict[str, Any]) -> int:
    script = get_redis().register_script(_APPEND_LUA)
    return int(script(keys=[events_key(run_id), seq_key(run_id)], args=[event, _encode(data)]))


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


async def expire_run_keys(run_id: int, ttl: int) -> None:
    client = get_async_redis()
    pipe = client.pipeline(transaction=False)
    for key in (events_key(run_id), seq_key(run_id)):
        pipe.expire(key, ttl)
    pipe.delete(question_cache_key(run_id), question_shown_key(run_id), owner_key(run_id))
    pipe.delete(cancel_key(run_id))
    await pipe.execute()


async def claim_run_slot(run_id: int, user_id: int, *, per_user: int, total: int) -> int:
    """1 when the run may start, -1 over the user's cap, -2 over the global cap."""
    client = get_async_redis()
    script = client.register_script(_CLAIM_SLOT_LUA)
    return int(await script(keys=[user_runs_key(user_id), active_runs_key()], args=[run_id, per_user, total]))


async def run_slot_holders(user_id: int) -> set[int]:
    """The runs holding a slot of this user's cap or of the global one."""
    client = get_async_redis()
    members: Any = await client.sunion([user_runs_key(user_id), active_runs_key()])
    return {int(m) for m in members}


async def release_run_slots(run_ids: Iterable[int], user_id: int) -> None:
    """Free the concurrency slots these runs of ``user_id`` hold."""
    ids = list(run_ids)
    if ids:
        client = get_async_redis()
        await client.srem(user_runs_key(user_id), *ids)
        await client.srem(active_runs_key(), *ids)


def release_run_slots_sync(run_ids: Iterable[tuple[int, int]]) -> None:
    client = get_redis()
    for run_id, user_id in run_ids:
        client.srem(user_runs_key(user_id), run_id)
        client.srem(active_runs_key(), run_id)


# --- Ask-user question cache ------------------------------------------------------------


async def question_cache_put(run_id: int, question: dict[str, Any], *, ttl: int) -> None:
    """Remember the run's pending question (the design card's question cache)."""
    await get_async_redis().set(question_cache_key(run_id), _encode(question), ex=ttl)


async def question_cache_get(run_id: int) -> dict[str, Any] | None:
    raw = await get_async_redis().get(question_cache_key(run_id))
    return json.loads(raw) if raw else None


async def question_cache_clear(run_id: int, question_id: str) -> None:
    """Drop the cached question if it is still this one."""
    client = get_async_redis()
    cached = await question_cache_get(run_id)
    if cached and cached.get("question_id") == question_id:
        await client.delete(question_cache_key(run_id))


async def question_mark_shown(run_id: int, question_id: str, *, ttl: int) -> bool:
    """True the first time a question is marked shown: whoever wins pushes the card."""
    client = get_async_redis()
    added = await client.sadd(question_shown_key(run_id), question_id)
    await client.expire(question_shown_key(run_id), ttl)
    return bool(added)


# --- Run control ------------------------------------------------------------------------


async def request_cancel(run_id: int) -> None:
    """Ask whichever worker owns the run to cancel it (pub/sub now, a key as the fallback)."""
    client = get_async_redis()
    await client.set(cancel_key(run_id), "1", ex=3600)
    await client.publish(control_channel(run_id), "cancel")


async def cancel_requested(run_id: int) -> bool:
    return bool(await get_async_redis().exists(cancel_key(run_id)))


async def set_owner(run_id: int, worker: str, *, ttl: int) -> None:
    await get_async_redis().set(owner_key(run_id), worker, ex=ttl)


async def get_owner(run_id: int) -> str | None:
    value = await get_async_redis().get(owner_key(run_id))
    return str(value) if value is not None else None


# --- Relay tokens -----------------------------------------------------------------------


async def relay_token_store(run_id: int, token_hash: str, *, ttl: int) -> None:
    await get_async_redis().set(relay_token_key(run_id), token_hash, ex=ttl)


async def relay_token_hash(run_id: int) -> str | None:
    value = await get_async_redis().get(relay_token_key(run_id))
    return str(value) if value is not None else None


ENDED_MARK = "ended:"
ENDED_TOKEN_TTL = 600


async def relay_token_revoke(run_id: int) -> None:
    """The token stops authenticating at once; for a while it is still recognised as
    belonging to a finished run, so a late call gets 410 Gone rather than 403."""
    client = get_async_redis()
    current: Any = await client.get(relay_token_key(run_id))
    if current is None or current.startswith(ENDED_MARK):
        return
    await client.set(relay_token_key(run_id), ENDED_MARK + current, ex=ENDED_TOKEN_TTL)


# --- Answer hand-off --------------------------------------------------------------------


async def answer_push(question_id: str, answer: dict[str, Any], *, ttl: int) -> None:
    client = get_async_redis()
    pipe = client.pipeline(transaction=True)
    pipe.delete(answer_key(question_id))
    pipe.rpush(answer_key(question_id), _encode(answer))
    pipe.expire(answer_key(question_id), ttl)
    await pipe.execute()


async def answer_wake(question_id: str, *, ttl: int) -> None:
    """Wake a poll waiting for a question that closed without an answer.

    The poll gets ``ANSWER_WAKE`` instead of an answer and reads why from the database.
    """
    await answer_push(question_id, ANSWER_WAKE, ttl=ttl)


async def answer_pop(question_id: str, *, wait_seconds: float) -> dict[str, Any] | None:
    """Take the answer (once), waiting up to ``wait_seconds`` for it to arrive.

    The answer is moved, atomically, to the taken key: from that moment ``answer_taken``
    says it was collected, while an answer recorded but not yet pushed is not.
    """
    client = get_async_redis()
    source, taken = answer_key(question_id), answer_taken_key(question_id)
    raw: Any
    if wait_seconds <= 0:
        raw = await client.lmove(source, taken, "LEFT", "RIGHT")
    else:
        # Redis takes fractional seconds here; redis-py's annotation says int.
        raw = await client.blmove(source, taken, wait_seconds, "LEFT", "RIGHT")  # type: ignore[arg-type]
    if not raw:
        return None
    await client.expire(taken, ANSWER_TAKEN_TTL)
    answer: dict[str, Any] = json.loads(raw)
    return answer


async def answer_taken(question_id: str) -> bool:
    """Whether a waiting side already popped this question's answer."""
    return bool(await get_async_redis().exists(answer_taken_key(question_id)))
