"""Runs execute in queue workers (``manage.py runworker``) apart from the web processes
(``RUN_WORKER=off``), which only accept, stream and relay.

A restart of the web tier leaves a running turn and its pending question alive and
answerable; cancel, answers and decisions reach a run whichever process owns it; a
worker killed by kill -9 leaves its run failed, nothing running, and the queue's second
delivery of that run refused (as is a duplicate of a live run): a turn never runs twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from dramatiq.brokers.redis import MAINTENANCE_SCALE, RedisBroker

from askuser.models import Question, QuestionStatus
from core.redis import get_redis, load_instance_uid
from promptmgr import live
from promptmgr.models import Run, RunStatus
from promptmgr.recovery import MSG_ORPHANED
from promptmgr.run_queue import QUEUE_NAME, RunQueue
from promptmgr.runner import MSG_DUPLICATE
from tests.crash.conftest import ServerProcess, WorkerProcess
from tests.crash.test_killed_owner import alive, waiting_run
from tests.helpers import (
    QUOTE,
    SLOW_TEXT,
    ask,
    make_project,
    processes_in,
    read_sse,
    run_workdir,
    script,
    start_run,
    submit_answer,
    tool_results,
    wait_until,
)

pytestmark = pytest.mark.e2e

StartServer = Callable[..., ServerProcess]
StartWorker = Callable[..., WorkerProcess]
DUPLICATE_LINE = MSG_DUPLICATE.split("%s", 1)[1]


def web_and_worker(
    start_server: StartServer, start_worker: StartWorker
) -> tuple[ServerProcess, WorkerProcess]:
    """An accept-only web server and a queue worker whose runs' MCP servers reach it."""
    web = start_server(RUN_WORKER="off")
    worker = start_worker(web.url)
    # The keys the servers use carry the database's instance id (the test's own is not it).
    load_instance_uid()
    return web, worker


def owner_pid(run_id: int) -> int | None:
    """The process that holds the run's lease (its worker id is host:pid:nonce)."""
    owner = live.owner_sync(run_id)
    return None if owner is None else int(owner.rsplit(":", 2)[1])


def run_statuses(events: list[Any]) -> list[str]:
    return [e.data["status"] for e in events if e.event == "run_status"]


def send_again(run_id: int) -> None:
    """A second delivery of the run's message, as an at-least-once queue may make."""
    loop = asyncio.new_event_loop()
    try:
        queue = RunQueue(loop)
        queue.send(run_id)
        queue.broker.client.connection_pool.disconnect()
    finally:
        loop.close()


def queue_key(suffix: str = "") -> str:
    """One of the run queue's keys in Dramatiq's layout: the list of waiting message ids,
    or (``.msgs``) every message not yet acknowledged."""
    return f"{live.queue_namespace()}:{QUEUE_NAME}{suffix}"


def redeliver_dead_workers_messages() -> int:
    """Dramatiq's broker maintenance, now rather than by chance: the unacknowledged
    messages of workers whose heartbeat is over a second old go back on the queue.
    Returns how many messages wait in the queue after it."""
    broker = RedisBroker(  # type: ignore[no-untyped-call]
        url=str(settings.REDIS_URL),
        namespace=live.queue_namespace(),
        heartbeat_timeout=1000,
        maintenance_chance=MAINTENANCE_SCALE,
    )
    try:
        broker.do_qsize(QUEUE_NAME)  # any command but ack and nack runs the maintenance
        return int(get_redis().llen(queue_key()))
    finally:
        broker.client.connection_pool.disconnect()


def test_a_web_restart_leaves_the_workers_run_waiting_and_its_question_answerable(
    start_server: StartServer, start_worker: StartWorker, dora: Any
) -> None:
    project = make_project(owner=dora, engine="cli")
    web, worker = web_and_worker(start_server, start_worker)
    run = waiting_run(web, project)
    assert owner_pid(run["run_id"]) == worker.pid
    # The run's lasting processes (the guardian, the CLI, the ask-user server): the CLI
    # may also have a short-lived helper in its directory that ends by itself.
    time.sleep(1)
    lasting = alive(run["pids"])
    assert len(lasting) >= 3, run["pids"]

    took = web.terminate()
    # Nothing of the run lived in the web process: Claude still waits for the answer.
    time.sleep(1)
    assert alive(lasting) == lasting
    assert Run.objects.get(pk=run["run_id"]).status == RunStatus.WAITING_FOR_USER

    restarted = start_server(port=web.port, RUN_WORKER="off")
    client = restarted.login("dora")
    assert Question.objects.get(question_id=run["question_id"]).status == QuestionStatus.PENDING
    answered = submit_answer(client, run["question_id"], selectedOptions=[0])
    assert answered.status_code == 200, answered.text

    events = read_sse(client, f"/api/runs/{run['run_id']}/events", timeout=60)
    assert events[-1].data == {"status": "completed"}
    assert [e.data["answers"] for e in events if e.event == "ask_user_answered"] == [{"Deploy now?": "Yes"}]
    assert Run.objects.get(pk=run["run_id"]).status == RunStatus.COMPLETED
    wait_until(lambda: not alive(run["pids"]), timeout=10, what="the run's processes to end")
    print(f"\nweb SIGTERM took {took:.2f}s; the run went on in worker {worker.pid}")


