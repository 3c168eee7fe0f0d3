"""askuser's state in Redis: the question cache, the answer hand-off and relay-token hashes.

Clients and the key prefix come from ``core.redis``; the question's events go to the run's
stream (``core.events``). Key names of this app live here and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError, ResponseError

from core import events
from core.events import run_key
from core.redis import encode_json, get_async_redis, get_redis, key_prefix

if TYPE_CHECKING:
    from redis import asyncio as aredis

logger = logging.getLogger(__name__)

QUESTION_TTL_GRACE = 60  # seconds a question stays cached after it expires
RELAY_TOKEN_TTL_GRACE = 300
# Longer than any question lives (900 s at most), so a late poll still learns "consumed".
ANSWER_TAKEN_TTL = 3600
# Pushed in place of an answer to end a long-poll early; never a real answer's shape.
ANSWER_WAKE: dict[str, Any] = {"wake": True}
ENDED_MARK = "ended:"
ENDED_TOKEN_TTL = 600


def question_cache_key(run_id: int) -> str:
    """The question cache: the run's pending question, as JSON (the runner's idle tick reads it)."""
    return run_key(run_id, "question")


def question_shown_key(run_id: int) -> str:
    """Question ids already pushed to the run's event stream (pushed at most once)."""
    return run_key(run_id, "shown")


def relay_token_key(run_id: int) -> str:
    """The SHA-256 hash of the run's relay token (the token itself is never stored)."""
    return run_key(run_id, "relay-token")


def pending_permissions_key(run_id: int) -> str:
    """Ids of the run's permission requests nobody has decided yet (the idle tick reads it)."""
    return run_key(run_id, "permissions")


def permission_shown_key(run_id: int) -> str:
    """Ids of the run's permission requests whose card went out (decided ones stay in it)."""
    return run_key(run_id, "permissions-shown")


def run_question_keys(run_id: int) -> list[str]:
    """Every key of this app that belongs to one run."""
    return [
        question_cache_key(run_id),
        question_shown_key(run_id),
        relay_token_key(run_id),
        pending_permissions_key(run_id),
        permission_shown_key(run_id),
    ]


def answer_tag(question_id: str) -> str:
    return f"{{answer:{question_id}}}"


def answer_key(question_id: str) -> str:
    """A one-element list the answer is pushed to; poll-answer pops it (consumed once)."""
    return f"{key_prefix()}:{answer_tag(question_id)}:handoff"


def answer_taken_key(question_id: str) -> str:
    """Where a popped answer is moved: its existence says a waiting side collected it."""
    # Same hash tag as answer_key: the atomic move works on Redis Cluster too.
    return f"{key_prefix()}:{answer_tag(question_id)}:taken"


# --- The question cache -------------------------------------------------------------------


async def question_cache_put(run_id: int, question: dict[str, Any], *, ttl: int) -> None:
    """Remember the run's pending question in the question cache."""
    await get_async_redis().set(question_cache_key(run_id), encode_json(question), ex=ttl)


async def question_cache_get(run_id: int) -> dict[str, Any] | None:
    raw = await get_async_redis().get(question_cache_key(run_id))
    return json.loads(raw) if raw else None


# Deletes the cached question only while it is the one named: in one step, so a newer
# question cached between a look and a delete is never dropped.
_CACHE_CLEAR_LUA = """
local cached = redis.call('GET', KEYS[1])
if cached and cjson.decode(cached)['question_id'] == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


async def question_cache_clear(run_id: int, question_id: str) -> None:
    """Drop the cached question if it is still this one."""
    client = get_async_redis()
    await client.register_script(_CACHE_CLEAR_LUA)(keys=[question_cache_key(run_id)], args=[question_id])


# A question's card goes out once, whoever shows it (KEYS: the cache, the shown set, the
# run's events stream and sequence; ARGV: the card's JSON, the TTL, the question's id,
# whether to cache it ("1", "0", or "once": only if not shown yet, and then nothing else
# either), then event/data pairs to append after the card). Cached if asked, marked shown,
# and its card appended unless it was shown already; what follows it is appended either
# way, but with "once".
_QUESTION_SHOW_LUA = (
    events.APPEND_LUA_FUNCTION
    + """
