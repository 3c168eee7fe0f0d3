"""Messages into a running turn (``POST /api/runs/{run_id}/messages``), end to end, on both engines.

The real CLI runs with stream-json input against the scripted model, which quotes back the
user messages it received inside the turn (``quote_user_messages``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import LiveServer
from tests.helpers import SSEEvent, login_client, make_project, read_sse, script, start_run

pytestmark = pytest.mark.e2e

ENGINES = ["cli", "sdk"]
STREAMING = {"text": "z" * 200, "pace_ms": 15, "chunk_chars": 1}
ECHO = {"tool_use": {"name": "Bash", "input": {"command": "echo one", "description": "Say one"}}}
QUOTE_MESSAGES = {"quote_user_messages": True}
RECEIVED = "User messages received: "


def send(client: Any, run_id: int, text: str) -> Any:
    return client.post(f"/api/runs/{run_id}/messages", json={"text": text})


def first_delta(event: SSEEvent) -> bool:
    return event.event == "text_delta"


def of(events: list[SSEEvent], name: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.event == name]


def quoted_messages(events: list[SSEEvent]) -> list[str]:
    [text] = [t["text"] for t in of(events, "assistant_text") if RECEIVED in t["text"]]
    return list(json.loads(text.split(RECEIVED, 1)[1]))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_message_sent_while_claude_streams_reaches_it_within_the_running_turn(
    app_server: LiveServer, alice: Any, engine: str
) -> None:
    project = make_project(owner=alice, engine=engine)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({**STREAMING, **ECHO}, QUOTE_MESSAGES))
    streamed = read_sse(client, started["events_url"], until=first_delta)

    response = send(client, started["run_id"], "Please use tabs, not spaces.")
    assert response.status_code == 202, response.text
    message_id = response.json()["message_id"]

    events = read_sse(client, started["events_url"], last_event_id=streamed[-1].id)
    [shown] = of(events, "user_message")
    assert (shown["message_id"], shown["text"], shown["user"]) == (
        message_id,
        "Please use tabs, not spaces.",
        "alice",
    )
    [delivered] = of(events, "user_message_delivered")
    assert (delivered["message_id"], delivered["delivery"]) == (message_id, "turn")
    assert quoted_messages(events) == ["Please use tabs, not spaces."]
    assert len(of(events, "result")) == 1
    assert events[-1].data == {"status": "completed"}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_message_that_comes_during_the_last_reply_starts_the_next_turn(
    app_server: LiveServer, alice: Any, engine: str
) -> None:
    project = make_project(owner=alice, engine=engine)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(STREAMING))
    read_sse(client, started["events_url"], until=first_delta)

    follow_up = "And then " + script({"text": "next turn", "quote_earlier_prompts": True})
    assert send(client, started["run_id"], follow_up).status_code == 202

    events = read_sse(client, started["events_url"])
    [delivered] = of(events, "user_message_delivered")
    assert delivered["delivery"] == "next_turn"
    results = of(events, "result")
    assert [r["result"].split("\n")[0] for r in results] == [STREAMING["text"], "next turn"]
    assert events[-1].data == {"status": "completed"}


def test_messages_are_for_the_projects_people_and_running_runs_only(
    app_server: LiveServer, alice: Any, bob: Any
) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(STREAMING))
    read_sse(client, started["events_url"], until=first_delta)

    stranger = login_client(app_server, "bob", "bob-password")
    assert send(stranger, started["run_id"], "hi").status_code == 404
    empty = send(client, started["run_id"], "   ")
    assert (empty.status_code, empty.json()["code"]) == (422, "empty_message")
    assert client.post(f"/api/runs/{started['run_id']}/messages", json={}).status_code == 422

    read_sse(client, started["events_url"])
    ended = send(client, started["run_id"], "too late")
    assert (ended.status_code, ended.json()["code"]) == (410, "run_finished")
