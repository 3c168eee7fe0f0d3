"""The run queue: runs execute in queue workers fed by Dramatiq's Redis broker.

``services.runs.run_start`` (in any web process) sends the run's id to the queue; a worker
takes it and supervises the run (``runner.supervise``) on its *run loop*. With
``RUN_WORKER=embedded`` (the default) every web process starts a worker from its ASGI
lifespan and its run loop is the web server's own event loop, so ``uvicorn`` alone runs
everything. With ``RUN_WORKER=off`` web processes only send; ``python manage.py
runworker`` processes take the runs, their run loop the command's one event loop.

Why a sync actor that hands the supervisor coroutine to the run loop, not Dramatiq's
AsyncIO middleware: the supervisor's state is bound to one loop (the async Redis clients of
``core.redis``, the runner's registry that the heartbeat, the sweep and the drain read, the
web server's drain), and in the embedded default that loop is the web server's. The
middleware's loop thread is also one per process, so two app instances in one process
(the test suite runs several) could not each have theirs. A worker thread waits for its
run, so a worker's threads are its run slots.

Redis queues deliver at least once (a worker that dies has its unacknowledged messages
delivered again once its broker heartbeat is ``HEARTBEAT_TIMEOUT_MS`` old), and a Claude
turn must never run twice: ``runner.claim`` takes the run's lease (``SET NX EX``, refreshed
while the run lives) and moves it QUEUED -> RUNNING with a compare-and-set, so a duplicate
returns quietly; a run whose lease lapsed is failed by the sweep (``recovery``).

Set here, not inherited from Dramatiq's defaults: no retries (``Retries(max_retries=0)``;
a failed message is dead-lettered, never run again); a time limit above the longest run
(``time_limit``), kept by the actor's own wait rather than Dramatiq's TimeLimit middleware
(whose default is 10 minutes, and whose thread, raising into the worker's, never stops);
a prefetch equal to the worker's run slots, so a busy worker never holds
messages another could run; the broker's heartbeat and dead-letter times. Redis must keep
these keys: run it with ``maxmemory-policy noeviction`` in production.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import uuid
from collections.abc import Iterable
from typing import Any

import dramatiq
import redis
from django.conf import settings
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import iter_queue, join_all
from dramatiq.middleware import Retries
from dramatiq.worker import WorkerThread, _WorkQueueItem

from core.redis import TrimmedSyncConnectionPool, connection_name, outage_seen

from . import live, runner

logger = logging.getLogger(__name__)

QUEUE_NAME = "runs"
ACTOR_NAME = "run"
# Dramatiq's idle consumer sleeps up to this between looks at the queue. The wait that
# matters is on the wake list (``WakingRedisBroker``), so this stays short.
POLL_MS = 20
# How long an idle consumer parks on the wake list per look: a sent run wakes it at once,
# and its worker's stop ends the look (``WakingRedisBroker.nudge``). Each look is a Lua
# fetch and a few wake-ups of the consumer's thread: at 0.5 s the two consumers (the
# queue's and its delay queue's) were 4.5 of the 10.5 ms of CPU a second an idle worker
# spent. Dramatiq's broker heartbeat rides on the fetch, far inside HEARTBEAT_TIMEOUT_MS;
# a run slot acknowledges its message itself (Dramatiq 2), so no acknowledgement waits for
# a look; and the app sends no delayed messages, which a parked consumer would hold back.
WAKE_WAIT_SECONDS = 5.0
# A parked look's read waits this much longer than the look itself before it fails.
PARK_READ_MARGIN_SECONDS = 5.0
# How long an idle worker thread (a run slot) waits for its next run before it looks
# whether the worker is stopping or pausing. Dramatiq gives its threads the consumer's
# POLL_MS, and a wake-up 50 times a second in each of RUN_WORKER_CONCURRENCY threads was
# most of an idle web process's CPU (20 slots: about 40 ms of CPU a second, bench/scale.py);
# at 500 ms, 40 wake-ups a second still cost half of what the process spends at rest
# (8-10 ms a second against 4 here). A run reaches a waiting thread at once either way (a
# queue's put wakes it), and so does a stop (``RunWorker.stop`` hands every slot a wake-up);
# only Dramatiq's pause, which the app does not use, waits this long.
SLOT_WAIT_MS = 30_000
# Ahead of every message's priority (an actor's, or a delayed message's eta).
_FIRST = -(2**62)
# A wake-up nobody took (no idle worker was parked) is dropped after this.
WAKE_TTL_SECONDS = 60
# A worker whose broker heartbeat is this old counts as dead: its runs' messages are
# delivered again (and refused by the lease, see the module docstring).
HEARTBEAT_TIMEOUT_MS = 60_000
# How long a message whose actor failed is kept in the dead-letter queue, for a look.
DEAD_MESSAGE_TTL_MS = 86_400_000
# Beyond RUN_MAX_DURATION (which the supervisor enforces itself): its clean-up.
TIME_LIMIT_GRACE = 120
# Idle connections the broker keeps (its consumers' parked ones are in use, not idle).
BROKER_IDLE_CONNECTIONS = 1
# How long ``stop`` waits for the worker's threads and consumers.
STOP_TIMEOUT_MS = 10_000


class _OutageOnce(logging.Filter):
    """Dramatiq logs an unreachable Redis on every retry (every 3 to 5 s); the app reports
    an outage once (``core.redis.outage_seen``), so those lines go there instead."""

    RETRIED = ("Consumer encountered a connection error", "Failed to post_process_message(")

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self.RETRIED):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        error = next((a for a in args if isinstance(a, BaseException)), None)
        outage_seen(error or ConnectionError(record.getMessage()))
        return False


for _name in ("dramatiq.worker.ConsumerThread", "dramatiq.worker.WorkerThread"):
    logging.getLogger(_name).addFilter(_OutageOnce())


class WakingRedisBroker(RedisBroker):
    """Dramatiq's Redis broker, whose idle consumers wake as soon as a run is sent.

    Dramatiq's Redis consumer polls: after a look that finds nothing it sleeps, backing off
    up to the worker's timeout, so a run sent to an idle worker waited up to that long (on
    average 75 ms at a 100 ms timeout), and a shorter timeout costs a Lua script per look
    (about 150 us of CPU each, here). Here a look that finds nothing parks on a wake list
    (``BLPOP``, at most ``WAKE_WAIT_SECONDS``) and looks again; ``enqueue`` pushes to that
    list. The queue itself, its acknowledgements and redelivery stay Dramatiq's.
    """

    def __init__(self, *, wake_key: str, url: str, **kwargs: Any) -> None:
        super().__init__(url=url, **kwargs)  # type: ignore[no-untyped-call]
        self.wake_key = wake_key
        self.url = url
        # A parked consumer holds a connection for up to WAKE_WAIT_SECONDS: one of its own
        # per queue (each queue has one consumer thread), so the shared pool, which the
        # sends and acknowledgements use, does not grow and shrink with the parking.
        self._parking: dict[str, redis.Redis] = {}
        # Where ``nudge`` reaches this broker's own consumers (the wake list is every worker's).
        self._nudge_key = f"{wake_key}:nudge:{uuid.uuid4().hex}"

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]:
        enqueued = super().enqueue(message, delay=delay)
        self._push(self._wake_key(enqueued.queue_name))
        return enqueued

    def do_requeue(self, queue_name: str, *message_ids: str) -> Any:
        # A stopping worker gives back the runs it fetched and never started: another
        # worker takes them at once, not at the end of its parked look.
        requeue = RedisBroker.__getattr__(self, "do_requeue")  # type: ignore[no-untyped-call]
        result = requeue(queue_name, *message_ids)
        self._push(self._wake_key(queue_name))
        return result

    def _push(self, *keys: str) -> None:
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.lpush(key, 1)
            pipe.expire(key, WAKE_TTL_SECONDS)
        pipe.execute()

    def _wake_key(self, queue_name: str) -> str:
        # One list per queue: the worker's consumer of the delay queue must not take a wake-up
        # meant for the consumer of the queue itself.
        return f"{self.wake_key}:{queue_name}"

    def do_fetch(self, queue_name: str, count: int) -> list[bytes]:
        # Dramatiq dispatches its Lua commands through __getattr__ ("do_<command>"), which
        # this method now hides.
        fetch = RedisBroker.__getattr__(self, "do_fetch")  # type: ignore[no-untyped-call]
        messages: list[bytes] = fetch(queue_name, count)
        if messages:
            return messages
        nudge_key = self._nudge_key_of(queue_name)
        woken = self._parked(queue_name).blpop(
            [self._wake_key(queue_name), nudge_key], timeout=WAKE_WAIT_SECONDS
        )
        if woken is None or woken[0] == nudge_key.encode():  # this client returns bytes
            # Nothing sent, or a nudge: the worker stops (a fetch would take runs it never starts).
            return []
        fetched: list[bytes] = fetch(queue_name, count)
        return fetched

    def nudge(self, queue_names: Iterable[str]) -> None:
        """End the parked look (the one under way, else the next) of this broker's consumers
        of ``queue_names``, empty: their loop runs once more before they look again."""
        self._push(*(self._nudge_key_of(queue_name) for queue_name in queue_names))

    def _nudge_key_of(self, queue_name: str) -> str:
        return f"{self._nudge_key}:{queue_name}"

    def _parked(self, queue_name: str) -> redis.Redis:
        client = self._parking.get(queue_name)
        if client is None:
            # A pool of its own (one connection in it): a pooled connection is checked and
            # reconnected when taken, so a Redis restart costs no error (a single-connection
            # client raised one on its stale socket: a second outage warning).
            # redis-py reads with a 5 s timeout by default, which a longer park would hit
            # (an error, not an empty look): its reads wait past the park's end instead.
            client = self._parking[queue_name] = redis.Redis.from_url(
                self.url,
                socket_timeout=WAKE_WAIT_SECONDS + PARK_READ_MARGIN_SECONDS,
                client_name=connection_name("queue-parked"),
            )
        return client

    def close(self) -> None:
        """Close every connection: the shared pool's and the parked consumers'."""
        self.client.connection_pool.disconnect()
        for client in self._parking.values():
            client.close()
        self._parking.clear()


class _StopWaiting:
    """What ``RunWorker.stop`` puts on the work queue so that an idle slot stops waiting:
    no message, and never sent to a broker."""


# Typed as any message: it travels on the work queue where messages do.
_STOP_WAITING: Any = _StopWaiting()


class RunSlot(WorkerThread):
    """A run slot: Dramatiq's worker thread, for which a ``_STOP_WAITING`` item is no run."""

    def process_message(self, message: Any) -> None:
        if message is _STOP_WAITING:
            self.work_queue.task_done()  # its loop then sees that it is stopping
            return
        super().process_message(message)