local added = redis.call('SADD', KEYS[2], ARGV[3])
if added == 0 and ARGV[4] == 'once' then return 0 end
if ARGV[4] ~= '0' then redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[2])) end
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
local batch = {}
if added == 1 then
  batch[1] = 'ask_user_question'
  batch[2] = ARGV[1]
end
for i = 5, #ARGV do batch[#batch + 1] = ARGV[i] end
if #batch > 0 then append_events(KEYS[3], KEYS[4], batch, 1) end
return added
"""
)


async def question_show(
    run_id: int,
    question: dict[str, Any],
    *,
    ttl: int,
    then: list[tuple[str, dict[str, Any]]],
    cache: bool = True,
    only_if_new: bool = False,
) -> bool:
    """Mark the run's question shown and append its card (the ``ask_user_question`` event)
    and then ``then`` to the run's stream, in one step; with ``cache``, remember it in the
    question cache too (a new question's relay). The runner's safety net, which found it
    in the cache, shows it with ``cache=False``.

    False when the question was marked shown already: then only ``then`` is appended, so
    no card is pushed twice; with ``only_if_new`` (a question asked again), nothing is
    written at all.
    """
    keys = [
        question_cache_key(run_id),
        question_shown_key(run_id),
        events.events_key(run_id),
        events.seq_key(run_id),
    ]
    args = [
        encode_json(question),
        ttl,
        question["question_id"],
        "once" if only_if_new else "1" if cache else "0",
        *events.append_args(then),
    ]
    return bool(await get_async_redis().register_script(_QUESTION_SHOW_LUA)(keys=keys, args=args))


async def questions_forget(run_id: int) -> None:
    """The run ended: its question cache, shown sets and pending requests go (the relay
    token is revoked apart)."""
    await get_async_redis().delete(
        question_cache_key(run_id),
        question_shown_key(run_id),
        pending_permissions_key(run_id),
        permission_shown_key(run_id),
    )


# --- Pending permission requests ------------------------------------------------------------


# KEYS: the run's pending set, its shown set, its events stream and sequence; ARGV: the
# request id, the sets' TTL, then the events to append after it
# (events.APPEND_LUA_FUNCTION's arguments). A card goes out once, whoever shows it: a tool
# call's first try and its retry may both get here (the first delayed past the retry's
# show), and the later writes nothing. The TTLs only grow: a request asked again late, with
# little time left, must not cut the marks of the run's other requests short.
_PENDING_ADD_LUA = (
    events.APPEND_LUA_FUNCTION
    + """
local ttl = tonumber(ARGV[2])
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('SADD', KEYS[1], ARGV[1])
for i = 1, 2 do
  if redis.call('TTL', KEYS[i]) < ttl then redis.call('EXPIRE', KEYS[i], ttl) end
end
if #ARGV > 2 then append_events(KEYS[3], KEYS[4], ARGV, 3) end
return 1
"""
)


async def permission_pending_add(
    run_id: int, request_id: str, *, ttl: int, then: list[tuple[str, dict[str, Any]]]
) -> bool:
    """Add a request to the run's pending set and mark its card shown; ``then`` (its card,
    the run's status) are appended to the run's stream in the same step, after it (one
    script, as the hand-off: 0.18 -> 0.13 ms of CPU alone, against a MULTI of four commands).

    False, with nothing written, when the card was shown already (the same tool call asked
    again): not the card, not the run's status, which may have moved on since."""
    keys = [
        pending_permissions_key(run_id),
        permission_shown_key(run_id),
        events.events_key(run_id),
        events.seq_key(run_id),
    ]
    args: list[str | int] = [request_id, ttl, *events.append_args(then)]
    return bool(await get_async_redis().register_script(_PENDING_ADD_LUA)(keys=keys, args=args))


async def permission_pending_remove(run_id: int, request_id: str) -> None:
    await get_async_redis().srem(pending_permissions_key(run_id), request_id)


async def permissions_pending(run_id: int) -> bool:
    return bool(await get_async_redis().scard(pending_permissions_key(run_id)))


# --- Relay tokens -----------------------------------------------------------------------


async def relay_token_store(run_id: int, token_hash: str, *, ttl: int) -> None:
    await get_async_redis().set(relay_token_key(run_id), token_hash, ex=ttl)


async def relay_token_hash(run_id: int) -> str | None:
    value = await get_async_redis().get(relay_token_key(run_id))
    return str(value) if value is not None else None


async def relay_token_revoke(run_id: int) -> None:
    """The token stops authenticating at once; for a while it is still recognised as
    belonging to a finished run, so a late call gets 410 Gone rather than 403."""
    client = get_async_redis()
    current: Any = await client.get(relay_token_key(run_id))
    if current is None or current.startswith(ENDED_MARK):
        return
    await client.set(relay_token_key(run_id), ENDED_MARK + current, ex=ENDED_TOKEN_TTL)


def relay_token_revoke_sync(run_id: int) -> None:
    """``relay_token_revoke`` for the sweep, which runs in a thread of its own."""
    client = get_redis()
    current: Any = client.get(relay_token_key(run_id))
    if current is None or current.startswith(ENDED_MARK):
        return
    client.set(relay_token_key(run_id), ENDED_MARK + current, ex=ENDED_TOKEN_TTL)


# --- Answer hand-off --------------------------------------------------------------------


async def answer_push(
    question_id: str,
    answer: dict[str, Any],
    *,
    ttl: int,
    run_events: events.RunEvents | None = None,
) -> None:
    """Hand ``answer`` to the poll waiting for it; ``run_events`` (run id, events) are
    appended to that run's stream in the same step, before the hand-off, so a page sees
    them before anything Claude does with the answer."""
    # One script, as every other hand-off step, not a MULTI of five commands: stamped in the
    # running app on the way from a decision to the tool, 1.26 -> 0.71 ms p50 (0.23 -> 0.17
    # alone, where the pipeline's packing and parsing meet warm caches and an idle loop).
    await _answer_script(_PUSH_LUA, question_id, [encode_json(answer), ttl], run_events)


async def answer_wake(question_id: str, *, ttl: int, run_events: events.RunEvents | None = None) -> None:
    """Wake a poll waiting for a question that closed without an answer (or whose answer
    is in the database); ``run_events`` as ``answer_push``.

    The poll gets ``ANSWER_WAKE`` instead of an answer and reads why from the database.
    """
    await answer_push(question_id, ANSWER_WAKE, ttl=ttl, run_events=run_events)


class _HeldPolls:
    """The relay's long-polls one event loop holds: the Redis client id of each one's
    blocked ``BLMOVE``.

    A web worker that shuts down ends them at once (``polls_release``) rather than holding
    its shutdown for up to a poll's 25 s: behind one address any worker may hold a poll,
    for a run another worker owns, and its MCP server simply polls again. The SDK engine's
    own waits, inside its runs, are not among them: the runs stop with the worker."""

    def __init__(self) -> None:
        self.blocked: set[int] = set()
        self.released = False
        self.no_client_id = False


# Keyed by the loop itself, weakly: a dead loop's entry goes with it, and a new loop
# never inherits it (as it could by reusing the dead one's id).
_held: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _HeldPolls] = weakref.WeakKeyDictionary()


