"""DELETE /api/conversations/{id}: the worktree goes (its work committed first), the branch stays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from promptmgr.models import Conversation, Run, RunStatus
from promptmgr.services.runs import MSG_CONVERSATION_BUSY, MSG_DELETE_NOT_YOURS
from promptmgr.workspaces import workspace_path
from tests.helpers import open_conversation
from tests.workspaces.support import cloned_project, git

pytestmark = [pytest.mark.django_db, pytest.mark.unit]


def test_the_author_deletes_a_conversation_and_its_work_stays_on_its_branch(
    client_for: Any, alice: Any, bob: Any, carol: Any, origin: Path, django_capture_on_commit_callbacks: Any
) -> None:
    project = cloned_project(alice, origin)
    project.members.add(bob)
    conversation_id, worktree = open_conversation(project, bob)
    (worktree / "notes.md").write_text("bob's draft\n")
    url = f"/api/conversations/{conversation_id}"

    assert client_for(carol).delete(url).status_code == 404
    assert worktree.exists()
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(bob).delete(url)

    assert response.status_code == 204
    assert not Conversation.objects.filter(pk=conversation_id).exists()
    assert not worktree.exists()
    assert git(workspace_path(project), "show", f"pm/{conversation_id}:notes.md") == "bob's draft\n"
    assert client_for(bob).delete(url).status_code == 404


def test_a_teammate_may_not_delete_someone_elses_conversation_nor_one_that_runs(
    client_for: Any, alice: Any, bob: Any, origin: Path
) -> None:
    project = cloned_project(alice, origin)
    project.members.add(bob)
    conversation_id, worktree = open_conversation(project, alice)

    refused = client_for(bob).delete(f"/api/conversations/{conversation_id}")
    assert (refused.status_code, refused.json()["detail"]) == (403, MSG_DELETE_NOT_YOURS)

    Run.objects.create(conversation_id=conversation_id, user=alice, prompt="p", status=RunStatus.RUNNING)
    busy = client_for(alice).delete(f"/api/conversations/{conversation_id}")
    assert (busy.status_code, busy.json()["detail"]) == (409, MSG_CONVERSATION_BUSY)
    assert worktree.exists() and Conversation.objects.filter(pk=conversation_id).exists()
