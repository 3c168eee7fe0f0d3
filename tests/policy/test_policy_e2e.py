"""Answering by policy, end to end: the real CLI asks, the policy agent answers through the real
question store, and the scripted model both plays Claude and answers the agent's
structured-output requests (``promptmgr.scripted_model.structured``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from askuser.models import PermissionRequest, PolicyAnswer, Question, QuestionStatus
from tests.conftest import LiveServer
from tests.engines.support import ask_user_question, mcp_ask_user, sdk_question
from tests.helpers import (
    QUOTE,
    SSEEvent,
    login_client,
    make_project,
    read_sse,
    script,
    start_run,
    tool_results,
)

pytestmark = pytest.mark.e2e

ENGINES = ["cli", "sdk"]
POSTGRES_RULE = "We always use Postgres for databases."


def asking(engine: str, question: str, labels: list[str]) -> dict[str, Any]:
    spec = sdk_question(question, "Q", labels)
    return mcp_ask_user(spec) if engine == "cli" else ask_user_question(spec)


def of(events: list[SSEEvent], name: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.event == name]


def until(name: str) -> Any:
    return lambda e: e.event == name


def structured_requests(model_url: str, needle: str) -> list[dict[str, Any]]:
    """The agent's requests to the model that mention ``needle``."""
    return [
        r
        for r in httpx.get(f"{model_url}/_scripted/requests").json()
        if ((r.get("output_config") or {}).get("format") or {}).get("type") == "json_schema"
        and needle in json.dumps(r["messages"], ensure_ascii=False)
    ]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_auto_policy_answers_a_question_with_its_reasoning_and_the_answer_reaches_claude(
    app_server: LiveServer, alice: Any, engine: str, scripted_model_url: str
) -> None:
    project = make_project(
        owner=alice,
        engine=engine,
        answer_policy="auto",
        answer_policy_delay=0,
        answer_policy_instructions=POSTGRES_RULE,
        context="A billing service.",
    )
    client = login_client(app_server, "alice", "alice-password")
    asked = f"Which database ({engine})?"
    started = start_run(client, project.pk, script(asking(engine, asked, ["SQLite", "Postgres"]), QUOTE))

    events = read_sse(client, started["events_url"])

    [card] = of(events, "ask_user_question")
    [decision] = of(events, "policy_decision")
    assert (decision["question_id"], decision["mode"], decision["decision"]) == (
        card["question_id"],
        "auto",
        "answer",
    )
    assert decision["answers"] == {asked: "Postgres"}
    assert "Postgres" in decision["reasoning"]
    [answered] = of(events, "ask_user_answered")
    assert (answered["by_policy"], answered["answered_by"], answered["reasoning"]) == (
        True,
        "policy",
        decision["reasoning"],
    )
    [result] = tool_results(events)
    expected = "User selected: Postgres" if engine == "cli" else f'"{asked}"="Postgres"'
    assert expected in result["text"]
    [delivered] = of(events, "ask_user_delivered")
    assert delivered["ok"] is True
    assert events[-1].data == {"status": "completed"}

    question = Question.objects.get(question_id=card["question_id"])
    assert (question.status, question.answered_by_policy, question.answered_by) == (
        QuestionStatus.DELIVERED,
        True,
        None,
    )
    policy = PolicyAnswer.objects.get(question=question)
    assert (policy.outcome, policy.reasoning, policy.model) == (
        "applied",
        decision["reasoning"],
        "claude-sonnet-5-5",
    )
    assert policy.usage["input_tokens"] > 0 and policy.usage["output_tokens"] > 0
    # The agent was shown the project's context, its instructions and the conversation so far.
    [request] = structured_requests(scripted_model_url, asked)
    sent = json.dumps(request, ensure_ascii=False)
    assert "A billing service." in sent and POSTGRES_RULE in sent and "SCRIPT:" in sent


def test_in_suggest_mode_the_suggestion_is_shown_and_the_persons_choice_wins(
    app_server: LiveServer, alice: Any
) -> None:
    project = make_project(owner=alice, answer_policy="suggest", answer_policy_instructions=POSTGRES_RULE)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(
        client, project.pk, script(asking("cli", "Which database?", ["SQLite", "Postgres"]), QUOTE)
    )
    url = started["events_url"]
    suggestion = read_sse(client, url, until=until("policy_decision"))[-1]
    assert (suggestion.data["mode"], suggestion.data["outcome"]) == ("suggest", "suggested")
    assert suggestion.data["answers"] == {"Which database?": "Postgres"}

    response = client.post(
        "/api/askuser/submit-answer",
        json={"question_id": suggestion.data["question_id"], "answer": "", "selectedOptions": [0]},
    )
    assert response.status_code == 200, response.text
    events = read_sse(client, url, last_event_id=suggestion.id)
    [result] = tool_results(events)
    assert "User selected: SQLite" in result["text"]
    [answered] = of(events, "ask_user_answered")
    assert answered["answered_by"] == "alice" and "by_policy" not in answered
    question = Question.objects.get(question_id=suggestion.data["question_id"])
    assert question.answered_by_policy is False


