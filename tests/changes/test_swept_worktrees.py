"""A conversation whose worktree the idle sweep removed: its runs' diffs are still served
(the snapshots live in the project's repository), its files are read from its branch (the
sweep commits uncommitted work there first), and revert waits for the worktree (410)."""

from __future__ import annotations

import asyncio
import io
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from promptmgr.models import Conversation, Project
from promptmgr.services.worktrees import conversation_worktree_ensure, worktree_discard
from promptmgr.workspaces import workspace_path
from tests.changes.support import make_repo, run_in, write
from tests.helpers import make_project

# The hooks write from worker threads, as in the app: a test transaction would lock them out.
pytestmark = [pytest.mark.unit, pytest.mark.django_db(transaction=True)]

ClientFor = Callable[[Any], Client]


async def body_of(response: Any) -> bytes:
    """A streamed response's body (the zip view streams from an async iterator)."""
    return b"".join([chunk async for chunk in response.streaming_content])


def test_a_swept_conversation_keeps_its_diffs_and_files_and_revert_says_gone(
    client_for: ClientFor, alice: Any
) -> None:
    project: Project = make_project(owner=alice, name="Swept")
    make_repo(workspace_path(project), {"README.md": "# Demo\nstatus: draft\n"})
    conversation = Conversation.objects.create(project=project, user=alice, title="c")
    worktree = conversation_worktree_ensure(conversation)
    ended = run_in(conversation, worktree, write(worktree / "README.md", "# Demo\nstatus: final\n"))
    (worktree / "notes.txt").write_text("a person's uncommitted note\n")
    conversation.refresh_from_db()

    worktree_discard(
        project_id=project.pk, worktree=conversation.worktree_path, branch=conversation.branch, reason="idle"
    )

    assert not worktree.exists()
    client = client_for(alice)
    diff = client.get(f"/api/runs/{ended.pk}/changes").json()
    assert "-status: draft\n+status: final\n" in diff["diff"]
    files = f"/api/conversations/{conversation.pk}/files"
    listing = client.get(files).json()
    assert {"README.md", "notes.txt"} <= {e["name"] for e in listing["entries"]}
    readme = client.get(f"{files}/content", {"path": "README.md"}).json()
    assert readme["content"] == "# Demo\nstatus: final\n"
    archive = zipfile.ZipFile(io.BytesIO(asyncio.run(body_of(client.get(f"{files}/zip")))))
    assert archive.read("notes.txt") == b"a person's uncommitted note\n"
    gone = client.post(f"/api/runs/{ended.pk}/revert")
    assert (gone.status_code, gone.json()["code"]) == (410, "worktree_gone")

    # The next run makes the worktree again, and then revert works.
    again = conversation_worktree_ensure(conversation)
    assert Path(again) == worktree
    assert client.post(f"/api/runs/{ended.pk}/revert").status_code == 200
    assert (worktree / "README.md").read_text() == "# Demo\nstatus: draft\n"
