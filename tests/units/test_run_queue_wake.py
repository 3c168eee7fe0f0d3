"""An idle queue worker takes a sent run at once: the send wakes it (``WakingRedisBroker``).

Dramatiq's Redis consumer polls; here an idle one parks on a wake list between looks, and
a send pushes to it. Real Redis; the actor only records when it ran.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import dramatiq
import pytest
from dramatiq.middleware import Retries

from promptmgr import run_queue

pytestmark = pytest.mark.unit


def test_a_run_sent_to_an_idle_worker_wakes_it_instead_of_waiting_out_its_look(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker that were not woken would find the message only after this wait.
    monkeypatch.setattr(run_queue, "WAKE_WAIT_SECONDS", 6.0)
    namespace = f"{settings.REDIS_KEY_PREFIX}:wake-test-{os.getpid()}"
    broker = run_queue.WakingRedisBroker(
        wake_key=f"{namespace}:wake",
        url=settings.REDIS_URL,
        namespace=namespace,
        middleware=[Retries(max_retries=0)],
    )
    ran = threading.Event()
    actor: dramatiq.Actor[[float], None] = dramatiq.Actor(
        lambda sent: ran.set(), broker=broker, actor_name="probe", queue_name="runs", priority=0, options={}
    )
    worker = dramatiq.Worker(broker, queues={"runs"}, worker_timeout=run_queue.POLL_MS, worker_threads=1)
    worker.start()
    try:
        time.sleep(0.5)  # the consumer has looked, found nothing and parked on the wake list
        actor.send(time.monotonic())
        assert ran.wait(timeout=3.0), "the sent run waited for the worker's next look"
    finally:
        worker.stop(timeout=10_000)
        broker.client.delete(*broker.client.keys(f"{namespace}*") or ["-"])
        broker.close()


def test_idle_run_slots_wait_long_for_a_run_and_still_take_a_sent_one_at_once(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle run slots must not wake every POLL_MS (that was most of an idle web process's
    # CPU); a sent run must still reach one at once, not after its wait.
    monkeypatch.setattr(run_queue, "SLOT_WAIT_MS", 4_000)
    namespace = f"{settings.REDIS_KEY_PREFIX}:slot-test-{os.getpid()}"
    broker = run_queue.WakingRedisBroker(
        wake_key=f"{namespace}:wake",
        url=settings.REDIS_URL,
        namespace=namespace,
        middleware=[Retries(max_retries=0)],
    )
    ran = threading.Event()
    actor: dramatiq.Actor[[float], None] = dramatiq.Actor(
        lambda sent: ran.set(), broker=broker, actor_name="probe", queue_name="runs", priority=0, options={}
    )
    worker = run_queue.RunWorker(broker, queues={"runs"}, worker_timeout=run_queue.POLL_MS, worker_threads=4)
    worker.start()
    try:
        assert [thread.timeout for thread in worker.workers] == [4.0] * 4
        assert all(consumer.worker_timeout == run_queue.POLL_MS for consumer in worker.consumers.values())
        time.sleep(0.5)  # every slot waits on the empty work queue
        actor.send(time.monotonic())
        assert ran.wait(timeout=2.0), "the sent run waited out an idle slot's wait"
    finally:
        worker.stop(timeout=10_000)
        broker.client.delete(*broker.client.keys(f"{namespace}*") or ["-"])
        broker.close()