class RunWorker(dramatiq.Worker):
    """Dramatiq's worker whose idle run slots wait ``SLOT_WAIT_MS`` for a run, not
    ``POLL_MS``, and stop waiting the moment the worker stops."""

    def _add_worker(self) -> None:
        # Dramatiq's own _add_worker, with the threads' timeout apart from the consumers'.
        thread = RunSlot(
            broker=self.broker,
            consumers=self.consumers,
            work_queue=self.work_queue,
            worker_timeout=SLOT_WAIT_MS,
        )
        thread.start()
        self.workers.append(thread)

    def stop(self, timeout: int = 600_000) -> None:
        """Dramatiq's stop, with every idle slot woken instead of waiting out its wait.

        Wake-ups go ahead of any run still on the work queue, so no slot starts a run once
        stopping; what the slots did not take is removed before Dramatiq gives the work
        queue's runs back to the broker."""
        for thread in self.workers:
            thread.stop()
        for _thread in self.workers:
            self.work_queue.put(_WorkQueueItem(priority=_FIRST, message=_STOP_WAITING))
        join_all(self.workers, timeout)  # type: ignore[no-untyped-call]
        left = list(iter_queue(self.work_queue))  # type: ignore[no-untyped-call]
        for item in left:
            if item.message is not _STOP_WAITING:
                self.work_queue.put(item)
        # The slots are done, so the consumers' heartbeats are no longer needed: mark them
        # stopped (as Dramatiq's stop does next) and nudge them, so the stop does not wait
        # out their parked looks (WAKE_WAIT_SECONDS).
        for consumer in self.consumers.values():
            consumer.stop()
        if isinstance(self.broker, WakingRedisBroker):
            try:
                self.broker.nudge(self.consumers)
            except redis.RedisError as error:
                outage_seen(error)  # the parked looks end by their timeout (or their error)
        super().stop(timeout)


