"""The server that owns a run dies by kill -9 while Claude waits for an answer.

None of the run's processes outlive it; a restarted server fails the run at once, with
everything its worker would have cleaned up; the user can start a new run; the old
question's answer is refused (410). A second server that is alive all along refuses the
answer too, before any sweep of its own ran. Every Redis key left has a TTL.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings

from askuser.models import PermissionRequest, PermissionStatus, Question, QuestionStatus
from promptmgr.models import Run, RunStatus
from promptmgr.processes import live_processes
from promptmgr.recovery import MSG_ORPHANED
from tests.crash.conftest import ServerProcess
from tests.helpers import (
    ask,
    make_project,
    next_question,
    processes_in,
    read_sse,
    run_workdir,
    script,
    start_run,
    submit_answer,
    wait_until,
)

pytestmark = pytest.mark.e2e

StartServer = Callable[..., ServerProcess]


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie has finished)."""
    running = {process.pid for process in live_processes()}
    return [pid for pid in pids if pid in running]


def keys_without_ttl(redis_url: str) -> list[str]:
    """Keys that would stay for ever; the run queue's own (Dramatiq's bookkeeping, which it
    empties itself as messages are acknowledged) are not the app's to expire."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    return [
        key
        for key in client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}:*")
        if client.ttl(key) == -1 and key.split(":")[2] != "queue"
    ]


def waiting_run(server: ServerProcess, project: Any) -> dict[str, Any]:
    """A run waiting for the answer to its question, with its processes and its secrets."""
    client = server.login("dora")
    started = start_run(client, project.pk, script(ask("Deploy now?", ["Yes", "No"])))
    question = next_question(client, started["events_url"])
    workdir = run_workdir(started["run_id"])
    # The guardian, the CLI and the ask-user MCP server, which waits for the answer.
    wait_until(lambda: len(processes_in(workdir)) >= 3, timeout=15, what="the run's processes")
    [config] = list(Path(settings.RUN_SECRETS_DIR).glob(f"run-{started['run_id']}-*/ask-user.json"))
    return {
        "run_id": started["run_id"],
        "question_id": question.data["question_id"],
        "pids": processes_in(workdir),
        "config": config,
        "token": json.loads(config.read_text())["relayToken"],
    }


def test_a_run_whose_server_was_killed_leaves_nothing_behind_and_fails_at_the_restart(
    start_server: StartServer, dora: Any, redis_url: str
) -> None:
    project = make_project(owner=dora, engine="cli")
    server = start_server()
    run = waiting_run(server, project)
    # A live run's keys get a TTL within a heartbeat too, should it never end.
    wait_until(lambda: keys_without_ttl(redis_url) == [], timeout=10, what="every key to have a TTL")

    server.kill9()
    killed_at = time.monotonic()
    wait_until(lambda: not alive(run["pids"]), timeout=10, what="every process of the run to end")
    processes_gone = time.monotonic() - killed_at

    restarted = start_server(port=server.port)
    restart_took = time.monotonic() - killed_at - processes_gone
    wait_until(
        lambda: Run.objects.get(pk=run["run_id"]).status == RunStatus.FAILED,
        timeout=30,
        what="the run to be failed after the restart",
    )
    failed_after = time.monotonic() - killed_at - processes_gone
    ended = Run.objects.get(pk=run["run_id"])
    assert ended.error == MSG_ORPHANED
    assert Question.objects.get(question_id=run["question_id"]).status == QuestionStatus.CANCELLED

    client = restarted.login("dora")
    refused = submit_answer(client, run["question_id"], selectedOptions=[0])
    assert refused.status_code == 410, refused.text
    # Its stream ends, its secrets are gone and its token no longer opens the relay.
    events = read_sse(client, f"/api/runs/{run['run_id']}/events", timeout=20)
    assert events[-1].data == {"status": "failed"}
    assert not run["config"].parent.exists()
    relay = client.post(
        "/api/askuser/relay-question",
        json={"question": "Still there?", "header": "", "options": [], "multiSelect": False},
        headers={"Authorization": f"Bearer {run['token']}"},
    )
    # Revoked: still recognised as the token of a run that ended, and refused as such.
    assert (relay.status_code, relay.json()["code"]) == (410, "run_finished"), relay.text

    # The slot was released: Dora can start again, and the new run completes.
    again = start_run(client, project.pk, script({"text": "back to work"}))
    assert read_sse(client, again["events_url"], timeout=60)[-1].data == {"status": "completed"}
    assert keys_without_ttl(redis_url) == []
    print(
        f"\nkill -9 -> processes gone {processes_gone:.2f}s; restart {restart_took:.2f}s; "
        f"run failed {failed_after:.2f}s after the restart began"
    )


def test_an_answer_sent_to_a_live_server_for_a_dead_servers_run_is_refused_at_once(
    start_server: StartServer, dora: Any
) -> None:
    project = make_project(owner=dora, engine="cli")
    owner = start_server()
    # A second server whose periodic sweep will not come during this test, and which runs
    # nothing itself (RUN_WORKER=off): the run is the owner's.
    other = start_server(RUN_SWEEP_SECONDS="3600", RUN_WORKER="off")
    run = waiting_run(owner, project)
    client = other.login("dora")

    owner.kill9()
    refused = submit_answer(client, run["question_id"], selectedOptions=[0])
    assert refused.status_code == 410, refused.text
    assert refused.json()["code"] == "run_finished"
    ended = Run.objects.get(pk=run["run_id"])
    assert (ended.status, ended.error) == (RunStatus.FAILED, MSG_ORPHANED)
    assert Question.objects.get(question_id=run["question_id"]).status == QuestionStatus.CANCELLED
    wait_until(lambda: not alive(run["pids"]), timeout=10, what="every process of the run to end")
    assert os.path.exists(run["config"]) is False


def test_a_decision_sent_to_a_live_server_for_a_dead_servers_run_is_refused_at_once(
    start_server: StartServer, dora: Any
) -> None:
    project = make_project(owner=dora, engine="cli", permission_mode="default")
    owner = start_server()
    other = start_server(RUN_SWEEP_SECONDS="3600", RUN_WORKER="off")
    client = owner.login("dora")
    bash = {"tool_use": {"name": "Bash", "input": {"command": "echo hi > out.txt", "description": "Write"}}}
    started = start_run(client, project.pk, script(bash, {"text": "done"}))
    card = read_sse(client, started["events_url"], until=lambda e: e.event == "permission_request")[-1]

    owner.kill9()
    refused = other.login("dora").post(
        "/api/askuser/submit-decision", json={"request_id": card.data["request_id"], "decision": "allow"}
    )
    assert (refused.status_code, refused.json()["code"]) == (410, "run_finished"), refused.text
    ended = Run.objects.get(pk=started["run_id"])
    assert (ended.status, ended.error) == (RunStatus.FAILED, MSG_ORPHANED)
    request = PermissionRequest.objects.get(request_id=card.data["request_id"])
    assert (request.status, request.decided_by) == (PermissionStatus.CANCELLED, None)
