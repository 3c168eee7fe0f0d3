"""A queued run is taken once: its lease (SET NX EX) and QUEUED -> RUNNING (compare-and-set).

The queue delivers at least once; every delivery but the first returns without running
anything. Real Redis and database; no CLI runs. Also what the run queue sets rather than
inherits from Dramatiq.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from dramatiq.middleware import Retries

from promptmgr import live, run_queue, runner
from promptmgr.models import Run, RunStatus
from promptmgr.runner import WORKER_ID, claim
from promptmgr.services import run_state
from tests.helpers import make_run

pytestmark = pytest.mark.unit


async def status(run_id: int) -> str:
    return (await Run.objects.aget(pk=run_id)).status


@pytest.mark.asyncio
async def test_the_first_delivery_takes_the_run_and_a_second_returns_quietly(
    transactional_db: Any, alice: Any
) -> None:
    run = await sync_to_async(make_run)(owner=alice, status=RunStatus.QUEUED)

    assert await claim(run.pk) is True
    assert await status(run.pk) == RunStatus.RUNNING
    assert await asyncio.to_thread(live.owner_sync, run.pk) == WORKER_ID

    # Another worker (or this one, delivered again) while the lease is held.
    assert await claim(run.pk) is False
    assert await status(run.pk) == RunStatus.RUNNING
    assert await asyncio.to_thread(live.owner_sync, run.pk) == WORKER_ID


@pytest.mark.asyncio
async def test_a_delivery_after_the_lease_lapsed_neither_runs_it_nor_keeps_a_lease(
    transactional_db: Any, alice: Any
) -> None:
    run = await sync_to_async(make_run)(owner=alice, status=RunStatus.QUEUED)
    assert await claim(run.pk) is True
    await live.clear_control(run.pk)  # the worker died and its lease expired

    assert await claim(run.pk) is False
    assert await status(run.pk) == RunStatus.RUNNING
    # No lease left behind: the sweep must still see the run's owner gone and fail it.
    assert await asyncio.to_thread(live.owner_sync, run.pk) is None


@pytest.mark.asyncio
async def test_a_delivery_of_a_run_that_ended_is_refused(transactional_db: Any, alice: Any) -> None:
    run = await sync_to_async(make_run)(owner=alice, status=RunStatus.QUEUED)
    outcome = run_state.Outcome(status=RunStatus.FAILED, error="swept")
    await sync_to_async(run_state.run_finish)(run.pk, outcome)

    assert await claim(run.pk) is False
    assert await status(run.pk) == RunStatus.FAILED
    assert await asyncio.to_thread(live.owner_sync, run.pk) is None


@pytest.mark.asyncio
async def test_another_workers_lease_is_never_released_by_a_refused_delivery(
    transactional_db: Any, alice: Any
) -> None:
    run = await sync_to_async(make_run)(owner=alice, status=RunStatus.RUNNING)
    await live.set_owner(run.pk, "elsewhere:1:abc", ttl=60)

    assert await claim(run.pk) is False
    await live.release_owner(run.pk, WORKER_ID)
    assert await asyncio.to_thread(live.owner_sync, run.pk) == "elsewhere:1:abc"


@pytest.mark.asyncio
async def test_the_queue_sets_no_retries_a_time_limit_above_the_longest_run_and_prefetch_to_its_slots(
    settings: Any,
) -> None:
    settings.RUN_MAX_DURATION = 3600
    queue = run_queue.RunQueue(asyncio.get_running_loop())
    try:
        retries = [m for m in queue.broker.middleware if isinstance(m, Retries)]
        assert [m.max_retries for m in retries] == [0]
        assert queue.actor.options["max_retries"] == 0
        # Dramatiq's default TimeLimit (10 minutes) is not there to cut a long run short.
        assert {type(m).__name__ for m in queue.broker.middleware} == {"Retries"}
        assert run_queue.time_limit() > settings.RUN_MAX_DURATION
        queue.start_worker(concurrency=2)
        assert queue.worker is not None and queue.worker.queue_prefetch == 2
        assert queue.worker.worker_threads == 2
    finally:
        await asyncio.to_thread(queue.stop)


def test_dramatiqs_retry_lines_of_an_outage_become_the_apps_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from core import redis as core_redis

    consumer = logging.getLogger("dramatiq.worker.ConsumerThread")
    caplog.set_level(logging.INFO)
    try:
        for _ in range(3):
            consumer.critical("Consumer encountered a connection error: %s", ConnectionError("refused"))
        consumer.critical("Consumer encountered an unexpected error.")
    finally:
        core_redis.outage_over()
    messages = [r.getMessage() for r in caplog.records]
    assert [m for m in messages if "Consumer encountered" in m] == [
        "Consumer encountered an unexpected error."
    ]
    assert sum(m.startswith(core_redis.MSG_OUTAGE.split("(")[0]) for m in messages) == 1


@pytest.mark.asyncio
async def test_the_sweep_fails_a_run_only_in_the_state_it_judged(transactional_db: Any, alice: Any) -> None:
    # The sweep saw it queued with no owner; a worker took it meanwhile.
    run = await sync_to_async(make_run)(owner=alice, status=RunStatus.QUEUED)
    assert await claim(run.pk) is True
    outcome = run_state.Outcome(status=RunStatus.FAILED, error="orphaned")

    with pytest.raises(run_state.IllegalTransition):
        await sync_to_async(run_state.run_finish)(run.pk, outcome, expected=RunStatus.QUEUED)
    assert await status(run.pk) == RunStatus.RUNNING


@pytest.mark.asyncio
async def test_an_actor_past_its_time_limit_stops_its_run_and_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # A narrow test of the actor's wait: the run never ends by itself.
    stopped = asyncio.Event()

    async def endless(run_id: int) -> bool:
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()
        return True

    monkeypatch.setattr(runner, "supervise", endless)
    monkeypatch.setattr(run_queue, "time_limit", lambda: 0.3)
    queue = run_queue.RunQueue(asyncio.get_running_loop())
    try:
        with pytest.raises(TimeoutError):
            await asyncio.to_thread(queue._execute, 1)
        await asyncio.wait_for(stopped.wait(), timeout=5)
    finally:
        queue.broker.close()
