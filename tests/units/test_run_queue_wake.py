"""An idle queue worker takes a sent run at once: the send wakes it (``WakingRedisBroker``),
and its idle run slots wait for a run without waking every poll (``RunWorker``).

Dramatiq's Redis consumer polls; here an idle one parks on a wake list between looks, and
a send pushes to it. Real Redis; the actor only records that it ran.
"""

from __future__ import annotations

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
