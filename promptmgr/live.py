"""A run's control state in Redis: cancel signals, ownership and the concurrency slots.

Clients, the key prefix and the run event stream are ``core.redis`` and ``core.events``;
the ask-user question state is ``askuser.live``. Key names of this module live here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.events import run_key
from core.redis import get_async_redis, get_redis, key_prefix

CANCEL_TTL = 3600


def control_channel(run_id: int) -> str:
    return run_key(run_id, "control")


def cancel_key(run_id: int) -> str:
    return run_key(run_id, "cancel")


def owner_key(run_id: int) -> str:
    """Who runs it: refreshed by the owning worker's every loop turn, gone when it dies."""
    return run_key(run_id, "owner")


def active_runs_key() -> str:
    return f"{key_prefix()}:runs:active"


def user_runs_key(user_id: int) -> str:
    return f"{key_prefix()}:runs:user:{user_id}"


def run_control_keys(run_id: int) -> list[str]:
    return [control_channel(run_id), cancel_key(run_id), owner_key(run_id)]


# Starts a run only while the user's and the global caps allow it.
_CLAIM_SLOT_LUA = """
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return -1 end
if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[3]) then return -2 end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
"""


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


async def request_cancel(run_id: int) -> None:
    """Ask whichever worker owns the run to cancel it (pub/sub now, a key as the fallback)."""
    client = get_async_redis()
    await client.set(cancel_key(run_id), "1", ex=CANCEL_TTL)
    await client.publish(control_channel(run_id), "cancel")


async def cancel_requested(run_id: int) -> bool:
    return bool(await get_async_redis().exists(cancel_key(run_id)))


async def set_owner(run_id: int, worker: str, *, ttl: int) -> None:
    await get_async_redis().set(owner_key(run_id), worker, ex=ttl)


def has_owner_sync(run_id: int) -> bool:
    return bool(get_redis().exists(owner_key(run_id)))


async def clear_control(run_id: int) -> None:
    """The run ended: nobody owns it and no cancel waits for it."""
    await get_async_redis().delete(cancel_key(run_id), owner_key(run_id))
