"""A run's control state in Redis: cancel signals, ownership, the concurrency slots and the
inbox of messages sent to a running turn.

Clients, the key prefix and the run event stream are ``core.redis`` and ``core.events``;
the ask-user question state is ``askuser.live``. Key names of this module live here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from core.events import run_key, run_tag
from core.redis import decode_json, encode_json, get_async_redis, get_redis, key_prefix

CANCEL_TTL = 3600
# A worker's registration lives this long unless the worker refreshes it (recovery.py).
WORKER_TTL = 15
# The concurrency slot sets expire this long after the last claim: no run lasts longer than
# RUN_MAX_DURATION, so by then none of their members can still be running.
SLOTS_TTL_GRACE = 600
# Messages wait at most this long for the run to take them; a sealed inbox refuses new
# ones for as long (the run has ended: they go as the conversation's next prompt instead).
INBOX_TTL = 3600


def control_channel(run_id: int) -> str:
    return run_key(run_id, "control")


def control_pattern() -> str:
    """Every run's control channel (``PSUBSCRIBE``): the key prefix with its glob
    characters escaped, then ``control_channel``'s shape with any run id."""
    prefix = re.sub(r"([*?\[\]\\])", r"\\\1", key_prefix())
    return f"{prefix}:{run_tag('*')}:control"


def cancel_key(run_id: int) -> str:
    return run_key(run_id, "cancel")


def owner_key(run_id: int) -> str:
    """Who runs it: refreshed by the owning worker's every loop turn, gone when it dies."""
    return run_key(run_id, "owner")


def queue_namespace() -> str:
    """Where the run queue (Dramatiq's Redis broker) keeps its keys: the queue, its messages,
    its workers' heartbeats and unacknowledged messages. Dramatiq gives them no TTL; it
    empties them itself as messages are acknowledged."""
    return f"{key_prefix()}:queue"


def worker_key(worker: str) -> str:
    """A live worker's registration: where it runs (``recovery.locality``), refreshed while it lives."""
    return f"{key_prefix()}:worker:{worker}"


def active_runs_key() -> str:
    return f"{key_prefix()}:runs:active"


def user_runs_key(user_id: int) -> str:
    return f"{key_prefix()}:runs:user:{user_id}"


def inbox_key(run_id: int) -> str:
    """Messages sent to the running turn, oldest first, until its supervisor takes them."""
    return run_key(run_id, "inbox")


def inbox_sealed_key(run_id: int) -> str:
    """Set when the run's supervisor stops taking messages (the run is ending)."""
    return run_key(run_id, "inbox-sealed")


def run_control_keys(run_id: int) -> list[str]:
    return [
        control_channel(run_id),
        cancel_key(run_id),
        owner_key(run_id),
        inbox_key(run_id),
        inbox_sealed_key(run_id),
    ]


# Starts a run only while the user's and the global caps allow it.
_CLAIM_SLOT_LUA = """
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return -1 end
if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[3]) then return -2 end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4]))
return 1
"""


async def claim_run_slot(run_id: int, user_id: int, *, per_user: int, total: int) -> int:
    """1 when the run may start, -1 over the user's cap, -2 over the global cap."""
    ttl = settings.RUN_MAX_DURATION + SLOTS_TTL_GRACE
    client = get_async_redis()
    script = client.register_script(_CLAIM_SLOT_LUA)
    return int(
        await script(keys=[user_runs_key(user_id), active_runs_key()], args=[run_id, per_user, total, ttl])
    )


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


async def request_cancel(run_id: int) -> None:
    """Ask whichever worker owns the run to cancel it (pub/sub now, a key as the fallback)."""
    client = get_async_redis()
    await client.set(cancel_key(run_id), "1", ex=CANCEL_TTL)
    await client.publish(control_channel(run_id), "cancel")


async def cancel_requested(run_id: int) -> bool:
    return bool(await get_async_redis().exists(cancel_key(run_id)))


