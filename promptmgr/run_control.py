"""How a running turn hears its control messages: a cancel, a message for its inbox.

Any worker may send them (``live.request_cancel``, ``live.inbox_push``): a key that stays,
then a ``PUBLISH`` on the run's control channel so the owner hears at once. Every run of
one event loop listens through one ``ControlListener``: a single ``PSUBSCRIBE`` to all
runs' control channels, on one connection, dispatched here by channel.

A subscription per run held a Redis connection per live run for the run's whole life:
the stream footprint test read 10 such connections for 10 runs, and 50 runs on a worker
would hold 50. Every worker now hears every run's control messages and drops those of
runs it does not supervise; they are a user's clicks (a cancel, a steering message), a
handful a minute, so that costs nothing.

A message published while nobody listened (the listener reconnecting, a run not yet
registered) is not lost: the cancel key stays, and the listener looks at the keys of all
its runs after each (re)subscription and every ``CHECK_SECONDS``; a message waiting in an
inbox is found by the run's own idle tick (``RunSupervisor._on_idle``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import redis

from core.loops import PerLoop
from core.redis import get_async_redis, outage_seen

from . import live

logger = logging.getLogger(__name__)

# How often (seconds) the cancel keys of the listener's runs are looked at, besides after
# each (re)subscription: the safety net for a cancel published while nobody listened.
CHECK_SECONDS = 5.0
# A failed subscription or read is tried again after this pause (seconds).
RETRY_SECONDS = 1.0


@dataclass(frozen=True)
class RunControl:
    """One run, and what it does on hearing its control messages."""

    run_id: int
    cancel: Callable[[], None]
    message: Callable[[], None]


class ControlListener:
    """The control channels of every run of one event loop, heard on one connection.

    The listening task runs while at least one run is registered, so a worker with no
    run holds no subscription.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.runs: dict[str, RunControl] = {}  # by the run's control channel
        self._task: asyncio.Task[None] | None = None

    def watch(self, control: RunControl) -> None:
        self.runs[live.control_channel(control.run_id)] = control
        if self._task is None or self._task.done():
            self._task = self.loop.create_task(self._listen(), name="run-control")

    def forget(self, run_id: int) -> None:
        self.runs.pop(live.control_channel(run_id), None)
        if not self.runs and self._task is not None:
            # Its subscription ends with it.
            self._task.cancel()
            self._task = None

    async def _listen(self) -> None:
        """Until cancelled (``forget`` of the last run): subscribe, look at the cancel
        keys, hear messages; after a failure, the same again a moment later."""
        while True:
            try:
                # Closed on the way out, before any pause: redis-py would otherwise
                # reconnect it meanwhile and hold a subscription nobody reads.
                async with get_async_redis().pubsub() as pubsub:
                    await pubsub.psubscribe(live.control_pattern())
                    next_check = self.loop.time()
                    while True:
                        if self.loop.time() >= next_check:
                            await self._cancel_the_cancelled()
                            next_check = self.loop.time() + CHECK_SECONDS
                        message = await pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=next_check - self.loop.time()
                        )
                        if message is not None:
                            self._dispatch(message.get("channel"), message.get("data"))
            except redis.RedisError as exc:
                outage_seen(exc)  # one warning per outage, not a traceback a second
            except Exception:
                logger.warning("run control listener failed; retrying", exc_info=True)
            await asyncio.sleep(RETRY_SECONDS)

    async def _cancel_the_cancelled(self) -> None:
        """Cancel each run whose cancel key is set."""
        for run_id in await live.cancels_requested([control.run_id for control in self.runs.values()]):
            control = self.runs.get(live.control_channel(run_id))
            if control is not None:  # not forgotten meanwhile
                control.cancel()

    def _dispatch(self, channel: object, data: object) -> None:
        control = self.runs.get(channel) if isinstance(channel, str) else None
        if control is None:
            return  # another worker's run
        if data == "cancel":
            control.cancel()
        elif data == "message":
            control.message()


_listeners: PerLoop[ControlListener] = PerLoop(ControlListener)


def watch(control: RunControl) -> None:
    """The run hears its control messages, through its event loop's listener, until ``forget``."""
    _listeners.get().watch(control)


def forget(run_id: int) -> None:
    _listeners.get().forget(run_id)