def _held_polls() -> _HeldPolls:
    return _held.setdefault(asyncio.get_running_loop(), _HeldPolls())


class TurnEnded(Exception):
    """The run's relay token was revoked (its turn ended) while a relay poll of it waited:
    nothing is taken, since no Claude would read it."""


async def answer_pop(
    question_id: str,
    *,
    wait_seconds: float,
    releasable: bool = False,
    unless_ended: int | None = None,
) -> dict[str, Any] | None:
    """Take the answer (once), waiting up to ``wait_seconds`` for it to arrive.

    The answer is moved, atomically, to the taken key: from that moment ``answer_taken``
    says it was collected, while an answer recorded but not yet pushed is not. A
    ``releasable`` wait (a relay endpoint's long-poll) is one this worker's shutdown ends
    (``polls_release``); once it has, no releasable wait blocks.

    ``unless_ended`` (a run id: an answer's relay poll) takes nothing once that run's relay
    token is revoked, and raises ``TurnEnded``: the poll's MCP server belongs to a turn that
    ended, and an answer it took would be lost, where left alone the run's end sends it on
    (``late.unread_answers_take``). Its wait then takes nothing either (``_RELAY_TAKE_LUA``).
    """
    client = get_async_redis()
    source, taken = answer_key(question_id), answer_taken_key(question_id)
    held = _held_polls() if releasable else None
    blocks = wait_seconds > 0 and not (held is not None and held.released)
    raw: Any
    if unless_ended is not None:
        keys = [source, taken, relay_token_key(unless_ended)]
        # Taken at once when it is there (or the turn ended), else waited for.
        raw = await client.register_script(_RELAY_TAKE_LUA)(keys=keys, args=_RELAY_TAKE_ARGS)
        if raw is None and blocks:
            raw = await _wait_then_take(client, held, keys, wait_seconds)
        if raw == 0:
            raise TurnEnded(unless_ended)
        if not raw:
            return None
    else:
        if blocks:
            raw = await _wait_move(client, held, source, taken, wait_seconds)
        else:
            raw = await client.lmove(source, taken, "LEFT", "RIGHT")
        if not raw:
            return None
        # The taken marker's lifetime is set beside the answer's way back, not before it:
        # that round trip, on a loop just busy with the decision, was the slowest step
        # between a click and the tool running (bench/approval_latency.py: 2.9 ms p50, of a
        # decision -> tool running of 32 ms).
        expiring = asyncio.get_running_loop().create_task(_taken_expire(client, taken))
        _expiring.add(expiring)  # held until done: the loop keeps only weak references
        expiring.add_done_callback(_expiring.discard)
    answer: dict[str, Any] = json.loads(raw)
    return answer


