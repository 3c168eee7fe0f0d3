"""The trimmed Redis pool keeps a few idle connections, and reuses them without reconnecting."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core import redis as core_redis

pytestmark = pytest.mark.unit


def test_after_a_burst_the_pool_keeps_a_few_connections_and_reuses_them(settings: Any) -> None:
    async def scenario() -> tuple[int, int, set[int], set[int]]:
        pool = core_redis.get_async_redis().connection_pool
        burst = [await pool.get_connection() for _ in range(core_redis.MAX_IDLE_CONNECTIONS + 3)]  # type: ignore[no-untyped-call]
        for connection in burst:
            await pool.release(connection)
        kept = {id(c) for c in pool._available_connections}
        open_after_burst = sum(1 for c in pool._available_connections if c.is_connected)
        # One command at a time from now on: each must take a connection that is already open.
        used: set[int] = set()
        reconnects = 0
        for _ in range(20):
            connection = pool.get_available_connection()  # type: ignore[no-untyped-call]
            reconnects += not connection.is_connected
            await pool.ensure_connection(connection)
            used.add(id(connection))
            await pool.release(connection)
        await core_redis.get_async_redis().aclose()
        return open_after_burst, reconnects, kept, used

    open_after_burst, reconnects, kept, used = asyncio.run(scenario())
    assert open_after_burst == core_redis.MAX_IDLE_CONNECTIONS
    assert len(kept) == core_redis.MAX_IDLE_CONNECTIONS  # the closed surplus left the pool
    assert reconnects == 0
    assert used <= kept


def test_the_sync_pool_of_the_run_queue_keeps_only_its_idle_allowance_after_a_burst(settings: Any) -> None:
    pool = core_redis.TrimmedSyncConnectionPool.from_url(settings.REDIS_URL, max_idle=1)
    try:
        burst = [pool.get_connection() for _ in range(4)]
        for connection in burst:
            connection.send_command("PING")  # type: ignore[no-untyped-call]
            assert connection.read_response() in (b"PONG", "PONG")
        for connection in burst:
            pool.release(connection)
        [kept] = pool._available_connections
        assert kept.is_connected
        # The surplus was closed, not kept: only the one it kept is still open.
        assert [c for c in burst if c.is_connected] == [kept]
        # The one kept serves the next command without connecting again.
        again = pool.get_connection()
        assert again is kept and again.is_connected
        pool.release(again)
    finally:
        pool.disconnect()


def test_idle_connections_past_the_few_kept_are_closed_once_unused_for_a_while(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core_redis, "IDLE_CLOSE_SECONDS", 0.3)

    async def scenario() -> dict[str, int]:
        pool = core_redis.get_async_redis().connection_pool

        def open_idle() -> int:
            return sum(1 for c in pool._available_connections if c.is_connected)

        crowd = [await pool.get_connection() for _ in range(12)]  # type: ignore[no-untyped-call]
        for connection in crowd:
            await pool.release(connection)
        seen = {"at_once": open_idle()}
        # Used again within the time: every one stays open.
        await asyncio.sleep(0.2)
        again = [await pool.get_connection() for _ in range(12)]  # type: ignore[no-untyped-call]
        seen["reconnects"] = sum(1 for c in again if not c.is_connected)
        for connection in again:
            await pool.release(connection)
        await asyncio.sleep(0.2)
        seen["while_recent"] = open_idle()
        # Then nobody comes: all but the few kept are closed and leave the pool.
        await asyncio.sleep(0.6)
        seen["after"], seen["in_pool_after"] = open_idle(), len(pool._available_connections)
        await core_redis.get_async_redis().aclose()
        return seen

    seen = asyncio.run(scenario())
    assert seen["at_once"] == 12
    assert seen["reconnects"] == 0
    assert seen["while_recent"] == 12
    assert seen["after"] == seen["in_pool_after"] == core_redis.KEEP_IDLE_CONNECTIONS


def test_a_connection_released_closed_leaves_the_pool_so_the_few_kept_are_all_open(settings: Any) -> None:
    async def scenario() -> tuple[int, int]:
        pool = core_redis.get_async_redis().connection_pool
        crowd = [await pool.get_connection() for _ in range(core_redis.KEEP_IDLE_CONNECTIONS + 1)]  # type: ignore[no-untyped-call]
        # A command cancelled mid-way closes its connection before it goes back to the pool.
        await crowd[0].disconnect()
        for connection in crowd:
            await pool.release(connection)
        kept = len(pool._available_connections)
        open_ = sum(1 for c in pool._available_connections if c.is_connected)
        await core_redis.get_async_redis().aclose()
        return kept, open_

    kept, open_ = asyncio.run(scenario())
    assert kept == open_ == core_redis.KEEP_IDLE_CONNECTIONS


def test_connections_name_their_client_in_redis_only_when_the_setting_asks(settings: Any) -> None:
    async def loop_connection_name() -> str | None:
        client = core_redis.get_async_redis()
        name = await client.client_getname()
        await client.aclose()
        return None if name is None else str(name)

    settings.REDIS_CLIENT_NAMES = True
    core_redis.reset_clients()
    assert core_redis.get_redis().client_getname() == "pm-sync"
    assert asyncio.run(loop_connection_name()) == "pm-loop"

    # Off (the default): a Redis that refuses CLIENT SETNAME still takes the connections.
    settings.REDIS_CLIENT_NAMES = False
    core_redis.reset_clients()
    assert core_redis.get_redis().client_getname() is None
    assert asyncio.run(loop_connection_name()) is None
