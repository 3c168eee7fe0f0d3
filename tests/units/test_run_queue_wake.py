"""An idle queue worker takes a sent run at once: the send wakes it (``WakingRedisBroker``),
and its idle run slots wait for a run without waking every poll, and stop waiting the
moment the worker stops (``RunWorker``).

Dramatiq's Redis consumer polls; here an idle one parks on a wake list between looks, and
a send pushes to it. Real Redis; the actor only records that it ran.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import dramatiq
import pytest
from dramatiq.middleware import Retries

from promptmgr import run_queue

pytestmark = pytest.mark.unit


@dataclass
class Probe:
    broker: run_queue.WakingRedisBroker
    actor: dramatiq.Actor[[float], None]
    ran: threading.Event


@pytest.fixture
def probe(settings: Any) -> Iterator[Probe]:
    """A broker on a namespace of this test's own, and an actor that records that it ran."""
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
    yield Probe(broker, actor, ran)
    broker.client.delete(*broker.client.keys(f"{namespace}*") or ["-"])
    broker.close()


def test_a_run_sent_to_an_idle_worker_wakes_it_instead_of_waiting_out_its_look(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker that were not woken would find the message only after this wait.
    monkeypatch.setattr(run_queue, "WAKE_WAIT_SECONDS", 6.0)
    worker = dramatiq.Worker(
        probe.broker, queues={"runs"}, worker_timeout=run_queue.POLL_MS, worker_threads=1
    )
    worker.start()
    try:
        time.sleep(0.5)  # the consumer has looked, found nothing and parked on the wake list
        probe.actor.send(time.monotonic())
        assert probe.ran.wait(timeout=3.0), "the sent run waited for the worker's next look"
    finally:
        worker.stop(timeout=10_000)


def test_idle_run_slots_wait_long_for_a_run_and_still_take_a_sent_one_at_once(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle run slots must not wake every POLL_MS (that was most of an idle web process's
    # CPU); a sent run must still reach one at once, not after its wait.
    monkeypatch.setattr(run_queue, "SLOT_WAIT_MS", 4_000)
    worker = run_queue.RunWorker(
        probe.broker, queues={"runs"}, worker_timeout=run_queue.POLL_MS, worker_threads=4
    )
    worker.start()
    try:
        assert [thread.timeout for thread in worker.workers] == [4.0] * 4
        assert all(consumer.worker_timeout == run_queue.POLL_MS for consumer in worker.consumers.values())
        time.sleep(0.5)  # every slot waits on the empty work queue
        probe.actor.send(time.monotonic())
        assert probe.ran.wait(timeout=2.0), "the sent run waited out an idle slot's wait"
    finally:
        worker.stop(timeout=10_000)


def test_a_stopping_worker_ends_its_idle_slots_at_once_instead_of_after_their_wait(probe: Probe) -> None:
    worker = run_queue.RunWorker(
        probe.broker, queues={"runs"}, worker_timeout=run_queue.POLL_MS, worker_threads=4
    )
    worker.start()
    time.sleep(0.5)  # every slot waits on the empty work queue, for SLOT_WAIT_MS (30 s)
    started = time.monotonic()

    worker.stop(timeout=60_000)

    assert time.monotonic() - started < 10, "the stop waited out the idle slots' wait"
    assert not any(thread.is_alive() for thread in worker.workers)


def test_a_run_fetched_but_not_started_when_the_worker_stops_goes_back_to_the_queue(
    probe: Probe, settings: Any
) -> None:
    # One slot, busy with the first run; the second run waits on the work queue (prefetch 2).
    release, started, ran = threading.Event(), threading.Event(), []

    def run(sent: float) -> None:
        ran.append(sent)
        started.set()
        release.wait(timeout=30)

    dramatiq.Actor(run, broker=probe.broker, actor_name="busy", queue_name="busy", priority=0, options={})
    busy = probe.broker.get_actor("busy")
    worker = run_queue.RunWorker(
        probe.broker, queues={"busy"}, worker_timeout=run_queue.POLL_MS, worker_threads=1
    )
    worker.queue_prefetch = 2
    worker.start()
    try:
        busy.send(1.0)
        busy.send(2.0)
        assert started.wait(timeout=5)
        deadline = time.monotonic() + 5
        while worker.work_queue.qsize() < 1 and time.monotonic() < deadline:
            time.sleep(0.02)  # the consumer has fetched the second run too
        stopping = threading.Thread(target=worker.stop, kwargs={"timeout": 30_000})
        stopping.start()
        time.sleep(0.3)
    finally:
        release.set()
    stopping.join(timeout=30)

    assert ran == [1.0], "the slot started a run while its worker was stopping"
    namespace = probe.broker.namespace
    queued = probe.broker.client.lrange(f"{namespace}:busy", 0, -1)
    stored = probe.broker.client.hvals(f"{namespace}:busy.msgs")
    assert len(queued) == 1 and len(stored) == 1, (queued, stored)
    assert json.loads(stored[0])["args"] == [2.0]
