"""Who may start, watch, read and cancel runs; limits; CSRF on browser posts."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from core import redis as core_redis
from promptmgr import live
from promptmgr.models import Run
from tests.helpers import SLOW_TEXT, login_client, make_project, read_sse, script, start_run, wait_until

pytestmark = pytest.mark.e2e


def test_another_users_run_events_status_and_cancel_are_404(app_server: Any, alice: Any, bob: Any) -> None:
    project = make_project(owner=alice)
    owner = login_client(app_server, "alice", "alice-password")
    started = start_run(owner, project.pk, script(SLOW_TEXT))
    run_id = started["run_id"]
    other = login_client(app_server, "bob", "bob-password")
    assert other.get(f"/api/runs/{run_id}/events").status_code == 404
    assert other.get(f"/api/runs/{run_id}").status_code == 404
    assert other.post(f"/api/runs/{run_id}/cancel").status_code == 404
    assert other.get(f"/api/conversations/{started['conversation_id']}").status_code == 404
    assert other.get(f"/api/projects/{project.pk}/conversations").status_code == 404
    assert other.post(f"/api/projects/{project.pk}/runs", json={"prompt": "hi"}).status_code == 404
    # A run id that does not exist looks exactly the same.
    assert other.get("/api/runs/999999").status_code == 404
    assert Run.objects.get(pk=run_id).is_active
    assert owner.post(f"/api/runs/{run_id}/cancel").status_code == 202
    read_sse(owner, started["events_url"])


def test_a_project_member_can_watch_the_run(app_server: Any, alice: Any, bob: Any) -> None:
    project = make_project(owner=alice, members=(bob,))
    owner = login_client(app_server, "alice", "alice-password")
    started = start_run(owner, project.pk, script({"text": "shared"}))
    member = login_client(app_server, "bob", "bob-password")
    events = read_sse(member, started["events_url"])
    assert events[-1].data == {"status": "completed"}
    assert member.get(f"/api/runs/{started['run_id']}").json()["status"] == "completed"


def test_anonymous_requests_are_refused(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    owner = login_client(app_server, "alice", "alice-password")
    started = start_run(owner, project.pk, script({"text": "x"}))
    read_sse(owner, started["events_url"])
    anonymous = httpx.Client(base_url=app_server.url)
    assert anonymous.get(f"/api/runs/{started['run_id']}/events").status_code == 401
    assert anonymous.get(f"/api/runs/{started['run_id']}").status_code == 401


def test_posts_without_csrf_are_403_and_start_nothing(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    del client.headers["X-CSRFToken"]
    assert client.post(f"/api/projects/{project.pk}/runs", json={"prompt": "hi"}).status_code == 403
    assert not Run.objects.exists()
    with_token = login_client(app_server, "alice", "alice-password")
    started = start_run(with_token, project.pk, script(SLOW_TEXT))
    assert client.post(f"/api/runs/{started['run_id']}/cancel").status_code == 403
    assert Run.objects.get(pk=started["run_id"]).is_active
    with_token.post(f"/api/runs/{started['run_id']}/cancel")
    read_sse(with_token, started["events_url"])


def test_empty_prompt_is_422_with_a_clear_message(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    response = client.post(f"/api/projects/{project.pk}/runs", json={"prompt": "   "})
    assert response.status_code == 422
    assert response.json()["detail"] == "Type a prompt first."
    assert not Run.objects.exists()


def test_per_user_cap_answers_429_and_leaves_no_run_behind(
    app_server: Any, alice: Any, settings: Any
) -> None:
    settings.RUNS_PER_USER = 1
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    first = start_run(client, project.pk, script(SLOW_TEXT))
    refused = client.post(f"/api/projects/{project.pk}/runs", json={"prompt": "another"})
    assert refused.status_code == 429
    assert refused.json()["detail"] == "You already have 1 runs going; wait for one to finish or cancel one."
    assert Run.objects.count() == 1
    client.post(f"/api/runs/{first['run_id']}/cancel")
    read_sse(client, first["events_url"])
    # The slot is free again once the run has ended.
    second = start_run(client, project.pk, script({"text": "now it fits"}))
    assert read_sse(client, second["events_url"])[-1].data == {"status": "completed"}


def test_a_slot_still_held_by_a_run_that_ended_is_freed_at_the_cap(
    app_server: Any, alice: Any, settings: Any
) -> None:
    settings.RUNS_PER_USER = 1
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    first = start_run(client, project.pk, script({"text": "done"}))
    read_sse(client, first["events_url"])
    slots = core_redis.get_redis()
    wait_until(lambda: not slots.exists(live.user_runs_key(alice.pk)), timeout=5, what="the slot given back")
    # As if Redis had been unreachable when the run ended: its slot was never given back.
    slots.sadd(live.user_runs_key(alice.pk), first["run_id"])
    slots.sadd(live.active_runs_key(), first["run_id"])

    second = start_run(client, project.pk, script({"text": "it fits"}))
    assert read_sse(client, second["events_url"])[-1].data == {"status": "completed"}


def test_global_cap_answers_429(app_server: Any, alice: Any, bob: Any, settings: Any) -> None:
    settings.RUNS_GLOBAL = 1
    first_project = make_project(owner=alice)
    second_project = make_project(owner=bob, name="Bob's")
    alice_client = login_client(app_server, "alice", "alice-password")
    first = start_run(alice_client, first_project.pk, script(SLOW_TEXT))
    bob_client = login_client(app_server, "bob", "bob-password")
    refused = bob_client.post(f"/api/projects/{second_project.pk}/runs", json={"prompt": "hi"})
    assert refused.status_code == 429
    assert "concurrent runs" in refused.json()["detail"]
    alice_client.post(f"/api/runs/{first['run_id']}/cancel")
    read_sse(alice_client, first["events_url"])


def test_a_second_prompt_while_the_conversation_is_busy_is_409(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    first = start_run(client, project.pk, script(SLOW_TEXT))
    busy = client.post(
        f"/api/projects/{project.pk}/runs",
        json={"prompt": "more", "conversation_id": first["conversation_id"]},
    )
    assert busy.status_code == 409
    client.post(f"/api/runs/{first['run_id']}/cancel")
    read_sse(client, first["events_url"])


def test_idle_timeout_stops_a_silent_cli(app_server: Any, alice: Any, settings: Any) -> None:
    settings.RUN_IDLE_TIMEOUT = 5
    project = make_project(owner=alice)
    from tests.helpers import WAIT_RULE, allow_in_workspace, wait_command

    allow_in_workspace(project, WAIT_RULE)
    client = login_client(app_server, "alice", "alice-password")
    silent = {"command": wait_command(30), "description": "w"}
    prompt = script({"tool_use": {"name": "Bash", "input": silent}}, {"text": "x"})
    started = start_run(client, project.pk, prompt)
    events = read_sse(client, started["events_url"], timeout=40)
    assert events[-1].data == {"status": "timed_out"}
    run = Run.objects.get(pk=started["run_id"])
    assert run.error == "Stopped: Claude Code printed nothing for 5 s."


def test_a_run_whose_worker_died_is_failed_and_its_stream_ends(
    app_server: Any, alice: Any, settings: Any, redis_client: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from core import events as run_events
    from promptmgr.models import Conversation

    settings.SSE_HEARTBEAT_SECONDS = 1
    settings.RUN_SWEEP_SECONDS = 1  # the periodic sweep, not a reader, ends the run
    project = make_project(owner=alice)
    conversation = Conversation.objects.create(project=project, user=alice)
    # What a crashed worker leaves: an active run, some events, no owner key.
    run = Run.objects.create(conversation=conversation, user=alice, prompt="p", status="running")
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(minutes=5))
    run_events.append_event_sync(run.pk, "prompt", {"text": "p"})
    client = login_client(app_server, "alice", "alice-password")
    events = read_sse(client, f"/api/runs/{run.pk}/events", timeout=20)
    assert [e.event for e in events] == ["prompt", "error", "run_status", "done"]
    assert events[-1].data == {"status": "failed"}
    run.refresh_from_db()
    assert run.status == "failed" and run.error == "The worker running this prompt stopped unexpectedly."
    # As after any run, the history is stored before "done" and the "done" row just after.
    wait_until(lambda: run.events.count() == 4, timeout=5, what="the whole history stored")
