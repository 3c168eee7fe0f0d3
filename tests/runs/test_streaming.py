"""Runs through the real HTTP stack: uvicorn, the real Claude CLI, the scripted model."""

from __future__ import annotations

from typing import Any

from tests.helpers import login_client, make_project, read_sse, script


def start_run(client: Any, project_id: int, prompt: str, conversation_id: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": prompt}
    if conversation_id is not None:
        body["conversation_id"] = conversation_id
    response = client.post(f"/api/projects/{project_id}/runs", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


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
    assert [e.data["status"] for e in events if e.event == "done"] == ["completed"]
    assert [e.id for e in events] == list(range(1, len(events) + 1))
