"""Start-up and shutdown of a web worker (the ASGI lifespan) and of a queue worker
(``manage.py runworker``: ``serve_worker``), and the drain on SIGTERM.

uvicorn, told to stop, first waits for open connections to close, and only then sends
the lifespan's shutdown. An SSE stream never closes by itself, nor does a relay long-poll
for 25 s, so every shutdown would last the whole graceful timeout and then cut them
without a word. Instead, the first SIGTERM (or SIGINT) starts the drain at once
(``begin_drain``): the relay long-polls answer "still waiting" (their MCP servers poll
again elsewhere; nothing is taken from the question), the runs this worker owns are
stopped, so their streams end with the runs' closing events; then every other open
stream ends with a ``reconnect`` event (``sse.event_stream``), so its client goes on with
another worker, or with this one once it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import Any

import redis
from asgiref.sync import sync_to_async

from core.loops import PerLoop

logger = logging.getLogger(__name__)

# How long the drain gives the runs to stop (each reaps its processes within
# processes.KILL_GRACE), so the whole shutdown stays within about 5 seconds.
DRAIN_RUNS_TIMEOUT = 4.0
# At most this long, the streams of the runs the drain stopped get to hand their clients
# the closing events before every open stream is told to reconnect.
CLOSING_EVENTS_GRACE = 0.5


class Drain:
    """A worker's shutdown, as far as its open streams are concerned (one per event loop)."""

    def __init__(self) -> None:
        self.started = False  # the runs are being stopped
        self.closing_streams = False  # then the streams are ended
        self.waiting: set[asyncio.Task[Any]] = set()
        self.task: asyncio.Task[None] | None = None


# Per loop, not per loop id: a loop closed mid-drain (a test's, a server killed in between)
# must not hand its drain to a new loop that reuses its id; that loop would end every stream.
_drains: PerLoop[Drain] = PerLoop(lambda _loop: Drain())


def _drain() -> Drain:
    return _drains.get()


def shutting_down() -> bool:
    """Whether this worker is ending its open streams (it is shutting down)."""
    return _drain().closing_streams


