"""Appends of many runs at once share round trips, and each still gets its own ids in order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
from redis.exceptions import NoScriptError

from core import events
from core import redis as core_redis
from tests.helpers import PrivateRedis, free_port

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


def script_calls(server: PrivateRedis) -> dict[str, int]:
    stats = redis.Redis(port=server.port).info("commandstats")
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("eval", "evalsha")}


async def test_appends_go_by_the_scripts_hash_and_keep_their_order_when_redis_forgets_it(
    private_redis: PrivateRedis,
) -> None:
    # A new connection sends the script's text once; after that, its hash.
    assert await events.append_events(701, [("a", {"n": 1})]) == [1]
    assert await events.append_events(701, [("a", {"n": 2})]) == [2]
    assert script_calls(private_redis) == {"eval": 1, "evalsha": 1}

    # Redis forgets the script: the refused appends go again by text, each run's in order.
    redis.Redis(port=private_redis.port).script_flush()
    both = await asyncio.gather(
        events.append_events(701, [("a", {"n": 3})]), events.append_events(702, [("a", {"n": 1})])
    )
    assert list(both) == [[3], [1]]
    assert script_calls(private_redis) == {"eval": 3, "evalsha": 3}

    # A restarted Redis: the append on the cut connection hears so (it wrote nothing); the
    # next connects again and sends the text, so none is refused for a lost script.
    private_redis.stop()
    private_redis.start()
    with pytest.raises(redis.ConnectionError):
        await events.append_events(701, [("a", {"n": 4})])
    ids = [await events.append_events(701, [("a", {"n": n})]) for n in (4, 5)]
    assert ids == [[4], [5]]
    assert script_calls(private_redis) == {"eval": 1, "evalsha": 1}
    stored = await events.read_events(701, 0)
    assert [(e.id, e.data["n"]) for e in stored] == [(n, n) for n in range(1, 6)]


async def test_a_failed_resend_of_forgotten_appends_fails_only_those(monkeypatch: pytest.MonkeyPatch) -> None:
    # Narrow: Redis's replies are scripted. The first append is written, the second refused
    # for a forgotten script, and the connection drops while it goes again by text.
    sent: list[list[str]] = []

    async def exchange(_connection: Any, commands: list[list[Any]], *, timeout: float) -> list[Any]:
        sent.append([str(command[0]) for command in commands])
        if len(sent) == 1:
            return [7, NoScriptError("NOSCRIPT No matching script.")]
        raise redis.ConnectionError("Connection closed by server.")

    monkeypatch.setattr(events, "bare_exchange", exchange)
    written, resent = await asyncio.gather(
        events.append_events(801, [("a", {})]), events.append_events(802, [("a", {})]), return_exceptions=True
    )

    assert written == [7]  # it was written: told otherwise, its writer would write it again
    assert isinstance(resent, redis.ConnectionError)
    assert sent[1] == ["EVAL"]
