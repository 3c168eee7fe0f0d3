"""Redis clients, the key prefix and JSON encoding: the one door to Redis for both apps.

Every key starts with ``key_prefix()``: ``REDIS_KEY_PREFIX`` (several apps or test runs can
share a Redis) followed by this database's instance id (``core.models.Instance``), so a
re-created database, a restored backup or a second deployment on the same Redis and
prefix never sees another database's runs. Key names themselves live in each app's
``live`` module (``promptmgr.live``, ``askuser.live``) and in ``core.events``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
import redis
import redis.asyncio as aredis
from django.conf import settings

# A cache of clients per event loop: redis.asyncio connections are bound to their loop.
_async_clients: dict[int, tuple[object, aredis.Redis]] = {}
_sync_client: redis.Redis | None = None
_instance_uid: str | None = None

# Above the longest blocking call we make (the 25 s long-poll, the SSE heartbeat wait);
# redis-py's own default of 5 s would cut those off.
SOCKET_TIMEOUT = 65

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
