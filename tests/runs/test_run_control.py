"""The runs of one worker hear their cancels and messages through one subscription."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis

from promptmgr import live, run_control
from tests.helpers import PrivateRedis

pytestmark = pytest.mark.unit


class Heard:
    """What each run was told, in order."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[int, str]] = Counter()
        self.changed = asyncio.Event()

    def control(self, run_id: int) -> run_control.RunControl:
        return run_control.RunControl(
            run_id, cancel=self._on(run_id, "cancel"), message=self._on(run_id, "message")
        )

    def _on(self, run_id: int, what: str) -> Callable[[], None]:
        def heard() -> None:
            self.calls[(run_id, what)] += 1
            self.changed.set()

        return heard

    async def until(self, run_id: int, what: str, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not self.calls[(run_id, what)]:
                self.changed.clear()
                await self.changed.wait()


def publisher(server: PrivateRedis) -> redis.Redis:
    """A client of the test's own, as another worker's would be: not the listener's pool."""
    return redis.Redis.from_url(server.url, decode_responses=True)


def subscriptions(server: PrivateRedis) -> list[dict[str, Any]]:
    """The connections of the test's own Redis that hold a subscription."""
    with publisher(server) as client:
        return [c for c in client.client_list() if int(c["psub"]) or int(c["sub"])]


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


async def test_many_runs_share_one_subscription_and_each_hears_only_its_own(
    private_redis: PrivateRedis,
) -> None:
    heard = Heard()
    client = publisher(private_redis)
    for run_id in (11, 12, 13):
        run_control.watch(heard.control(run_id))
    await eventually(lambda: len(subscriptions(private_redis)) == 1)

    client.publish(live.control_channel(11), "cancel")
    client.publish(live.control_channel(12), "message")
    client.publish(live.control_channel(99), "cancel")  # a run another worker owns
    await heard.until(11, "cancel")
    await heard.until(12, "message")
    # Published in order on one connection, heard in order: run 99's was read and dropped.
    client.publish(live.control_channel(13), "message")
    await heard.until(13, "message")
    assert set(heard.calls) == {(11, "cancel"), (12, "message"), (13, "message")}
    [subscription] = subscriptions(private_redis)
    assert subscription["psub"] == "1" and subscription["sub"] == "0"

    for run_id in (11, 12):
        run_control.forget(run_id)
    client.publish(live.control_channel(11), "cancel")
    client.publish(live.control_channel(13), "cancel")
    await heard.until(13, "cancel")
    assert heard.calls[(11, "cancel")] == 1  # forgotten: the second cancel went unheard
    # The last run gone, the subscription goes too: a worker at rest holds none.
    run_control.forget(13)
    await eventually(lambda: not subscriptions(private_redis))


async def test_a_cancel_sent_while_nobody_listened_is_heard_from_its_key(private_redis: PrivateRedis) -> None:
    heard = Heard()
    # Published before the run's listener subscribed: only the key is left.
    await live.request_cancel(21)
    run_control.watch(heard.control(21))
    try:
        await heard.until(21, "cancel")
    finally:
        run_control.forget(21)


async def test_after_a_redis_restart_the_listener_subscribes_again_and_hears_later_cancels(
    private_redis: PrivateRedis,
) -> None:
    heard = Heard()
    run_control.watch(heard.control(31))
    try:
        await eventually(lambda: len(subscriptions(private_redis)) == 1)
        private_redis.kill()
        private_redis.start()
        # Pub/sub delivers at most once: what is published while the listener reconnects
        # is lost (a cancel's key stays, a message waits in the inbox). So publish until
        # the listener, subscribed again, hears one.
        client = publisher(private_redis)
        async with asyncio.timeout(20):
            while not heard.calls[(31, "message")]:
                client.publish(live.control_channel(31), "message")
                await asyncio.sleep(0.1)
        assert len(subscriptions(private_redis)) == 1
        assert not heard.calls[(31, "cancel")]
    finally:
        run_control.forget(31)