def test_a_question_about_credentials_is_left_to_a_person_without_asking_the_model(
    app_server: LiveServer, alice: Any, scripted_model_url: str
) -> None:
    project = make_project(owner=alice, answer_policy="auto", answer_policy_delay=0)
    client = login_client(app_server, "alice", "alice-password")
    question = "Which API key should the deploy use?"
    started = start_run(
        client, project.pk, script(asking("cli", question, ["Staging key", "Live key"]), QUOTE)
    )
    url = started["events_url"]
    deferred = read_sse(client, url, until=until("policy_decision"))[-1]
    assert (deferred.data["decision"], deferred.data["reserved"]) == ("defer", "credentials")
    assert Question.objects.get(question_id=deferred.data["question_id"]).status == QuestionStatus.PENDING

    response = client.post(
        "/api/askuser/submit-answer",
        json={"question_id": deferred.data["question_id"], "answer": "", "selectedOptions": [0]},
    )
    assert response.status_code == 200, response.text
    [result] = tool_results(read_sse(client, url, last_event_id=deferred.id))
    assert "User selected: Staging key" in result["text"]
    assert structured_requests(scripted_model_url, question) == []
    assert PolicyAnswer.objects.get(question__question_id=deferred.data["question_id"]).usage == {}


def test_what_the_instructions_reserve_is_left_to_a_person(app_server: LiveServer, alice: Any) -> None:
    project = make_project(
        owner=alice,
        answer_policy="auto",
        answer_policy_delay=0,
        answer_policy_instructions="Leave questions about pricing to us.",
    )
    client = login_client(app_server, "alice", "alice-password")
    steps = (asking("cli", "Which pricing tier comes first?", ["Free", "Pro"]), QUOTE)
    started = start_run(client, project.pk, script(*steps))
    deferred = read_sse(client, started["events_url"], until=until("policy_decision"))[-1]
    assert (deferred.data["decision"], deferred.data["reserved"]) == ("defer", None)
    assert "pricing" in deferred.data["reasoning"]
    policy = PolicyAnswer.objects.get(question__question_id=deferred.data["question_id"])
    assert policy.usage["input_tokens"] > 0  # the model read the instructions and said so
    assert Question.objects.get(question_id=deferred.data["question_id"]).status == QuestionStatus.PENDING
    client.post(f"/api/runs/{started['run_id']}/cancel")


def bash(command: str) -> dict[str, Any]:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "Make it"}}}


def test_the_policy_leaves_bash_to_a_person_unless_the_instructions_allow_it(
    app_server: LiveServer, alice: Any
) -> None:
    fields: dict[str, Any] = {
        "permission_mode": "default",
        "answer_policy": "auto",
        "answer_policy_delay": 0,
        "answer_policy_permissions": True,
    }
    client = login_client(app_server, "alice", "alice-password")
    silent = make_project(owner=alice, name="Silent", answer_policy_instructions=POSTGRES_RULE, **fields)
    first = start_run(client, silent.pk, script(bash("mkdir -p made"), QUOTE))
    deferred = read_sse(client, first["events_url"], until=until("policy_decision"))[-1]
    assert (deferred.data["decision"], deferred.data["reserved"]) == ("defer", "bash")
    request = PermissionRequest.objects.get(request_id=deferred.data["request_id"])
    assert request.status == "pending"
    client.post(f"/api/runs/{first['run_id']}/cancel")
    read_sse(client, first["events_url"])

    allowing = make_project(
        owner=alice, name="Allowing", answer_policy_instructions="You may allow Bash commands here.", **fields
    )
    second = start_run(client, allowing.pk, script(bash("mkdir -p made && echo made-it"), QUOTE))
    events = read_sse(client, second["events_url"])
    [decided] = of(events, "permission_decided")
    assert (decided["decision"], decided["by"], decided["by_policy"]) == ("allow", "policy", True)
    assert decided["reasoning"] == "The instructions allow Bash."
    [result] = tool_results(events)
    assert result == {"text": "made-it", "is_error": False}
    assert PermissionRequest.objects.get(request_id=decided["request_id"]).decided_by_policy is True