async def _wait_move(
    client: aredis.Redis, held: _HeldPolls | None, source: str, destination: str, wait_seconds: float
) -> Any:
    """``BLMOVE``; with ``held``, on a connection whose Redis client id ``polls_release``
    may unblock.

    Unblocked (``CLIENT UNBLOCK``), the command ends as at its timeout, within Redis:
    either it moved the answer, and returns it, or it moved nothing. The alternatives lose:
    a cancelled command may have moved the answer nobody then returns, and a wake-up
    pushed to the list may be taken by another poll of the question (the run's own poll,
    through its own worker), leaving this one blocked."""
    if held is None:
        # Redis takes fractional seconds here; redis-py's annotation says int.
        return await client.blmove(source, destination, wait_seconds, "LEFT", "RIGHT")  # type: ignore[arg-type]
    async with _held_connection(client, held) as connection:
        return await connection.blmove(source, destination, wait_seconds, "LEFT", "RIGHT")  # type: ignore[arg-type]


# Whether a run's relay token carries the ended mark (ARGV ``mark``; '' checks nothing):
# its turn ended (``relay_token_revoke``), so nothing may be taken for it.
_TURN_ENDED_LUA_FUNCTION = """
local function turn_ended(token_key, mark)
  if mark == '' then return false end
  local token = redis.call('GET', token_key)
  return token ~= false and string.sub(token, 1, #mark) == mark
end
"""
# A relay poll's take (KEYS: the answer list, the taken marker, the run's relay token; ARGV:
# the ended mark, the taken marker's TTL): 0 once the turn ended, else the answer moved to
# the taken marker, with its lifetime, or nothing.
_RELAY_TAKE_LUA = (
    _TURN_ENDED_LUA_FUNCTION
    + """
if turn_ended(KEYS[3], ARGV[1]) then return 0 end
local taken = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
if taken then redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2])) end
return taken
"""
)
_RELAY_TAKE_ARGS = (ENDED_MARK, ANSWER_TAKEN_TTL)