async def cancels_requested(run_ids: list[int]) -> list[int]:
    """Those of ``run_ids`` asked to cancel, in one round trip."""
    if not run_ids:
        return []
    pipe = get_async_redis().pipeline(transaction=False)
    for run_id in run_ids:
        pipe.exists(cancel_key(run_id))
    found = await pipe.execute()
    return [run_id for run_id, exists in zip(run_ids, found, strict=True) if exists]


async def claim_owner(run_id: int, worker: str, *, ttl: int) -> bool:
    """Take the run's lease (``SET NX EX``); False when another worker holds it."""
    return bool(await get_async_redis().set(owner_key(run_id), worker, nx=True, ex=ttl))


async def set_owner(run_id: int, worker: str, *, ttl: int) -> None:
    """Refresh the lease of a run this worker supervises."""
    await get_async_redis().set(owner_key(run_id), worker, ex=ttl)


# Deletes the lease only while it is still the caller's.
_RELEASE_OWNER_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


async def release_owner(run_id: int, worker: str) -> None:
    """Give back a lease taken for nothing (the run had started or ended elsewhere)."""
    client = get_async_redis()
    await client.register_script(_RELEASE_OWNER_LUA)(keys=[owner_key(run_id)], args=[worker])


def has_owner_sync(run_id: int) -> bool:
    return bool(get_redis().exists(owner_key(run_id)))


def owner_sync(run_id: int) -> str | None:
    """The worker that owns the run, while its owner key lives."""
    owner = get_redis().get(owner_key(run_id))
    return None if owner is None else str(owner)


async def worker_register(worker: str, locality: str, *, ttl: int) -> None:
    await get_async_redis().set(worker_key(worker), locality, ex=ttl)


async def worker_forget(worker: str) -> None:
    await get_async_redis().delete(worker_key(worker))


def worker_locality_sync(worker: str) -> str | None:
    """Where a registered worker runs; None once its registration lapsed (it is gone)."""
    locality = get_redis().get(worker_key(worker))
    return None if locality is None else str(locality)


async def clear_control(run_id: int) -> None:
    """The run ended: nobody owns it and no cancel waits for it."""
    await get_async_redis().delete(cancel_key(run_id), owner_key(run_id))


# --- Messages to a running turn -------------------------------------------------------

# Queues a message unless the supervisor has sealed the inbox (then 0).
_INBOX_PUSH_LUA = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
"""
# Seals the inbox and hands back what is still in it, in one step: no message slips in after.
_INBOX_SEAL_LUA = """
redis.call('SET', KEYS[2], '1', 'EX', tonumber(ARGV[1]))
local items = redis.call('LRANGE', KEYS[1], 0, -1)
redis.call('DEL', KEYS[1])
return items
"""


async def inbox_push(run_id: int, message: dict[str, Any]) -> bool:
    """Queue a message for the run's supervisor; False once the run stopped taking any."""
    client = get_async_redis()
    script = client.register_script(_INBOX_PUSH_LUA)
    pushed = await script(
        keys=[inbox_key(run_id), inbox_sealed_key(run_id)], args=[encode_json(message), INBOX_TTL]
    )
    if pushed:
        # Whichever worker owns the run hears it at once (its idle tick looks anyway).
        await client.publish(control_channel(run_id), "message")
    return bool(pushed)


async def inbox_take(run_id: int) -> list[dict[str, Any]]:
    """Every message waiting, oldest first, taken out of the inbox."""
    client = get_async_redis()
    pipe = client.pipeline(transaction=True)
    pipe.lrange(inbox_key(run_id), 0, -1)
    pipe.delete(inbox_key(run_id))
    raw, _deleted = await pipe.execute()
    return [decode_json(item) for item in raw]


async def inbox_seal(run_id: int) -> list[dict[str, Any]]:
    """The run takes no more messages: seal its inbox and return what it still held."""
    client = get_async_redis()
    script = client.register_script(_INBOX_SEAL_LUA)
    raw: Any = await script(keys=[inbox_key(run_id), inbox_sealed_key(run_id)], args=[INBOX_TTL])
    return [decode_json(item) for item in raw]