def time_limit() -> float:
    """Seconds a run's actor may take: above the longest run (``RUN_MAX_DURATION``)."""
    return float(settings.RUN_MAX_DURATION + TIME_LIMIT_GRACE)


class RunQueue:
    """One broker (and, in a process that runs runs, one worker) bound to one run loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.draining = False
        self.worker: dramatiq.Worker | None = None
        pool = TrimmedSyncConnectionPool.from_url(
            settings.REDIS_URL, max_idle=BROKER_IDLE_CONNECTIONS, client_name=connection_name("queue")
        )
        self.broker = WakingRedisBroker(
            wake_key=f"{live.queue_namespace()}:wake",
            url=settings.REDIS_URL,
            client=redis.Redis(connection_pool=pool),
            namespace=live.queue_namespace(),
            # Explicit: Dramatiq's defaults would retry a failed run 20 times and stop any
            # actor after 10 minutes.
            middleware=[Retries(max_retries=0)],
            heartbeat_timeout=HEARTBEAT_TIMEOUT_MS,
            dead_message_ttl=DEAD_MESSAGE_TTL_MS,
        )
        self.actor: dramatiq.Actor[[int], None] = dramatiq.Actor(
            self._execute,
            broker=self.broker,
            actor_name=ACTOR_NAME,
            queue_name=QUEUE_NAME,
            priority=0,
            options={"max_retries": 0},
        )

    def send(self, run_id: int) -> None:
        """Queue the run (sync: one Redis call)."""
        self.actor.send(run_id)

    def start_worker(self, concurrency: int) -> None:
        """Take runs off the queue, ``concurrency`` at once, into this queue's run loop."""
        worker = RunWorker(
            self.broker, queues={QUEUE_NAME}, worker_timeout=POLL_MS, worker_threads=concurrency
        )
        # Held messages count in-progress ones too: never more than the free run slots.
        worker.queue_prefetch = concurrency
        worker.start()
        self.worker = worker

    def stop(self) -> None:
        """Stop taking runs (what was fetched and not started goes back to the queue) and
        close the broker's connections. Blocking: call it in a thread once the runs ended."""
        self.draining = True
        if self.worker is not None:
            self.worker.stop(timeout=STOP_TIMEOUT_MS)
            self.worker = None
        self.broker.close()

    def _execute(self, run_id: int) -> None:
        """The actor, in a worker thread: supervise the run on the run loop and wait for it."""
        if self.draining:
            # Stopping: the run goes back to the queue for another worker (or this one, back).
            self.send(run_id)
            return
        future = asyncio.run_coroutine_threadsafe(runner.supervise(run_id), self.loop)
        try:
            future.result(timeout=time_limit())
        except concurrent.futures.TimeoutError:
            logger.error("run %s passed its time limit of %.0f s; stopping it", run_id, time_limit())
            raise
        finally:
            # Cancelling the future cancels the supervision, which stops the run cleanly
            # (nothing to cancel once it is done).
            future.cancel()


