"""An idle queue worker takes a sent run at once: the send wakes it (``WakingRedisBroker``),
and its idle run slots wait for a run without waking every poll, and stop waiting the
moment the worker stops (``RunWorker``).

Dramatiq's Redis consumer polls; here an idle one parks on a wake list between looks, and
a send (or a stopping worker's give-back) pushes to it; a stopping worker ends its own
consumers' looks. Real Redis; the actor only records that it ran.
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


def make_broker(namespace: str, url: str) -> run_queue.WakingRedisBroker:
    """A broker on ``namespace`` (each worker process has one of its own)."""
    return run_queue.WakingRedisBroker(
        wake_key=f"{namespace}:wake", url=url, namespace=namespace, middleware=[Retries(max_retries=0)]
    )


def started_worker(
    broker: dramatiq.Broker, queue: str, *, slots: int, prefetch: int | None = None
) -> run_queue.RunWorker:
    """A started run worker on ``queue`` with ``slots`` run slots, as ``RunQueue`` makes one."""
    worker = run_queue.RunWorker(
        broker, queues={queue}, worker_timeout=run_queue.POLL_MS, worker_threads=slots
    )
    if prefetch is not None:
        worker.queue_prefetch = prefetch
    worker.start()
    return worker


def hold_two_runs(
    worker: dramatiq.Worker, actor: dramatiq.Actor[[float], None], started: threading.Event
) -> None:
    """Send runs 1.0 and 2.0 to a one-slot ``worker`` that prefetches two: it runs the first
    (``started``) and holds the second on its work queue."""
    actor.send(1.0)
    actor.send(2.0)
    assert started.wait(timeout=5)
    deadline = time.monotonic() + 5
    while worker.work_queue.qsize() < 1 and time.monotonic() < deadline:
        time.sleep(0.02)  # the consumer has fetched the second run too


@pytest.fixture
def probe(settings: Any) -> Iterator[Probe]:
    """A broker on a namespace of this test's own, and an actor that records that it ran."""
    broker = make_broker(f"{settings.REDIS_KEY_PREFIX}:wake-test-{os.getpid()}", settings.REDIS_URL)
    namespace = broker.namespace
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
    worker = started_worker(probe.broker, "runs", slots=4)
    try:
        assert [thread.timeout for thread in worker.workers] == [4.0] * 4
        assert all(consumer.worker_timeout == run_queue.POLL_MS for consumer in worker.consumers.values())
        time.sleep(0.5)  # every slot waits on the empty work queue
        probe.actor.send(time.monotonic())
        assert probe.ran.wait(timeout=2.0), "the sent run waited out an idle slot's wait"
    finally:
        worker.stop(timeout=10_000)


def test_a_stopping_worker_ends_its_idle_slots_at_once_instead_of_after_their_wait(probe: Probe) -> None:
    worker = started_worker(probe.broker, "runs", slots=4)
    time.sleep(0.5)  # every slot waits on the empty work queue, for SLOT_WAIT_MS (30 s)
    started = time.monotonic()

    worker.stop(timeout=60_000)

    assert time.monotonic() - started < 10, "the stop waited out the idle slots' wait"
    assert not any(thread.is_alive() for thread in worker.workers)