async def _wait_then_take(
    client: aredis.Redis, held: _HeldPolls | None, keys: list[str], wait_seconds: float
) -> Any:
    """The relay poll's wait and take (``_RELAY_TAKE_LUA``), sent together on one connection.

    The wait is a ``BLMOVE`` of the answer list onto itself: it ends when an answer (or a
    wake-up) is there, and leaves it where it is. Redis runs the take, queued behind it, the
    moment the wait ends, so the check of the token costs the answer no round trip. A wait
    cut off (the poll's client went away, ``polls_release``) has taken nothing: the take
    either ran, and its reply is the poll's, or never did."""
    source = keys[0]
    async with _held_connection(client, held) as connection:
        await connection.initialize()
        conn = connection.connection
        assert conn is not None  # a single-connection client has it once initialized
        commands: list[tuple[str | int | float, ...]] = [
            ("BLMOVE", source, source, "LEFT", "RIGHT", wait_seconds),
            ("EVAL", _RELAY_TAKE_LUA, len(keys), *keys, *_RELAY_TAKE_ARGS),
        ]
        try:
            await conn.send_packed_command(conn.pack_commands(commands))
            await conn.read_response()  # the wait's: what the list held, or nothing
            return await conn.read_response()
        except BaseException:
            # A reply left unread must not reach whoever uses the connection next.
            await conn.disconnect(nowait=True)
            raise


_expiring: set[asyncio.Task[None]] = set()


async def _taken_expire(client: aredis.Redis, taken: str) -> None:
    """Give the taken marker its TTL (``answer_pop`` runs this beside its reply).

    A process killed in the millisecond between the move and this leaves the marker
    without a TTL: one small key, and it still says "consumed", which is true."""
    try:
        await client.expire(taken, ANSWER_TAKEN_TTL)
    except RedisError as exc:
        logger.warning("could not set the TTL of an answer's taken marker: %s", exc)


@contextlib.asynccontextmanager
async def _held_connection(client: aredis.Redis, held: _HeldPolls | None) -> AsyncIterator[aredis.Redis]:
    """A connection of its own for a blocking wait, whose Redis client id ``polls_release``
    may unblock while the wait lasts (``held``; None: a wait no shutdown ends)."""
    blocked: set[int] = held.blocked if held is not None else set()
    async with client.client() as connection:
        client_id = await _client_id(connection, held) if held is not None else None
        if client_id is not None:
            blocked.add(client_id)
        try:
            yield connection
        finally:
            if client_id is not None:
                blocked.discard(client_id)


async def _client_id(connection: aredis.Redis, held: _HeldPolls) -> int | None:
    """The connection's Redis client id; None where Redis refuses ``CLIENT ID`` (an ACL
    without the connection commands): the poll then waits as before, unreleasable, rather
    than fail."""
    if held.no_client_id:
        return None
    try:
        return int(await connection.client_id())
    except ResponseError as exc:
        held.no_client_id = True
        logger.warning("Redis refuses CLIENT ID (%s): a shutdown cannot end the long-polls it holds", exc)
        return None


async def polls_release() -> int:
    """End every relay long-poll this worker holds, as if its wait had run out (each then
    answers "still waiting"; nothing is taken from the question), and hold none from now
    on; how many were held."""
    held = _held_polls()
    held.released = True
    blocked = list(held.blocked)
    if blocked:
        pipe = get_async_redis().pipeline(transaction=False)
        for client_id in blocked:
            pipe.client_unblock(client_id)
        await pipe.execute()
    return len(blocked)


async def _answer_script(
    source: str,
    question_id: str,
    args: list[Any],
    run_events: events.RunEvents | None,
    *,
    extra_keys: tuple[str, ...] = (),
) -> Any:
    """Run a script over a question's hand-off: KEYS the answer list and the taken marker,
    ``extra_keys``, then, with ``run_events``, the run's events stream and sequence; ARGV
    ``args``, then the events (``events.APPEND_LUA_FUNCTION``'s arguments, after ``args``)."""
    keys = [answer_key(question_id), answer_taken_key(question_id), *extra_keys]
    if run_events is not None and run_events[1]:
        run_id, appended = run_events
        keys += [events.events_key(run_id), events.seq_key(run_id)]
        args = [*args, *events.append_args(appended)]
    return await get_async_redis().register_script(source)(keys=keys, args=args)


