"""Runs on the SDK engine share the supervisor's lifecycle: streaming, resume, limits,
cancel with nothing left running, failures, and the allowlisted environment."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from promptmgr.models import Conversation, Run
from promptmgr.processes import live_processes
from tests.helpers import (
    SLOW_TEXT,
    allow_in_workspace,
    login_client,
    make_project,
    processes_in,
    read_sse,
    run_workdir,
    script,
    start_run,
    use_fake_cli,
    wait_until,
)

pytestmark = pytest.mark.e2e


def test_streamed_text_result_and_session_reach_the_browser(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice, engine="sdk")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "Hello from the SDK engine, streamed."}))
    events = read_sse(client, started["events_url"])
    names = [e.event for e in events]
    assert names[:4] == ["prompt", "run_status", "run_status", "session"]
    streamed = "".join(e.data["text"] for e in events if e.event == "text_delta")
    assert streamed == "Hello from the SDK engine, streamed."
    [final] = [e for e in events if e.event == "assistant_text"]
    assert final.data["html"] == "<p>Hello from the SDK engine, streamed.</p>\n"
    [result] = [e for e in events if e.event == "result"]
    assert result.data["cost_usd"] > 0 and result.data["num_turns"] == 1
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    run = Run.objects.get(pk=started["run_id"])
    assert (run.engine, run.status, run.exit_code) == ("sdk", "completed", 0)
    assert run.cost_usd and run.duration_ms is not None
    # The database keeps the history without the deltas the complete text repeats.
    kept = [e.event for e in events if e.event != "text_delta"]
    wait_until(lambda: run.events.count() == len(kept), timeout=5, what="events stored in the database")
    assert list(run.events.values_list("event", flat=True)) == kept
    assert processes_in(run_workdir(started["run_id"])) == []


def test_second_prompt_resumes_the_claude_session(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice, engine="sdk")
    client = login_client(app_server, "alice", "alice-password")
    first_prompt = script({"text": "First answer."})
    first = start_run(client, project.pk, first_prompt)
    [session] = [e.data["session_id"] for e in read_sse(client, first["events_url"]) if e.event == "session"]
    assert Conversation.objects.get(pk=first["conversation_id"]).claude_session_id == session

    second = start_run(client, project.pk, script({"quote_earlier_prompts": True}), first["conversation_id"])
    events = read_sse(client, second["events_url"])
    [text] = [e.data["text"] for e in events if e.event == "assistant_text"]
    assert json.loads(text.split("Earlier prompts: ", 1)[1]) == [first_prompt]
    assert events[-1].data == {"status": "completed"}


# A Claude Code that ignores SIGTERM: tests/runs/test_cancel_reaps_the_tree.py, for both engines.


def test_the_run_stops_at_the_maximum_duration(app_server: Any, alice: Any, settings: Any) -> None:
    settings.RUN_MAX_DURATION = 3
    project = make_project(owner=alice, engine="sdk")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(SLOW_TEXT))
    events = read_sse(client, started["events_url"], timeout=30)
    assert events[-1].data == {"status": "timed_out"}
    errors = [e.data["message"] for e in events if e.event == "error"]
    assert errors == ["Stopped: the run exceeded the maximum duration of 3 s."]
    assert processes_in(run_workdir(started["run_id"])) == []


def test_a_cli_that_dies_gives_a_clear_error_and_a_failed_run(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice, engine="sdk")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(SLOW_TEXT))
    read_sse(client, started["events_url"], until=lambda e: e.event == "text_delta")
    # The CLI is the child of the guardian that leads the run's process group (processes.guarded).
    [guardian] = [p for p in processes_in(run_workdir(started["run_id"])) if os.getpgid(p) == p]
    [cli_pid] = [p.pid for p in live_processes() if p.ppid == guardian]
    os.kill(cli_pid, signal.SIGKILL)

    events = read_sse(client, started["events_url"])
    errors = [e.data["message"] for e in events if e.event == "error"]
    assert any("exited with code -9 before finishing the turn" in m for m in errors)
    assert events[-1].data == {"status": "failed"}
    assert processes_in(run_workdir(started["run_id"])) == []


def test_bypass_permissions_is_refused_with_a_clear_error(app_server: Any, alice: Any) -> None:
    # The API and admin refuse this combination; a row written some other way still never runs it.
    project = make_project(owner=alice, engine="sdk", permission_mode="bypassPermissions")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "never"}))
    events = read_sse(client, started["events_url"])
    assert events[-1].data == {"status": "failed"}
    assert "cannot run in bypassPermissions mode" in Run.objects.get(pk=started["run_id"]).error


def test_the_cli_environment_holds_none_of_the_servers_secrets(
    app_server: Any, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # claude-agent-sdk's own transport would pass the whole server environment on.
    monkeypatch.setenv("SECRET_KEY", "server-secret-key-must-not-leak")
    monkeypatch.setenv("DATABASE_URL", "postgres://user:db-password-must-not-leak@db/app")
    project = make_project(owner=alice, engine="sdk")
    allow_in_workspace(project, "Bash(env)")
    client = login_client(app_server, "alice", "alice-password")
    prompt = script({"tool_use": {"name": "Bash", "input": {"command": "env", "description": "env"}}})
    events = read_sse(client, start_run(client, project.pk, prompt)["events_url"])
    [result] = [e.data["content"] for e in events if e.event == "tool_result"]
    assert "CLAUDE_CODE_ENTRYPOINT=sdk-py" in result and "HOME=" in result
    for secret in ("server-secret-key", "db-password", "DATABASE_URL", "DJANGO_SETTINGS_MODULE"):
        assert secret not in result


def test_a_cli_that_fails_to_start_fails_the_run_with_its_stderr(
    app_server: Any, alice: Any, settings: Any, tmp_path: Path
) -> None:
    use_fake_cli(
        settings,
        tmp_path,
        "#!/bin/sh\necho 'Segmentation fault (not json)'\necho 'oops' >&2\nexit 3\n",
        "broken-claude",
    )
    project = make_project(owner=alice, engine="sdk")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, "hello")
    events = read_sse(client, started["events_url"])
    assert events[-1].data == {"status": "failed"}
    run = Run.objects.get(pk=started["run_id"])
    assert run.exit_code == 3
    assert "exited with code 3 before finishing the turn" in run.error and "oops" in run.stderr_tail


def test_a_multi_megabyte_line_does_not_break_the_stream(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice, engine="sdk")
    client = login_client(app_server, "alice", "alice-password")
    big = {"text": "0123456789", "repeat": 300_000, "chunk_chars": 3_000_000}
    started = start_run(client, project.pk, script(big, {"text": "still streaming"}))
    events = read_sse(client, started["events_url"], timeout=120)
    streamed = "".join(e.data["text"] for e in events if e.event == "text_delta")
    assert streamed.startswith("0123456789" * 300_000)
    assert events[-1].data == {"status": "completed"}
