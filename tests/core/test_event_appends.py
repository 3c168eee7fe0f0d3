"""Appends of many runs at once share round trips, and each still gets its own ids in order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from core import events
from core import redis as core_redis
from tests.helpers import free_port

pytestmark = pytest.mark.unit


async def test_concurrent_appends_of_many_runs_keep_each_runs_ids_and_order() -> None:
    async def writer(run_id: int) -> list[list[int]]:
        ids = []
        for n in range(10):
            ids.append(await events.append_events(run_id, [("a", {"n": n}), ("b", {"n": n})]))
        return ids

    runs = list(range(501, 521))
    results = await asyncio.gather(*(writer(run_id) for run_id in runs))

    for run_id, ids in zip(runs, results, strict=True):
        assert ids == [[2 * n + 1, 2 * n + 2] for n in range(10)]
        stored = await events.read_events(run_id, 0)
        assert [(e.id, e.event, e.data["n"]) for e in stored] == [
            (2 * n + 1 + k, name, n) for n in range(10) for k, name in enumerate("ab")
        ]


async def test_every_waiting_append_hears_that_redis_is_unreachable(settings: Any, redis_url: str) -> None:
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    core_redis.reset_clients()
    try:
        outcomes = await asyncio.gather(
            *(events.append_events(run_id, [("a", {})]) for run_id in (601, 602, 603)),
            return_exceptions=True,
        )
    finally:
        settings.REDIS_URL = redis_url
        core_redis.reset_clients()

    assert all(isinstance(outcome, redis.ConnectionError) for outcome in outcomes)
    # Redis is back: the next append goes through.
    assert await events.append_events(601, [("a", {})]) == [1]