def test_cancel_answers_and_decisions_reach_a_run_in_another_process(
    start_server: StartServer, start_worker: StartWorker, dora: Any
) -> None:
    web, worker = web_and_worker(start_server, start_worker)
    client = web.login("dora")

    # A question answered through the web process, for Claude in the worker's CLI.
    asking = make_project(owner=dora, engine="cli")
    started = start_run(client, asking.pk, script(ask("Which database?", ["SQLite", "PostgreSQL"]), QUOTE))
    card = read_sse(client, started["events_url"], until=lambda e: e.event == "ask_user_question")[-1]
    assert owner_pid(started["run_id"]) == worker.pid
    assert submit_answer(client, card.data["question_id"], selectedOptions=[1]).status_code == 200
    events = read_sse(client, started["events_url"])
    assert tool_results(events) == [{"text": "User selected: PostgreSQL", "is_error": False}]
    assert events[-1].data == {"status": "completed"}

    # A tool approval decided through the web process.
    approving = make_project(owner=dora, engine="cli", permission_mode="default")
    bash = {"tool_use": {"name": "Bash", "input": {"command": "echo hi > out.txt", "description": "Write"}}}
    started = start_run(client, approving.pk, script(bash, {"text": "done"}))
    request = read_sse(client, started["events_url"], until=lambda e: e.event == "permission_request")[-1]
    assert owner_pid(started["run_id"]) == worker.pid
    decided = client.post(
        "/api/askuser/submit-decision", json={"request_id": request.data["request_id"], "decision": "allow"}
    )
    assert decided.status_code == 200, decided.text
    assert read_sse(client, started["events_url"])[-1].data == {"status": "completed"}
    assert (run_workdir(started["run_id"]) / "out.txt").read_text().strip() == "hi"

    # A cancel sent to the web process stops the worker's CLI.
    slow = start_run(client, asking.pk, script(SLOW_TEXT))
    read_sse(client, slow["events_url"], until=lambda e: e.event == "text_delta")
    assert owner_pid(slow["run_id"]) == worker.pid
    workdir = run_workdir(slow["run_id"])
    assert client.post(f"/api/runs/{slow['run_id']}/cancel").status_code == 202
    assert read_sse(client, slow["events_url"])[-1].data == {"status": "cancelled"}
    assert Run.objects.get(pk=slow["run_id"]).status == RunStatus.CANCELLED
    wait_until(lambda: processes_in(workdir) == [], timeout=10, what="the cancelled run's processes to end")


def test_a_worker_killed_mid_run_leaves_it_failed_and_its_redelivery_never_runs_it_again(
    start_server: StartServer, start_worker: StartWorker, dora: Any
) -> None:
    project = make_project(owner=dora, engine="cli")
    web = start_server(RUN_WORKER="off", RUN_SWEEP_SECONDS="2")
    worker = start_worker(web.url)
    load_instance_uid()
    run = waiting_run(web, project)
    run_id = run["run_id"]
    assert owner_pid(run_id) == worker.pid
    started_at = Run.objects.get(pk=run_id).started_at

    # A duplicate delivery while the run lives: the lease refuses it, the run goes on.
    send_again(run_id)
    wait_until(lambda: DUPLICATE_LINE in worker.output(), timeout=10, what="the duplicate to be refused")
    # Acknowledged: only the running run's own message is still held.
    wait_until(
        lambda: get_redis().hlen(queue_key(".msgs")) == 1, timeout=10, what="the duplicate acknowledged"
    )
    assert Run.objects.get(pk=run_id).status == RunStatus.WAITING_FOR_USER
    assert alive(run["pids"]) == run["pids"]

    worker.kill9()
    wait_until(lambda: not alive(run["pids"]), timeout=10, what="every process of the run to end")
    # The web process's sweep finds the lease's holder gone and fails the run.
    wait_until(
        lambda: Run.objects.get(pk=run_id).status == RunStatus.FAILED, timeout=30, what="the run to be failed"
    )
    assert Run.objects.get(pk=run_id).error == MSG_ORPHANED

    # The killed worker never acknowledged the run's message: the queue delivers it again.
    time.sleep(1.5)  # its broker heartbeat is older than the maintenance's limit
    assert redeliver_dead_workers_messages() >= 1
    again = start_worker(web.url)
    wait_until(lambda: DUPLICATE_LINE in again.output(), timeout=20, what="the redelivery to be refused")
    wait_until(
        lambda: redeliver_dead_workers_messages() == 0, timeout=10, what="the message to be acknowledged"
    )

    ended = Run.objects.get(pk=run_id)
    assert (ended.status, ended.started_at) == (RunStatus.FAILED, started_at)
    assert processes_in(run_workdir(run_id)) == []
    events = read_sse(web.login("dora"), f"/api/runs/{run_id}/events", timeout=20)
    # One start only, then the failure: the turn ran once.
    assert run_statuses(events).count(RunStatus.RUNNING) == 1
    assert events[-1].data == {"status": "failed"}
