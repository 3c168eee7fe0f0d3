"""Helpers for the engine tests: start a run, answer its card, read what the model received."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.helpers import SSEEvent, read_sse

ASK_USER_QUESTION = "AskUserQuestion"
MCP_ASK_USER = "mcp__ask-user__ask_user"
QUOTE = {"quote_tool_results": True}


def option_list(*labels: str) -> list[dict[str, str]]:
    return [{"label": label, "description": f"about {label}"} for label in labels]


def sdk_question(question: str, header: str, labels: list[str], multi: bool = False) -> dict[str, Any]:
    return {"question": question, "header": header, "options": option_list(*labels), "multiSelect": multi}


def ask_user_question(*questions: dict[str, Any]) -> dict[str, Any]:
    """A scripted step calling the built-in AskUserQuestion (the SDK engine's way to ask)."""
    return {"tool_use": {"name": ASK_USER_QUESTION, "input": {"questions": list(questions)}}}


def mcp_ask_user(question: dict[str, Any]) -> dict[str, Any]:
    """A scripted step calling the ask-user MCP tool (the CLI engine's way to ask)."""
    return {"tool_use": {"name": MCP_ASK_USER, "input": question}}


def start(
    client: httpx.Client, project_id: int, prompt: str, conversation_id: int | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": prompt}
    if conversation_id is not None:
        body["conversation_id"] = conversation_id
    response = client.post(f"/api/projects/{project_id}/runs", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def next_question(client: httpx.Client, url: str, after: int = 0) -> SSEEvent:
    return read_sse(client, url, until=lambda e: e.event == "ask_user_question", last_event_id=after)[-1]


def submit(client: httpx.Client, question_id: str, **body: Any) -> httpx.Response:
    return client.post("/api/askuser/submit-answer", json={"question_id": question_id, **body})


def quoted_tool_results(events: list[SSEEvent]) -> list[dict[str, Any]]:
    """The tool results the scripted model says it received (its ``quote_tool_results`` step)."""
    [final] = [
        e.data["text"]
        for e in events
        if e.event == "assistant_text" and "Tool results received: " in e.data["text"]
    ]
    return list(json.loads(final.split("Tool results received: ", 1)[1]))
