"""Switching a project's engine: the workspace follows, and the conversation goes on.

Both engines use the same Claude home and workspace, so a session started on one engine
resumes on the other.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core.tool_names import MCP_ASK_USER as ASK_USER_TOOL
from promptmgr.models import Project, Run
from promptmgr.workspaces import workspace_path
from tests.helpers import SSEEvent, login_client, make_project, read_sse, script, start_run

pytestmark = pytest.mark.e2e


def session_of(events: list[SSEEvent]) -> dict[str, Any]:
    [session] = [e.data for e in events if e.event == "session"]
    return dict(session)


def ask_user_registered(project: Project) -> bool:
    root = workspace_path(project)
    local = json.loads((root / ".claude" / "settings.local.json").read_text())
    listed = ASK_USER_TOOL in local["permissions"]["allow"] and "ask-user" in local["enabledMcpjsonServers"]
    return (root / ".mcp.json").exists() and listed


def earlier_prompts(events: list[SSEEvent]) -> list[str]:
    [text] = [e.data["text"] for e in events if e.event == "assistant_text"]
    return list(json.loads(text.split("Earlier prompts: ", 1)[1]))


def test_switching_engines_through_the_api_keeps_the_conversation(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    first_prompt = script({"text": "On the CLI engine."})
    first = start_run(client, project.pk, first_prompt)
    cli_session = session_of(read_sse(client, first["events_url"]))
    assert {"name": "ask-user", "status": "connected"} in cli_session["mcp_servers"]

    response = client.patch(f"/api/projects/{project.pk}", json={"engine": "sdk"})
    assert response.status_code == 200, response.text
    assert response.json()["engine"] == "sdk"
    assert not ask_user_registered(project)

    second_prompt = script({"quote_earlier_prompts": True})
    second = start_run(client, project.pk, second_prompt, first["conversation_id"])
    events = read_sse(client, second["events_url"])
    sdk_session = session_of(events)
    assert sdk_session["mcp_servers"] == [] and "AskUserQuestion" in sdk_session["tools"]
    assert sdk_session["session_id"] == cli_session["session_id"]
    assert earlier_prompts(events) == [first_prompt]
    assert Run.objects.get(pk=second["run_id"]).engine == "sdk"

    assert client.patch(f"/api/projects/{project.pk}", json={"engine": "cli"}).status_code == 200
    assert ask_user_registered(project)
    third = start_run(client, project.pk, script({"quote_earlier_prompts": True}), first["conversation_id"])
    events = read_sse(client, third["events_url"])
    assert {"name": "ask-user", "status": "connected"} in session_of(events)["mcp_servers"]
    assert earlier_prompts(events) == [first_prompt, second_prompt]
    assert Run.objects.get(pk=third["run_id"]).engine == "cli"


def test_switching_to_sdk_in_the_admin_list_regenerates_the_workspace(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    assert ask_user_registered(project)
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", "root@example.com", "root-password"))
    row = {
        "id": project.pk,
        "engine": "sdk",
        "permission_mode": project.permission_mode,
        "ask_user_timeout": project.ask_user_timeout,
        "ask_user_enabled": "on",
    }
    form = {"form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-MIN_NUM_FORMS": "0", "_save": "Save"}
    response = admin.post("/admin/promptmgr/project/", form | {f"form-0-{k}": v for k, v in row.items()})
    assert response.status_code == 302

    assert not ask_user_registered(project)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "now on the SDK"}))
    events = read_sse(client, started["events_url"])
    assert "AskUserQuestion" in session_of(events)["tools"]
    assert Run.objects.get(pk=started["run_id"]).engine == "sdk"
