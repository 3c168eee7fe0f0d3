"""The ask-user round trip with every real part: uvicorn, the CLI, the MCP server process."""

from __future__ import annotations

import json
from typing import Any

import httpx

from askuser.models import Question
from promptmgr.models import Run
from tests.helpers import login_client, make_project, read_sse, script

ASK = "mcp__ask-user__ask_user"


def ask(
    question: str, options: list[str] | None = None, multi: bool = False, header: str = ""
) -> dict[str, Any]:
    tool_input: dict[str, Any] = {"question": question, "multiSelect": multi}
    if options is not None:
        tool_input["options"] = [{"label": o, "description": f"about {o}"} for o in options]
    if header:
        tool_input["header"] = header
    return {"tool_use": {"name": ASK, "input": tool_input}}


QUOTE = {"quote_tool_results": True}


def start(client: httpx.Client, project_id: int, prompt: str) -> dict[str, Any]:
    response = client.post(f"/api/projects/{project_id}/runs", json={"prompt": prompt})
    assert response.status_code == 201, response.text
    return dict(response.json())


def next_question(client: httpx.Client, url: str, after: int = 0) -> Any:
    events = read_sse(client, url, until=lambda e: e.event == "ask_user_question", last_event_id=after)
    return events[-1]


def submit(client: httpx.Client, question_id: str, **body: Any) -> httpx.Response:
    return client.post("/api/askuser/submit-answer", json={"question_id": question_id, **body})


def tool_results(events: list[Any]) -> list[dict[str, Any]]:
    [final] = [
        e.data["text"] for e in events if e.event == "assistant_text" and "Tool results" in e.data["text"]
    ]
    return list(json.loads(final.split("Tool results received: ", 1)[1]))


def test_single_choice_answer_reaches_the_model(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start(
        client, project.pk, script(ask("Which database?", ["SQLite", "PostgreSQL"], header="DB"), QUOTE)
    )
    card = next_question(client, started["events_url"])
    assert card.data["source"] == "mcp"
    assert card.data["questions"] == [
        {
            "question": "Which database?",
            "header": "DB",
            "options": [
                {"label": "SQLite", "description": "about SQLite"},
                {"label": "PostgreSQL", "description": "about PostgreSQL"},
            ],
            "multiSelect": False,
        }
    ]
    assert Run.objects.get(pk=started["run_id"]).status == "waiting_for_user"
    response = submit(client, card.data["question_id"], selectedOptions=[1])
    assert response.status_code == 200, response.text
    events = read_sse(client, started["events_url"])
    assert tool_results(events) == [{"text": "User selected: PostgreSQL", "is_error": False}]
    answered = [e.data for e in events if e.event == "ask_user_answered"]
    assert (
        answered[0]["answers"] == {"Which database?": "PostgreSQL"} and answered[0]["answered_by"] == "alice"
    )
    delivered = [e.data for e in events if e.event == "ask_user_delivered"]
    assert delivered and delivered[0]["ok"] is True
    question = Question.objects.get(question_id=card.data["question_id"])
    assert question.status == "delivered" and question.answered_by == alice
    assert events[-1].data == {"status": "completed"}


def test_free_text_answer_reaches_the_model(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start(client, project.pk, script(ask("What should the module be called?"), QUOTE))
    card = next_question(client, started["events_url"])
    assert submit(client, card.data["question_id"], answer="  billing_core  ").status_code == 200
    events = read_sse(client, started["events_url"])
    assert tool_results(events) == [{"text": "User answered: billing_core", "is_error": False}]


def test_multi_select_answer_reaches_the_model_comma_joined(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start(
        client, project.pk, script(ask("Which checks?", ["Lint", "Types", "Tests"], multi=True), QUOTE)
    )
    card = next_question(client, started["events_url"])
    assert (
        submit(client, card.data["question_id"], selectedOptions=[0, 2], notes="tests first").status_code
        == 200
    )
    events = read_sse(client, started["events_url"])
    assert tool_results(events) == [
        {"text": "User selected: Lint, Tests\nNotes: tests first", "is_error": False}
    ]


def test_two_sequential_questions_in_one_run(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start(client, project.pk, script(ask("First?", ["A", "B"]), ask("Second?"), QUOTE))
    first = next_question(client, started["events_url"])
    assert submit(client, first.data["question_id"], selectedOptions=[0]).status_code == 200
    second = next_question(client, started["events_url"], after=first.id)
    assert second.data["question_id"] != first.data["question_id"]
    assert second.data["questions"][0]["question"] == "Second?"
    assert submit(client, second.data["question_id"], answer="done").status_code == 200
    events = read_sse(client, started["events_url"])
    assert tool_results(events) == [
        {"text": "User selected: A", "is_error": False},
        {"text": "User answered: done", "is_error": False},
    ]


def test_second_answer_is_rejected_with_409(app_server: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start(client, project.pk, script(ask("Once?", ["Yes", "No"]), QUOTE))
    card = next_question(client, started["events_url"])
    assert submit(client, card.data["question_id"], selectedOptions=[0]).status_code == 200
    again = submit(client, card.data["question_id"], selectedOptions=[1])
    assert again.status_code == 409
    assert again.json()["detail"] == "This question was already answered."
    events = read_sse(client, started["events_url"])
    assert tool_results(events) == [{"text": "User selected: Yes", "is_error": False}]
