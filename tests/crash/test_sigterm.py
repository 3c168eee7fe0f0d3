"""SIGTERM during a run: every open stream ends with a closing event, nothing answers 500,
no process of the run is left, and the server is gone within 5 seconds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from promptmgr.models import Run, RunStatus
from promptmgr.runner import MSG_SHUTDOWN
from tests.crash.conftest import ServerProcess
from tests.crash.test_killed_owner import alive, waiting_run
from tests.helpers import SSEEvent, make_project, read_sse, submit_answer

pytestmark = pytest.mark.e2e

StartServer = Callable[..., ServerProcess]
SHUTDOWN_LIMIT = 5.0


class Watcher:
    """A browser's stream of a run, read to its end in a thread of its own."""

    def __init__(self, client: httpx.Client, run_id: int) -> None:
        self.events: list[SSEEvent] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, args=(client, run_id), daemon=True)
        self._thread.start()

    def _read(self, client: httpx.Client, run_id: int) -> None:
        def keep(event: SSEEvent) -> bool:
            self.events.append(event)
            return event.event in ("done", "reconnect")

        try:
            read_sse(client, f"/api/runs/{run_id}/events", until=keep, timeout=60)
        except BaseException as exc:  # the end of the body is what the test looks at
            self.error = exc

    def join(self) -> list[SSEEvent]:
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the stream never ended"
        return self.events


def test_sigterm_ends_every_stream_with_a_closing_event_and_the_server_within_5_seconds(
    start_server: StartServer, dora: Any
) -> None:
    project = make_project(owner=dora, engine="cli")
    # One run slot: once its own run goes, the queue's next run can only go elsewhere.
    stopping = start_server(RUN_WORKER_CONCURRENCY="1")
    own = waiting_run(stopping, project)
    elsewhere = start_server()
    # A run another server owns, watched through the one that stops.
    foreign = waiting_run(elsewhere, make_project(owner=dora, engine="cli"))
    own_stream = Watcher(stopping.login("dora"), own["run_id"])
    foreign_stream = Watcher(stopping.login("dora"), foreign["run_id"])
    time.sleep(1)  # both streams are open and waiting

    took = stopping.terminate()

    assert took <= SHUTDOWN_LIMIT, f"the shutdown took {took:.2f}s; the server said:\n{stopping.said()}"
    own_events = own_stream.join()
    assert (own_events[-2].event, own_events[-1].event) == ("run_status", "done")
    assert own_events[-1].data == {"status": "cancelled"}
    foreign_events = foreign_stream.join()
    assert foreign_events[-1].event == "reconnect"
    assert foreign_events[-1].data["reason"] == "shutdown"
    run = Run.objects.get(pk=own["run_id"])
    assert (run.status, run.error) == (RunStatus.CANCELLED, MSG_SHUTDOWN)
    assert alive(own["pids"]) == []
    # The other server's run goes on untouched.
    assert Run.objects.get(pk=foreign["run_id"]).status == RunStatus.WAITING_FOR_USER
    log = stopping.log.read_text()
    assert " 500 " not in log and "Traceback" not in log, log[-3000:]
    print(f"\nSIGTERM -> server exited in {took:.2f}s")


def test_sigterm_ends_a_long_poll_held_for_another_servers_run_at_once_and_loses_no_answer(
    start_server: StartServer, dora: Any
) -> None:
    owner = start_server()
    run = waiting_run(owner, make_project(owner=dora, engine="cli"))
    stopping = start_server()
    with ThreadPoolExecutor(max_workers=1) as pool:
        # Behind one address, any web worker may take an MCP server's poll: this one did.
        held = pool.submit(
            httpx.get,
            f"{stopping.url}/api/askuser/poll-answer",
            params={"question_id": run["question_id"]},
            headers={"Authorization": f"Bearer {run['token']}"},
            timeout=60,
        )
        time.sleep(1)  # the poll waits for the answer

        took = stopping.terminate()

        assert took <= SHUTDOWN_LIMIT, f"the shutdown took {took:.2f}s; the server said:\n{stopping.said()}"
        # "Still waiting": the MCP server polls again, through a worker that is up.
        reply = held.result(timeout=30)
    assert (reply.status_code, reply.json()["status"]) == (202, "waiting"), reply.text
    # The answer is not taken by the poll that ended: the run's own poll receives it.
    client = owner.login("dora")
    assert submit_answer(client, run["question_id"], selectedOptions=[0]).status_code == 200
    events = read_sse(client, f"/api/runs/{run['run_id']}/events", timeout=60)
    assert events[-1].data == {"status": "completed"}
    assert Run.objects.get(pk=run["run_id"]).status == RunStatus.COMPLETED
    print(f"\nSIGTERM with a long-poll held -> server exited in {took:.2f}s")
