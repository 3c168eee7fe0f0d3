"""The spec's 2-second polling design, modelled in-process for a side-by-side comparison.

Nothing in the product is changed or switched off: the model replays the spec's loops
against the same Redis and the product's own store functions, ``trials`` trials per path,
``CONCURRENCY`` at a time (each trial only waits on its own timers and keys; the redis
client's pool of 100 connections bounds how many may be in flight at once).

* Question path: a stand-in CLI (``/bin/sh``) prints one line and goes quiet, as the real
  CLI does while a tool call is pending; the runner's loop reads its stdout through
  ``ManagedProcess.next_line`` with the 2-second ``RUN_READ_TIMEOUT`` and on each timeout
  calls ``question_push_if_unshown`` (the design card's safety net), with no instant push.
  The question is written to the question cache at a random offset (0-4 s) after the line;
  the figure is cache write -> the event read from the run's Redis stream (what the SSE
  view reads). With the real CLI the question lands a few ms after its last line, so the
  spec's real figure sits near the top of this range (~2 s): the model flatters the spec.
* Answer path: the MCP server's loop "GET poll-answer, sleep 2 s", modelled as a
  non-blocking ``answer_pop`` every 2 s; the answer is pushed at a random offset (0-4 s).
  Leaving out the HTTP round trip of each GET flatters the spec by a few milliseconds.
"""

from __future__ import annotations

import asyncio
import os
import random
import uuid
from collections.abc import Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from bench import harness

OFFSET_S = 4.0
CONCURRENCY = 50
RUN_ID_BASE = 900_000_000  # fake run ids: the model needs Redis keys only, no database rows
OPTIONS = [
    {"label": "Alpha", "description": "The first way."},
    {"label": "Beta", "description": "The second way."},
]


async def question_trial(index: int, offset: float, cwd: Path, watcher: StreamWatcher) -> float:
    from django.conf import settings
    from django.utils import timezone

    from askuser import live
    from askuser.asking import question_push_if_unshown
    from promptmgr.processes import TIMEOUT, ManagedProcess

    run_id = RUN_ID_BASE + index
    argv = ["/bin/sh", "-c", 'echo \'{"type":"assistant"}\'; exec sleep 60']
    process = await ManagedProcess.spawn(argv, cwd=cwd, env={"PATH": os.environ["PATH"]}, stdin_data=b"")
    try:
        await process.next_line(10)  # the tool_use line; then the CLI is quiet until the answer

        async def relay() -> int:
            """relay-question's write to the question cache, without its instant push."""
            await asyncio.sleep(offset)
            payload = {
                "question_id": str(uuid.uuid4()),
                "source": "mcp",
                "expires_at": (timezone.now() + timedelta(seconds=300)).isoformat(),
                "timeout": 300,
                "questions": [{"question": f"Trial {index}: which way?", "header": "", "options": OPTIONS}],
            }
            written = harness.now_ns()
            await live.question_cache_put(run_id, payload, ttl=360)
            return written

        writer = asyncio.create_task(relay())
        # Meanwhile the runner's loop: 2-second read timeouts, the question check on each.
        while True:
            item = await process.next_line(settings.RUN_READ_TIMEOUT)
            if item is None:
                raise RuntimeError("the stand-in CLI exited early")
            if writer.done():
                writer.result()  # a failed write must fail the trial, not leave it waiting
            if item is TIMEOUT and await question_push_if_unshown(run_id=run_id):
                break
        written = await writer
        return (await watcher.arrival(run_id) - written) / 1e6
    finally:
        await process.stop()


class StreamWatcher:
    """The SSE view's read, for every trial's run stream at once: one XREAD, one connection.

    (One blocking read per trial would hold a connection each and exhaust the client's pool.)
    """

    def __init__(self, run_ids: list[int]) -> None:
        from core.events import events_key

        self.keys = {events_key(run_id): run_id for run_id in run_ids}
        self.arrived: dict[int, asyncio.Future[int]] = {}
        for run_id in run_ids:
            self.arrived[run_id] = asyncio.get_running_loop().create_future()

    async def run(self) -> None:
        from core.redis import get_async_redis

        client = get_async_redis()
        waiting: dict[str, str] = dict.fromkeys(self.keys, "0-0")
        while waiting:
            result = await client.xread(waiting, block=500)  # type: ignore[arg-type]
            ts = harness.now_ns()
            streams = cast(list[tuple[str, list[Any]]], result or [])
            for key, _entries in streams:
                waiting.pop(key, None)
                self.arrived[self.keys[key]].set_result(ts)

    async def arrival(self, run_id: int) -> int:
        return await self.arrived[run_id]


async def answer_trial(offset: float) -> float:
    from askuser import live

    question_id = str(uuid.uuid4())

    async def user() -> int:
        await asyncio.sleep(offset)
        answered = harness.now_ns()
        await live.answer_push(question_id, {"answer": "Alpha"}, ttl=60)
        return answered

    writer = asyncio.create_task(user())
    while await live.answer_pop(question_id, wait_seconds=0) is None:  # one plain GET
        await asyncio.sleep(2.0)
    found = harness.now_ns()
    return (found - await writer) / 1e6


async def limited(gate: asyncio.Semaphore, trial: Coroutine[Any, Any, float]) -> float:
    async with gate:
        return await trial


async def run(trials: int, cwd: Path, seed: int) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    q_offsets = [rng.uniform(0, OFFSET_S) for _ in range(trials)]
    a_offsets = [rng.uniform(0, OFFSET_S) for _ in range(trials)]
    # The redis client's pool holds 100 connections; more commands in flight at once fail.
    gate = asyncio.Semaphore(CONCURRENCY)
    bound = 30 + 8 * (trials // CONCURRENCY + 1)
    print(f"  spec model: {trials} question-path trials …", flush=True)
    watcher = StreamWatcher([RUN_ID_BASE + i for i in range(trials)])
    async with asyncio.timeout(bound), asyncio.TaskGroup() as group:
        group.create_task(watcher.run())
        questions = [
            group.create_task(limited(gate, question_trial(i, offset, cwd, watcher)))
            for i, offset in enumerate(q_offsets)
        ]
    print(f"  spec model: {trials} answer-path trials …", flush=True)
    async with asyncio.timeout(bound), asyncio.TaskGroup() as group:
        answers = [group.create_task(limited(gate, answer_trial(offset))) for offset in a_offsets]
    return [t.result() for t in questions], [t.result() for t in answers]
