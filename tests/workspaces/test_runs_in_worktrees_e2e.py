"""Runs work in their conversation's worktree: a project cloned from a local bare repository,
the real CLI in acceptEdits mode, the scripted model reading and editing README.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from promptmgr.models import Conversation, Project, Run
from promptmgr.services.git_workspace import MSG_CLONING
from promptmgr.workspaces import CONTEXT_FILE, workspace_path, worktrees_path
from tests.conftest import LiveServer
from tests.helpers import (
    QUOTE,
    login_client,
    read_sse,
    run_workdir,
    script,
    start_run,
    tool_results,
    wait_until,
)
from tests.workspaces.support import README, REPO_CLAUDE_MD, git, status

pytestmark = pytest.mark.e2e

READ = {"tool_use": {"name": "Read", "input": {"file_path": "README.md"}}}
EDIT = {
    "tool_use": {
        "name": "Edit",
        "input": {"file_path": "README.md", "old_string": "status: draft", "new_string": "status: final"},
    }
}


def create_cloned(client: Any, origin: Path, **fields: Any) -> dict[str, Any]:
    """A project created through the API from ``origin``, once its background clone is done."""
    created = client.post("/api/projects", json={"name": "Demo", "git_url": f"file://{origin}", **fields})
    assert created.status_code == 201, created.text
    assert created.json()["workspace_status"] == "cloning"
    project_id = created.json()["id"]

    def settled() -> bool:
        return bool(client.get(f"/api/projects/{project_id}").json()["workspace_status"] != "cloning")

    wait_until(settled, timeout=60, what="the background clone")
    body: dict[str, Any] = client.get(f"/api/projects/{project_id}").json()
    assert (body["workspace_status"], body["workspace_error"], body["default_branch"]) == (
        "ready",
        "",
        "trunk",
    )
    return body


def test_a_run_reads_and_edits_in_its_conversations_worktree(
    app_server: LiveServer, alice: Any, bob: Any, origin: Path
) -> None:
    client = login_client(app_server, "alice", "alice-password")
    body = create_cloned(client, origin, context="Keep the README short.")
    project = Project.objects.get(pk=body["id"])

    started = start_run(client, project.pk, script(READ, EDIT, QUOTE))
    events = read_sse(client, started["events_url"])

    assert events[-1].data == {"status": "completed"}
    [read, edited] = tool_results(events)
    assert "status: draft" in read["text"] and edited["is_error"] is False
    conversation = Conversation.objects.get(pk=started["conversation_id"])
    worktree = worktrees_path(project) / str(conversation.pk)
    assert run_workdir(started["run_id"]) == worktree
    assert (conversation.branch, conversation.worktree_path) == (f"pm/{conversation.pk}", str(worktree))
    assert git(worktree, "branch", "--show-current").strip() == f"pm/{conversation.pk}"
    assert (worktree / "README.md").read_text() == "# Demo\nstatus: final\n"
    # Only Claude's edit shows in git: the generated files stay out of it.
    assert status(worktree) == " M README.md\n"
    assert (worktree / "CLAUDE.md").read_text() == REPO_CLAUDE_MD
    assert "Keep the README short." in (worktree / CONTEXT_FILE).read_text()
    # The main checkout and the origin are untouched.
    assert (workspace_path(project) / "README.md").read_text() == README
    assert git(origin, "show", "trunk:README.md") == README

    # A second conversation works in a worktree of its own, still at the old content.
    second = start_run(client, project.pk, script(READ, QUOTE))
    later = read_sse(client, second["events_url"])
    assert later[-1].data == {"status": "completed"}
    [second_read] = tool_results(later)
    assert "status: draft" in second_read["text"]
    other = run_workdir(second["run_id"])
    assert other != worktree and other.parent == worktree.parent
    assert (other / "README.md").read_text() == README
    assert (worktree / "README.md").read_text() == "# Demo\nstatus: final\n"

    # A continued conversation keeps its worktree.
    third = start_run(client, project.pk, script({"text": "again"}), started["conversation_id"])
    read_sse(client, third["events_url"])
    assert run_workdir(third["run_id"]) == worktree

    # Another user sees none of it.
    stranger = login_client(app_server, "bob", "bob-password")
    assert stranger.post(f"/api/projects/{project.pk}/runs", json={"prompt": "hi"}).status_code == 404
    assert stranger.get(f"/api/projects/{project.pk}/disk-usage").status_code == 404
    usage = client.get(f"/api/projects/{project.pk}/disk-usage").json()
    assert sorted(w["conversation_id"] for w in usage["worktrees"]) == sorted(
        [started["conversation_id"], second["conversation_id"]]
    )


def test_an_ext_url_is_refused_and_nothing_runs(app_server: LiveServer, alice: Any, tmp_path: Path) -> None:
    client = login_client(app_server, "alice", "alice-password")
    marker = tmp_path / "ran"

    response = client.post("/api/projects", json={"name": "Evil", "git_url": f"ext::sh -c touch% {marker}"})

    assert response.status_code == 422
    assert "ext::” transport runs programs on the server" in response.json()["detail"]
    assert not Project.objects.exists() and not Run.objects.exists()
    assert not marker.exists()


def test_a_failing_clone_leaves_no_directory_and_refuses_runs_with_its_reason(
    app_server: LiveServer, alice: Any, tmp_path: Path
) -> None:
    client = login_client(app_server, "alice", "alice-password")
    missing = tmp_path / "gone.git"
    created = client.post("/api/projects", json={"name": "Gone", "git_url": f"file://{missing}"})
    project_id = created.json()["id"]

    wait_until(
        lambda: client.get(f"/api/projects/{project_id}").json()["workspace_status"] == "failed",
        timeout=60,
        what="the clone to fail",
    )

    error = client.get(f"/api/projects/{project_id}").json()["workspace_error"]
    assert error.startswith(f"Could not clone file://{missing}: ")
    assert "does not appear to be a git repository" in error
    assert not workspace_path(Project.objects.get(pk=project_id)).exists()
    refused = client.post(f"/api/projects/{project_id}/runs", json={"prompt": "hello"})
    assert (refused.status_code, refused.json()["code"]) == (409, "workspace_failed")
    assert error in refused.json()["detail"]
    assert not Run.objects.exists() and not Conversation.objects.exists()


def test_a_run_in_a_project_still_cloning_gets_409(app_server: LiveServer, alice: Any) -> None:
    project = Project.objects.create(
        owner=alice, name="Slow", git_url="https://h/x.git", workspace_status="cloning"
    )
    client = login_client(app_server, "alice", "alice-password")

    refused = client.post(f"/api/projects/{project.pk}/runs", json={"prompt": "hello"})

    assert (refused.status_code, refused.json()) == (
        409,
        {"detail": MSG_CLONING, "code": "workspace_cloning"},
    )


def test_the_setup_command_runs_before_the_first_run_of_a_worktree(
    app_server: LiveServer, alice: Any, origin: Path
) -> None:
    alice.is_staff = True
    alice.save()
    client = login_client(app_server, "alice", "alice-password")
    setup = "echo installing; touch .installed"
    body = create_cloned(client, origin, worktree_setup_command=setup, worktree_copy_globs=".env")
    (workspace_path(Project.objects.get(pk=body["id"])) / ".env").write_text("TOKEN=dev\n")

    first = start_run(client, body["id"], script({"text": "ready"}))
    events = read_sse(client, first["events_url"])

    assert events[-1].data == {"status": "completed"}
    setups = [e.data for e in events if e.event == "workspace_setup"]
    assert [s["status"] for s in setups] == ["running", "ok"]
    assert (setups[1]["exit_code"], setups[1]["output"], setups[1]["command"]) == (0, "installing\n", setup)
    names = [e.event for e in events]
    assert names.index("workspace_setup") < names.index("session")  # before Claude starts
    worktree = run_workdir(first["run_id"])
    assert (worktree / ".installed").exists()
    assert (worktree / ".env").read_text() == "TOKEN=dev\n"  # copied, and ignored by the repository
    assert status(worktree) == "?? .installed\n"

    again = start_run(client, body["id"], script({"text": "again"}), first["conversation_id"])
    assert [e for e in read_sse(client, again["events_url"]) if e.event == "workspace_setup"] == []


def test_a_failing_setup_command_fails_the_run_with_its_output(
    app_server: LiveServer, alice: Any, origin: Path
) -> None:
    alice.is_staff = True
    alice.save()
    client = login_client(app_server, "alice", "alice-password")
    body = create_cloned(client, origin, worktree_setup_command="echo 'npm ERR! missing lockfile'; exit 4")

    started = start_run(client, body["id"], script({"text": "never"}))
    events = read_sse(client, started["events_url"])

    assert events[-1].data == {"status": "failed"}
    assert "session" not in [e.event for e in events]  # Claude never started
    run = Run.objects.get(pk=started["run_id"])
    assert run.error == (
        "The project's setup command failed in this conversation's worktree (exit code 4):\n"
        "npm ERR! missing lockfile"
    )
    [failed] = [e.data for e in events if e.event == "workspace_setup" and e.data["status"] == "failed"]
    assert (failed["exit_code"], failed["output"]) == (4, "npm ERR! missing lockfile\n")
    settings_json = json.loads(
        (run_workdir(started["run_id"]) / ".claude" / "settings.local.json").read_text()
    )
    assert "permissions" in settings_json
