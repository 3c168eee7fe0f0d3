"""The issue's Must-show path for run changes, whole: a project cloned from a local bare
repository (``file`` allowed here, as an operator would allow it), a run of the real CLI in
acceptEdits mode that Reads and Edits README.md in its conversation's worktree, and what
the app then shows and undoes. Clone, ``ext::`` and failing-clone refusals are proven in
``tests/workspaces/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from promptmgr.models import Conversation
from tests.changes.support import READ, edit, status
from tests.conftest import LiveServer
from tests.helpers import login_client, read_sse, run_workdir, script, start_run, wait_until
from tests.workspaces.support import README, git, make_origin

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _file_urls_allowed(settings: Any) -> None:
    settings.WORKSPACE_GIT_SCHEMES = ("https", "ssh", "file")


def cloned(client: Any, origin: Path, **fields: Any) -> int:
    created = client.post("/api/projects", json={"name": "Demo", "git_url": f"file://{origin}", **fields})
    assert created.status_code == 201, created.text
    project_id = int(created.json()["id"])
    wait_until(
        lambda: client.get(f"/api/projects/{project_id}").json()["workspace_status"] != "cloning",
        timeout=60,
        what="the background clone",
    )
    assert client.get(f"/api/projects/{project_id}").json()["workspace_status"] == "ready"
    return project_id


def content(client: Any, url: str, path: str) -> Any:
    return client.get(f"{url}/files/content", params={"path": path})


def test_a_cloned_projects_run_shows_its_changes_and_reverts_them_leaving_the_origin_alone(
    app_server: LiveServer, alice: Any, bob: Any, tmp_path: Path
) -> None:
    origin = make_origin(tmp_path / "origin.git")
    origin_head = git(origin, "rev-parse", "trunk")
    client = login_client(app_server, "alice", "alice-password")
    project_id = cloned(client, origin)

    started = start_run(
        client, project_id, script(READ, edit("status: draft", "status: final"), {"text": "ok"})
    )
    events = read_sse(client, started["events_url"])

    # The changes event.
    assert events[-1].data == {"status": "completed"}
    [changes] = [e.data for e in events if e.event == "changes"]
    assert [(f["path"], f["status"], f["additions"], f["deletions"]) for f in changes["files"]] == [
        ("README.md", "modified", 1, 1)
    ]
    # The diff endpoint shows the edit.
    diff = client.get(f"/api/runs/{started['run_id']}/changes").json()
    assert "-status: draft\n+status: final\n" in diff["diff"]
    # The file endpoint shows the new content, in the conversation's worktree.
    mine = f"/api/conversations/{started['conversation_id']}"
    assert content(client, mine, "README.md").json()["content"] == "# Demo\nstatus: final\n"
    worktree = run_workdir(started["run_id"])
    assert Conversation.objects.get(pk=started["conversation_id"]).worktree_path == str(worktree)
    # The project's default branch still holds what was cloned.
    assert content(client, f"/api/projects/{project_id}", "README.md").json()["content"] == README

    # A second conversation's worktree still has the old content.
    second = start_run(client, project_id, script({"text": "just looking"}))
    read_sse(client, second["events_url"])
    other = f"/api/conversations/{second['conversation_id']}"
    assert content(client, other, "README.md").json()["content"] == README
    assert run_workdir(second["run_id"]) != worktree

    # Traversal and symlink escapes get 404, and so does another user.
    (worktree / "escape").symlink_to(tmp_path)
    for path in ("../../../../etc/hostname", "/etc/hostname", "escape/origin.git/HEAD", ".git"):
        assert content(client, mine, path).status_code == 404, path
    stranger = login_client(app_server, "bob", "bob-password")
    for url in (
        f"/api/runs/{started['run_id']}/changes",
        f"{mine}/files",
        f"{mine}/files/content?path=README.md",
        f"/api/projects/{project_id}/files",
    ):
        assert stranger.get(url).status_code == 404, url
    assert stranger.post(f"/api/runs/{started['run_id']}/revert").status_code == 404
    (worktree / "escape").unlink()

    # Revert restores the file; the origin is untouched all along.
    reverted = client.post(f"/api/runs/{started['run_id']}/revert")
    assert reverted.status_code == 200, reverted.text
    assert (worktree / "README.md").read_text() == README
    assert status(worktree) == ""
    assert git(origin, "rev-parse", "trunk") == origin_head
    assert git(origin, "show", "trunk:README.md") == README
    assert git(origin, "for-each-ref", "--format=%(refname)") == "refs/heads/trunk\n"