def polls_released() -> bool:
    """Whether this loop's relay long-polls were released (``polls_release``): its worker is
    shutting down, and a released poll takes nothing from a question."""
    return _held_polls().released


# An answer the database holds whose hand-off never reached Redis: the poll takes it from
# there, once. KEYS: the answer list, the taken marker, the run's relay token[, the run's
# events stream, its sequence]; ARGV: the stored answer, the taken marker's TTL, the ended
# mark or ''[, the card's events]. With the mark, nothing is taken once the run's turn
# ended (0), as ``_RELAY_TAKE_LUA``. An answer the list does hold (a push that came after
# all) is taken instead, and the events, which came with it, are not appended twice.
_TAKE_STORED_LUA = (
    events.APPEND_LUA_FUNCTION
    + _TURN_ENDED_LUA_FUNCTION
    + """
if turn_ended(KEYS[3], ARGV[3]) then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return false end
local queued = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
if not queued then
  if #KEYS == 5 then append_events(KEYS[4], KEYS[5], ARGV, 4) end
  redis.call('RPUSH', KEYS[2], ARGV[1])
  queued = ARGV[1]
end
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
return queued
"""
)


async def answer_take_stored(
    question_id: str,
    stored: dict[str, Any],
    *,
    run_events: events.RunEvents | None = None,
    unless_ended: int | None = None,
) -> dict[str, Any] | None:
    """Take the answer the database holds for a question whose hand-off never came (its
    pusher died between the commit and the push, or Redis failed it), marking it taken as
    ``answer_pop`` does; None when a poll took it already. ``run_events`` (the card's
    update) are appended only if the hand-off, which carries them, never came.
    ``unless_ended`` as ``answer_pop``'s (a relay poll's take; raises ``TurnEnded``)."""
    if unless_ended is None:
        # No run to look at: the token's place holds a key the script then never reads.
        token_key, mark = answer_taken_key(question_id), ""
    else:
        token_key, mark = relay_token_key(unless_ended), ENDED_MARK
    raw = await _answer_script(
        _TAKE_STORED_LUA,
        question_id,
        [encode_json(stored), ANSWER_TAKEN_TTL, mark],
        run_events,
        extra_keys=(token_key,),
    )
    if raw == 0:
        raise TurnEnded(unless_ended)
    if not raw:
        return None
    taken: dict[str, Any] = json.loads(raw)
    # A wake-up the list held says only "read the database", which is what this did.
    return stored if taken == ANSWER_WAKE else taken


async def answer_taken(question_id: str) -> bool:
    """Whether a waiting side already popped this question's answer."""
    return bool(await get_async_redis().exists(answer_taken_key(question_id)))


# The hand-off itself (KEYS: the answer list, the taken marker[, the run's events stream and
# sequence]; ARGV: the answer, the list's TTL[, the card's events]): the card's events
# first, so a page sees them before anything Claude does with the answer, then the answer in
# place of whatever the list held, so a retried push never queues two.
_HAND_OVER_LUA = """
if #KEYS == 4 then append_events(KEYS[3], KEYS[4], ARGV, 3) end
redis.call('DEL', KEYS[1])
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
"""
_PUSH_LUA = events.APPEND_LUA_FUNCTION + _HAND_OVER_LUA
# The same hand-off, unless a waiting side already took an answer (then nothing, not even
# the events, and 0).
_REPLACE_UNLESS_TAKEN_LUA = (
    events.APPEND_LUA_FUNCTION + "if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end\n" + _HAND_OVER_LUA
)


async def answer_replace_unless_taken(
    question_id: str,
    answer: dict[str, Any],
    *,
    ttl: int,
    run_events: events.RunEvents | None = None,
) -> bool:
    """Swap the answer Claude has not taken yet for another (a member overrides the policy's);
    False once it was taken, and then ``run_events`` (run id, events) are not appended
    either; otherwise they land before the new answer, as with ``answer_push``."""
    return bool(
        await _answer_script(_REPLACE_UNLESS_TAKEN_LUA, question_id, [encode_json(answer), ttl], run_events)
    )
