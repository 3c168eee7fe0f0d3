"""Runs through the real HTTP stack: uvicorn, the real Claude CLI, the scripted model."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from promptmgr.models import Conversation, Run
from tests.helpers import (
    SLOW_TEXT,
    WAIT_RULE,
    allow_in_workspace,
    kill_the_cli,
    login_client,
    make_project,
    processes_in,
    read_sse,
    run_workdir,
    script,
    start_run,
    use_fake_cli,
    wait_command,
    wait_until,
)

pytestmark = pytest.mark.e2e


def test_streamed_text_reaches_the_sse_client(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "Hello from the scripted model, streamed."}))
    events = read_sse(client, started["events_url"])
    names = [e.event for e in events]
    assert names[0] == "prompt"
    assert "session" in names
    streamed = "".join(e.data["text"] for e in events if e.event == "text_delta")
    assert streamed == "Hello from the scripted model, streamed."
    [final] = [e for e in events if e.event == "assistant_text"]
    assert final.data["html"] == "<p>Hello from the scripted model, streamed.</p>\n"
    [result] = [e for e in events if e.event == "result"]
    assert result.data["cost_usd"] > 0 and result.data["num_turns"] == 1
    assert [e.data["status"] for e in events if e.event == "done"] == ["completed"]
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    run = Run.objects.get(pk=started["run_id"])
    assert run.status == "completed" and run.exit_code == 0 and run.cost_usd and run.duration_ms is not None
    # The database keeps the history without the deltas the complete text repeats.
    kept = [e.event for e in events if e.event != "text_delta"]
    wait_until(lambda: run.events.count() == len(kept), timeout=5, what="events stored in the database")
    assert list(run.events.values_list("event", flat=True)) == kept


def test_second_prompt_resumes_the_claude_session(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    first_prompt = script({"text": "First answer."})
    first = start_run(client, project.pk, first_prompt)
    first_events = read_sse(client, first["events_url"])
    [session] = [e.data["session_id"] for e in first_events if e.event == "session"]
    conversation = Conversation.objects.get(pk=first["conversation_id"])
    assert conversation.claude_session_id == session

    second = start_run(client, project.pk, script({"quote_earlier_prompts": True}), first["conversation_id"])
    events = read_sse(client, second["events_url"])
    [text] = [e.data["text"] for e in events if e.event == "assistant_text"]
    assert "Earlier prompts: " in text
    assert json.loads(text.split("Earlier prompts: ", 1)[1]) == [first_prompt]
    assert events[-1].data["status"] == "completed"


def test_cancel_kills_the_cli_and_every_child(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(SLOW_TEXT))
    read_sse(client, started["events_url"], until=lambda e: e.event == "text_delta")
    workspace = run_workdir(started["run_id"])
    assert processes_in(workspace), "the CLI should be running in the workspace"

    response = client.post(f"/api/runs/{started['run_id']}/cancel")
    assert response.status_code == 202, response.text
    events = read_sse(client, started["events_url"])
    assert events[-1].data == {"status": "cancelled"}
    assert processes_in(workspace) == []
    run = Run.objects.get(pk=started["run_id"])
    assert run.status == "cancelled" and run.error == "Cancelled by the user."
    assert client.post(f"/api/runs/{started['run_id']}/cancel").status_code == 409


def test_a_cli_that_dies_gives_a_clear_error_and_a_failed_run(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(SLOW_TEXT))
    read_sse(client, started["events_url"], until=lambda e: e.event == "text_delta")
    kill_the_cli(started["run_id"])

    events = read_sse(client, started["events_url"])
    errors = [e.data["message"] for e in events if e.event == "error"]
    assert any("exited with code -9 before finishing the turn" in m for m in errors)
    assert events[-1].data == {"status": "failed"}
    assert Run.objects.get(pk=started["run_id"]).status == "failed"
    assert processes_in(run_workdir(started["run_id"])) == []


def test_json_that_is_not_shaped_like_stream_json_is_reported_as_garbage(
    app_server: Any, alice: Any, settings: Any, tmp_path: Path
) -> None:
    use_fake_cli(
        settings,
        tmp_path,
        '#!/bin/sh\necho \'{"type": "assistant", "message": {"content": [1]}}\'\nexit 0\n',
        "odd-claude",
    )
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, "hello")
    events = read_sse(client, started["events_url"])
    errors = [e.data["message"] for e in events if e.event == "error"]
    assert (
        'Claude Code printed a line that is not stream-json: {"type": "assistant", "message": {"content": [1]}}'
        in errors
    )
    assert events[-1].data == {"status": "failed"}
    assert "Could not start Claude Code" not in Run.objects.get(pk=started["run_id"]).error


def test_a_cli_that_prints_garbage_fails_the_run_with_the_garbage_shown(
    app_server: Any, alice: Any, settings: Any, tmp_path: Path
) -> None:
    use_fake_cli(
        settings,
        tmp_path,
        "#!/bin/sh\necho 'Segmentation fault (not json)'\necho 'oops' >&2\nexit 3\n",
        "broken-claude",
    )
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, "hello")
    events = read_sse(client, started["events_url"])
    errors = [e.data["message"] for e in events if e.event == "error"]
    assert "Claude Code printed a line that is not stream-json: Segmentation fault (not json)" in errors
    assert events[-1].data == {"status": "failed"}
    run = Run.objects.get(pk=started["run_id"])
    assert run.exit_code == 3
    assert "exited with code 3" in run.error and "oops" in run.stderr_tail


def test_reconnect_with_last_event_id_gets_exactly_the_missing_events(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "y" * 60, "pace_ms": 20, "chunk_chars": 2}))
    url = started["events_url"]
    # Drop the connection mid-run, as a flaky network would, then resume.
    head = read_sse(client, url, until=lambda e: e.event == "text_delta" and e.data["text"] == "yy")
    tail = read_sse(client, url, last_event_id=head[-1].id)
    assert tail[0].id == head[-1].id + 1
    everything = read_sse(client, url)
    assert [(e.id, e.event, e.data) for e in head + tail] == [(e.id, e.event, e.data) for e in everything]
    # The query-string form works too, for clients that cannot set headers.
    last_three = read_sse(client, f"{url}?last_event_id={everything[-4].id}")
    assert [e.id for e in last_three] == [e.id for e in everything[-3:]]


def test_a_multi_megabyte_line_does_not_break_the_stream(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    big = {"text": "0123456789", "repeat": 300_000, "chunk_chars": 3_000_000}
    started = start_run(client, project.pk, script(big, {"text": "still streaming"}))
    events = read_sse(client, started["events_url"], timeout=120)
    streamed = "".join(e.data["text"] for e in events if e.event == "text_delta")
    assert streamed.startswith("0123456789" * 300_000)
    assert events[-1].data == {"status": "completed"}


def test_the_read_timeout_path_emits_a_question_found_only_in_the_redis_cache(
    app_server: Any, alice: Any
) -> None:
    import asyncio

    from askuser import live

    project = make_project(owner=alice)
    allow_in_workspace(project, WAIT_RULE)
    client = login_client(app_server, "alice", "alice-password")
    quiet = {"command": wait_command(6), "description": "wait"}
    prompt = script({"tool_use": {"name": "Bash", "input": quiet}}, {"text": "ok"})
    started = start_run(client, project.pk, prompt)
    run_id = started["run_id"]
    read_sse(client, started["events_url"], until=lambda e: e.event == "tool_use")
    question = {
        "question_id": "cache-only-question",
        "source": "mcp",
        "expires_at": "2999-01-01T00:00:00+00:00",
        "timeout": 300,
        "questions": [{"question": "Cached?", "header": "", "options": [], "multiSelect": False}],
    }
    # Written only to the cache: nothing pushes it, so only the 2-second check can find it.
    asyncio.run(live.question_cache_put(run_id, question, ttl=60))
    found = read_sse(client, started["events_url"], until=lambda e: e.event == "ask_user_question")
    assert found[-1].data == question
    events = read_sse(client, started["events_url"])
    assert [e.event for e in events].count("ask_user_question") == 1


def test_the_cli_environment_holds_none_of_the_servers_secrets(
    app_server: Any, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_KEY", "server-secret-key-must-not-leak")
    monkeypatch.setenv("DATABASE_URL", "postgres://user:db-password-must-not-leak@db/app")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-must-not-leak")
    project = make_project(owner=alice)
    allow_in_workspace(project, "Bash(env)")
    client = login_client(app_server, "alice", "alice-password")
    prompt = script(
        {"tool_use": {"name": "Bash", "input": {"command": "env", "description": "env"}}}, {"text": "ok"}
    )
    started = start_run(client, project.pk, prompt)
    events = read_sse(client, started["events_url"])
    [result] = [e.data["content"] for e in events if e.event == "tool_result"]
    assert "PATH=" in result and "HOME=" in result
    for secret in (
        "server-secret-key",
        "db-password",
        "aws-secret",
        "DATABASE_URL",
        "DJANGO_SETTINGS_MODULE",
    ):
        assert secret not in result


def test_events_of_a_run_never_mix_into_another_runs_stream(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    runs = [start_run(client, project.pk, script({"text": f"run number {i}"})) for i in range(2)]
    results: dict[int, list[Any]] = {}

    def read(index: int) -> None:
        results[index] = read_sse(
            login_client(app_server, "alice", "alice-password"), runs[index]["events_url"]
        )

    threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for i in range(2):
        texts = [e.data["text"] for e in results[i] if e.event == "assistant_text"]
        assert texts == [f"run number {i}"]
    wait_until(lambda: not Run.objects.active().exists(), timeout=10, what="runs to end")
    time.sleep(0)


def test_any_worker_serves_events_and_cancels_a_run_another_worker_owns(
    app_server: Any, alice: Any, settings: Any
) -> None:
    from tests.conftest import LiveServer
    from tests.helpers import free_port

    # It only accepts, streams and relays: the run is app_server's.
    settings.RUN_WORKER = "off"
    other_worker = LiveServer(free_port())
    other_worker.start()
    try:
        project = make_project(owner=alice)
        owner_side = login_client(app_server, "alice", "alice-password")
        started = start_run(owner_side, project.pk, script(SLOW_TEXT))
        # The second worker has no local task for this run: only Redis connects them.
        elsewhere = login_client(other_worker, "alice", "alice-password")
        read_sse(elsewhere, started["events_url"], until=lambda e: e.event == "text_delta")
        assert elsewhere.post(f"/api/runs/{started['run_id']}/cancel").status_code == 202
        events = read_sse(elsewhere, started["events_url"])
        assert events[-1].data == {"status": "cancelled"}
    finally:
        other_worker.stop()