class Interruptible:
    """Around each wait the shutdown should cut short (an SSE stream waiting for events):
    the drain cancels the waiting task, and ``interrupted`` tells that cancel apart.

    One per stream, used for every wait of it: the stream's loop, and so its drain, never
    changes, and a stream waits once per batch it serves, so looking the drain up and
    building a generator-based context manager for every wait was a cost per delta
    (bench/machinery.py, "stream waits").
    """

    __slots__ = ("_drain", "_task")

    def __init__(self) -> None:
        self._drain = _drain()
        self._task: asyncio.Task[Any] | None = None

    @property
    def shutting_down(self) -> bool:
        """Whether this worker is ending its open streams, as ``shutting_down()``."""
        return self._drain.closing_streams

    def __enter__(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._drain.waiting.add(task)

    def __exit__(self, *exc_info: object) -> None:
        assert self._task is not None
        self._drain.waiting.discard(self._task)
        self._task = None


def interrupted() -> bool:
    """Called on CancelledError: True (and the cancel withdrawn) when the drain caused it."""
    task = asyncio.current_task()
    if not shutting_down() or task is None:
        return False
    task.uncancel()
    return True


def begin_drain() -> None:
    """Stop this worker's runs, then end every open stream (see the module docstring)."""
    drain = _drain()
    if drain.started:
        return
    drain.started = True
    drain.task = asyncio.get_running_loop().create_task(_run_drain(drain), name="drain")


async def _run_drain(drain: Drain) -> None:
    from askuser import facade as askuser
    from core import events
    from promptmgr import run_queue
    from promptmgr.runner import active_tasks, shutdown_all

    logger.info("shutting down: stopping this worker's runs, then its open streams")
    # Runs the queue delivers from now on go back to it, for another worker.
    run_queue.begin_drain()
    # Relay long-polls end now, whoever's run they wait for: their MCP servers poll again
    # (this worker accepts no new connection by now), and a poll held here would hold the
    # shutdown for up to 25 s.
    try:
        released = await askuser.polls_release()
    except redis.RedisError as exc:
        released = 0
        logger.warning("shutting down: the held long-polls could not be woken: %s", exc)
    loop = asyncio.get_running_loop()
    began = loop.time()
    stopped = await shutdown_all(timeout=DRAIN_RUNS_TIMEOUT)
    runs_took = loop.time() - began
    # Their streams here end with the runs' closing events: the last of them was written
    # a moment ago, and the shared reader hands it over on its next read.
    await events.tails_delivered(stopped, timeout=CLOSING_EVENTS_GRACE)
    # Stage by stage, so a slow shutdown says where its time went.
    logger.info(
        "shutting down: %d long-polls released; %d runs stopped in %.2f s (%d still "
        "stopping), their closing events handed over in %.2f s; %d open streams told to reconnect",
        released,
        len(stopped),
        runs_took,
        len(active_tasks()),
        loop.time() - began - runs_took,
        len(drain.waiting),
    )
    drain.closing_streams = True
    for task in list(drain.waiting):
        task.cancel()


def _drain_on_signals(loop: asyncio.AbstractEventLoop) -> None:
    """Start the drain when the server is told to stop, then let the server's own handler act.

    Only the main thread may handle signals (uvicorn in a test's thread handles none)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)

        def handler(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
            loop.call_soon_threadsafe(begin_drain)
            if callable(previous):
                previous(signum, frame)

        signal.signal(sig, handler)


def _start_default_executor(loop: asyncio.AbstractEventLoop) -> None:
    """The loop's default executor (``asyncio.to_thread``, ``run_in_executor(None)``) with
    all its threads started now.

    A ThreadPoolExecutor starts a thread whenever work arrives and none is idle, up to its
    bound, and keeps it: a worker's thread count then creeps up after a busy moment (9 -> 11
    after 300 streams, bench/streams_footprint.py) and looks like a leak. Started whole, the
    pool is part of the worker's footprint from the first request, at the size asyncio
    would have grown it to.
    """
    size = min(32, (os.cpu_count() or 1) + 4)
    executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="default-executor")
    # Each job waits for all the others, so every one of them needs a thread of its own.
    barrier = threading.Barrier(size)
    for job in [executor.submit(barrier.wait) for _ in range(size)]:
        job.result(timeout=10)
    loop.set_default_executor(executor)


async def start_run_host() -> None:
    """What every process that runs or sweeps runs starts with: load the instance id;
    sweep what a crashed worker left (runs nobody owns any more, their secrets and
    temporary directories) now and then periodically."""
    from core.redis import load_instance_uid
    from promptmgr.recovery import recover_orphaned_runs, start_sweeper
    from promptmgr.services.git_workspace import clones_recover_interrupted

    # Before anything touches Redis: every key carries this database's instance id.
    await sync_to_async(load_instance_uid)()
    # Registered first: this worker's id, and where it runs, tell the sweep its
    # predecessor's process is gone.
    await start_sweeper()
    await sync_to_async(recover_orphaned_runs)()
    # Clones a stopped worker left in "cloning" past their time limit become retryable.
    await sync_to_async(clones_recover_interrupted)()
    _start_default_executor(asyncio.get_running_loop())


# The collector's youngest generation is collected once this many more container objects
# were made than freed (Python's default: 700). A streaming worker makes and frees
# thousands a second: at 700, short-lived objects that merely happened to be alive at a
# collection were moved on to the older generations, whose collections then came every
# second or so and stalled every stream of the worker: under bench/scale.py's load, about
# 160 collections and 300-570 ms of stalls in its 15 s window (one or two full ones, up to
# 180 ms each), and the load's delta latency p99 was 71-108 ms. At 10,000 none fell in the window in
# four runs, and the p99 was 42-59 ms; 50,000 did no better. What waits for a collection
# is cyclic garbage only (everything else is freed at once), about this many objects.
GC_YOUNG_THRESHOLD = 10_000
_GC_DEFAULT_THRESHOLD = gc.get_threshold()


def _freeze() -> None:
    # What start-up loaded (~160k objects: Django, the SDK, the app) lives as long as the
    # worker, and a full collection would walk all of it, stalling every stream of the
    # worker for 77-94 ms; frozen, 0.002 ms (bench/machinery.py): the collector skips it.
    gc.collect()
    gc.freeze()
    _, older, oldest = _GC_DEFAULT_THRESHOLD
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def _thaw() -> None:
    """``_freeze`` undone, for a process that serves the app more than once (the tests)."""
    gc.unfreeze()
    gc.set_threshold(*_GC_DEFAULT_THRESHOLD)


async def stop_run_host() -> None:
    """Stop every run this process owns, reaping their process trees; then the sweeper,
    the policy agents and this worker's registration."""
    from askuser import facade as askuser
    from promptmgr import live, run_queue
    from promptmgr.recovery import stop_sweeper
    from promptmgr.runner import WORKER_ID, shutdown_all

    loop = asyncio.get_running_loop()
    began = loop.time()
    await stop_sweeper()
    await shutdown_all()
    runs_ended = loop.time()
    # The queue's worker threads are free once the runs ended; what they fetched and did
    # not start goes back to the queue.
    await run_queue.stop()
    # Policy agents still thinking, or waiting out their delay, stop with the worker.
    await askuser.policy_stop_all()
    with contextlib.suppress(Exception):  # Redis may be gone: the registration lapses anyway
        await live.worker_forget(WORKER_ID)
    logger.info(
        "stopped: the runs ended in %.2f s, the run queue and the rest in %.2f s",
        runs_ended - began,
        loop.time() - runs_ended,
    )


async def on_startup() -> None:
    """``start_run_host``; the run queue (with ``RUN_WORKER=embedded``, a worker taking runs
    into this server's loop); drain on SIGTERM; freeze what start-up loaded out of the
    garbage collector's way."""
    from django.conf import settings

    from promptmgr import run_queue

    await start_run_host()
    run_queue.start(worker=settings.RUN_WORKER == "embedded")
    _drain_on_signals(asyncio.get_running_loop())
    _freeze()


async def on_shutdown() -> None:
    """Stop every run this worker owns, reaping their process trees."""
    begin_drain()  # a shutdown that came without a signal (a test's server) drains too
    drain = _drain()
    if drain.task is not None:
        await drain.task
    await stop_run_host()
    _drains.discard()
    # Collectable again: a process that serves the app more than once (the tests) must
    # not keep what one serving left frozen.
    _thaw()


async def serve_worker(concurrency: int) -> None:
    """``manage.py runworker``: take runs off the queue until SIGTERM (or SIGINT), then
    drain: runs delivered meanwhile go back to the queue, this worker's runs stop (their
    streams end with their closing events) and the process exits within seconds."""
    from promptmgr import internal_url, run_queue

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await start_run_host()
    # The runs' MCP servers call INTERNAL_BASE_URL: a web process of this deployment must
    # answer there (on this host's loopback); the log says so when none does.
    check = loop.create_task(internal_url.check(internal_url.DEADLINE), name="internal-url-check")
    run_queue.start(worker=True, concurrency=concurrency)
    _freeze()
    await stop.wait()
    logger.info("shutting down: stopping this worker's runs")
    check.cancel()
    run_queue.begin_drain()
    await stop_run_host()


async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await on_startup()
            except Exception as exc:  # a failed start-up must be visible, not silent
                logger.exception("start-up failed")
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await on_shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return