_queues: dict[int, RunQueue] = {}


def start(*, worker: bool, concurrency: int | None = None) -> RunQueue:
    """The run queue of the running event loop, which becomes its run loop; with ``worker``,
    runs are taken off the queue here too."""
    loop = asyncio.get_running_loop()
    queue = RunQueue(loop)
    _queues[id(loop)] = queue
    if worker:
        slots = concurrency or settings.RUN_WORKER_CONCURRENCY
        queue.start_worker(slots)
        logger.info("run queue worker %s: up to %d runs at once", runner.WORKER_ID, slots)
    return queue


def begin_drain() -> None:
    """This loop's worker is shutting down: runs delivered from now on go back to the queue."""
    queue = _queues.get(id(asyncio.get_running_loop()))
    if queue is not None:
        queue.draining = True


async def stop() -> None:
    """Stop the running loop's queue (its runs have ended: ``runner.shutdown_all``)."""
    queue = _queues.pop(id(asyncio.get_running_loop()), None)
    if queue is not None:
        await asyncio.to_thread(queue.stop)


async def enqueue(run_id: int) -> None:
    """Send the run to the queue; a worker (this process's, or another's) takes it."""
    loop = asyncio.get_running_loop()
    queue = _queues.get(id(loop))
    if queue is not None:
        await asyncio.to_thread(queue.send, run_id)
    else:  # a loop no lifespan started (a script, a test client): a broker for this once
        await asyncio.to_thread(_send_once, loop, run_id)


def _send_once(loop: asyncio.AbstractEventLoop, run_id: int) -> None:
    queue = RunQueue(loop)
    try:
        queue.send(run_id)
    finally:
        queue.broker.close()