def test_a_parked_look_longer_than_redis_pys_read_timeout_ends_empty_not_in_an_error(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    # redis-py reads with a 5 s timeout by default; a look parked longer must outlast it.
    monkeypatch.setattr(run_queue, "WAKE_WAIT_SECONDS", 6.0)
    started = time.monotonic()

    fetched = probe.broker.do_fetch("runs", 1)

    assert fetched == []
    assert time.monotonic() - started >= 5.9


def test_a_stopping_worker_ends_its_consumers_parked_looks_at_once_and_fetches_nothing_more(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Parked consumers wait long (an idle worker's CPU), so a stop must not wait out a look.
    monkeypatch.setattr(run_queue, "WAKE_WAIT_SECONDS", 60.0)
    worker = started_worker(probe.broker, "runs", slots=2)
    time.sleep(0.5)  # both consumers (the queue's and its delay queue's) have parked
    started = time.monotonic()

    worker.stop(timeout=120_000)

    assert time.monotonic() - started < 4, "the stop waited out the consumers' parked looks"
    assert not any(consumer.is_alive() for consumer in worker.consumers.values())
    # The stop's wake-ups were taken by this broker's own consumers, and none was left on
    # the wake list every worker shares.
    client = probe.broker.client
    assert client.llen(probe.broker._wake_key("runs")) == 0
    assert client.keys(f"{probe.broker._nudge_key}*") == []
    # A run sent after the stop waits on the queue for another worker: nobody fetched it.
    probe.actor.send(time.monotonic())
    assert not probe.ran.wait(timeout=1.0)
    assert client.llen(f"{probe.broker.namespace}:runs") == 1


def test_a_finished_run_is_acknowledged_at_once_not_when_its_consumers_parked_look_ends(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pins Dramatiq's behaviour that the long park relies on: the run slot acknowledges.
    monkeypatch.setattr(run_queue, "WAKE_WAIT_SECONDS", 60.0)
    finished = threading.Event()

    def run(sent: float) -> None:
        time.sleep(0.5)  # meanwhile its consumer, with a slot free, parks again
        finished.set()

    dramatiq.Actor(run, broker=probe.broker, actor_name="slow", queue_name="slow", priority=0, options={})
    worker = started_worker(probe.broker, "slow", slots=2)
    try:
        time.sleep(0.5)  # parked
        probe.broker.get_actor("slow").send(time.monotonic())
        assert finished.wait(timeout=3.0)
        held = f"{probe.broker.namespace}:slow.msgs"
        deadline = time.monotonic() + 3
        while probe.broker.client.hlen(held) and time.monotonic() < deadline:
            time.sleep(0.02)
        # Unacknowledged, a worker killed now would have the run delivered again.
        assert probe.broker.client.hlen(held) == 0, "the run's message waited for the parked look"
    finally:
        worker.stop(timeout=10_000)


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
    worker = started_worker(probe.broker, "busy", slots=1, prefetch=2)
    try:
        hold_two_runs(worker, busy, started)
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


def test_a_run_a_stopping_worker_gives_back_wakes_another_idle_worker_at_once(
    probe: Probe, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The other worker's consumer is parked for far longer than the test waits.
    monkeypatch.setattr(run_queue, "WAKE_WAIT_SECONDS", 60.0)
    release, started = threading.Event(), threading.Event()
    ran: list[tuple[float, threading.Thread]] = []

    def run(sent: float) -> None:
        ran.append((sent, threading.current_thread()))
        started.set()
        release.wait(timeout=30)

    def broker() -> run_queue.WakingRedisBroker:
        # One broker per worker, as each worker process has its own.
        made = make_broker(probe.broker.namespace, settings.REDIS_URL)
        dramatiq.Actor(run, broker=made, actor_name="busy", queue_name="busy", priority=0, options={})
        return made

    first_broker, other_broker = broker(), broker()
    first = started_worker(first_broker, "busy", slots=1, prefetch=2)
    other = None
    try:
        hold_two_runs(first, first_broker.get_actor("busy"), started)
        other = started_worker(other_broker, "busy", slots=1)
        time.sleep(0.5)  # the other worker found nothing and parked
        stopping = threading.Thread(target=first.stop, kwargs={"timeout": 30_000})
        stopping.start()
        time.sleep(0.3)
        release.set()
        stopping.join(timeout=30)
        given_back = time.monotonic()
        deadline = given_back + 5
        while len(ran) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [sent for sent, _thread in ran] == [1.0, 2.0], "the run given back waited for a parked look"
        assert ran[1][1] in other.workers
    finally:
        release.set()
        if other is not None:
            other.stop(timeout=30_000)
        first_broker.close()
        other_broker.close()
