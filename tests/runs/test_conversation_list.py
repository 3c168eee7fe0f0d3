"""GET /api/projects/{id}/conversations: newest first, each with its unfinished run's status."""

from __future__ import annotations

from typing import Any

import pytest

from promptmgr.models import Run, RunStatus
from tests.helpers import make_project, make_run

pytestmark = pytest.mark.unit


def _statuses(client: Any, project: Any) -> dict[int, str | None]:
    response = client.get(f"/api/projects/{project.pk}/conversations")
    assert response.status_code == 200, response.content
    return {item["id"]: item["active_status"] for item in response.json()}


def test_each_conversation_carries_the_status_of_its_unfinished_run(client: Any, alice: Any) -> None:
    project = make_project(owner=alice, sync=False)
    waiting = make_run(owner=alice, project=project, status=RunStatus.WAITING_FOR_USER)
    running = make_run(owner=alice, project=project, status=RunStatus.RUNNING)
    finished = make_run(owner=alice, project=project, status=RunStatus.COMPLETED)
    client.force_login(alice)

    assert _statuses(client, project) == {
        waiting.conversation_id: "waiting_for_user",
        running.conversation_id: "running",
        finished.conversation_id: None,
    }


def test_a_conversation_whose_earlier_runs_ended_shows_only_the_one_still_going(
    client: Any, alice: Any
) -> None:
    project = make_project(owner=alice, sync=False)
    first = make_run(owner=alice, project=project, status=RunStatus.FAILED)
    Run.objects.create(conversation=first.conversation, user=alice, prompt="again", status=RunStatus.QUEUED)
    client.force_login(alice)

    assert _statuses(client, project) == {first.conversation_id: "queued"}

    Run.objects.filter(conversation=first.conversation).update(status=RunStatus.CANCELLED)
    assert _statuses(client, project) == {first.conversation_id: None}


def test_another_users_conversation_list_is_404(client: Any, alice: Any, bob: Any) -> None:
    project = make_project(owner=alice, sync=False)
    make_run(owner=alice, project=project, status=RunStatus.WAITING_FOR_USER)
    client.force_login(bob)

    assert client.get(f"/api/projects/{project.pk}/conversations").status_code == 404
