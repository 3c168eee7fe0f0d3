"""Who may call the ask-user endpoints: an authorization matrix with zero unexpected 2xx."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from askuser import live, runtime
from askuser.models import Question
from core.redis import get_redis
from promptmgr import live as promptmgr_live
from promptmgr.models import Run, RunEvent
from promptmgr.runner import WORKER_ID
from tests.helpers import (
    QUOTE,
    ask,
    login_client,
    make_project,
    make_run,
    next_question,
    read_sse,
    script,
    start_run,
    submit_answer,
)

pytestmark = pytest.mark.e2e

QUESTION = {"question": "Proceed?", "options": [{"label": "Yes"}, {"label": "No"}]}


def active_run(project: Any, user: Any) -> Run:
    run: Run = make_run(owner=user, project=project)
    # Owned by this process's worker, as a supervised run is: an answer to an unowned run fails it.
    asyncio.run(promptmgr_live.set_owner(run.pk, WORKER_ID, ttl=300))
    return run


def open_session(run: Run) -> tuple[runtime.RelaySession, str]:
    session = asyncio.run(
        runtime.relay_session_open(
            run_id=run.pk, project_id=run.conversation.project_id, stream_token="s", timeout=300
        )
    )
    token = json.loads(session.config_path.read_text())["relayToken"]
    return session, token


def forget_token_in_redis(run_id: int) -> None:
    get_redis().delete(live.relay_token_key(run_id))


@pytest.fixture
def tokens(app_server: Any, alice: Any, bob: Any) -> dict[str, Any]:
    project = make_project(owner=alice)
    run = active_run(project, alice)
    other_run = active_run(make_project(owner=bob, name="Bob's"), bob)
    session, valid = open_session(run)
    _other_session, other = open_session(other_run)
    ended_run = active_run(project, alice)
    ended_session, ended = open_session(ended_run)
    asyncio.run(runtime.relay_session_close(ended_session))
    expired_run = active_run(project, alice)
    expired_session, expired = open_session(expired_run)
    # What a TTL expiry leaves: a process that died holding the run (so nothing of it in
    # this one), and nothing in Redis under that run.
    runtime.remove_secrets(expired_session)
    forget_token_in_redis(expired_run.pk)
    return {
        "run": run,
        "other_run": other_run,
        "valid": valid,
        "other": other,
        "ended": ended,
        "expired": expired,
    }


CASES = [
    ("none", None, {401}),
    ("not bearer", "Basic YWxpY2U6cGFzcw==", {401}),
    ("malformed", "Bearer not-a-token", {403}),
    ("wrong", "Bearer pmr_{run}_" + "A" * 43, {403}),
    ("another run's", "Bearer {other}", {None}),  # accepted, but only for that run's questions
    ("ended run", "Bearer {ended}", {410}),
    ("expired", "Bearer {expired}", {403}),
]


def header(template: str | None, tokens: dict[str, Any]) -> dict[str, str]:
    if template is None:
        return {}
    value = template.format(
        run=tokens["run"].pk, other=tokens["other"], ended=tokens["ended"], expired=tokens["expired"]
    )
    return {"Authorization": value}


@pytest.mark.parametrize(("name", "template", "expected"), CASES, ids=[c[0] for c in CASES])
def test_relay_question_refuses_every_bad_token(
    app_server: Any, tokens: dict[str, Any], name: str, template: str | None, expected: set[int | None]
) -> None:
    response = httpx.post(
        f"{app_server.url}/api/askuser/relay-question", json=QUESTION, headers=header(template, tokens)
    )
    if expected == {None}:
        # Another run's token is genuine: it may only ever create a question on ITS run.
        assert response.status_code == 201
        question = Question.objects.get(question_id=response.json()["question_id"])
        assert question.run_id == tokens["other_run"].pk
        return
    assert response.status_code in expected, response.text
    assert not Question.objects.filter(run=tokens["run"]).exists()


@pytest.mark.parametrize(("name", "template", "expected"), CASES, ids=[c[0] for c in CASES])
def test_poll_answer_refuses_every_bad_token(
    app_server: Any, tokens: dict[str, Any], name: str, template: str | None, expected: set[int | None]
) -> None:
    created = httpx.post(
        f"{app_server.url}/api/askuser/relay-question",
        json=QUESTION,
        headers={"Authorization": f"Bearer {tokens['valid']}"},
    )
    assert created.status_code == 201
    question_id = created.json()["question_id"]
    response = httpx.get(
        f"{app_server.url}/api/askuser/poll-answer",
        params={"question_id": question_id},
        headers=header(template, tokens),
        timeout=40,
    )
    if expected == {None}:
        assert response.status_code == 404  # another run's token cannot see this question
        return
    assert response.status_code in expected, response.text


def test_a_browser_session_without_a_token_is_refused_by_the_relay(
    app_server: Any, tokens: dict[str, Any]
) -> None:
    browser = login_client(app_server, "alice", "alice-password")
    assert browser.post("/api/askuser/relay-question", json=QUESTION).status_code == 401
    assert (
        browser.get(
            "/api/askuser/poll-answer", params={"question_id": "00000000-0000-0000-0000-000000000000"}
        ).status_code
        == 401
    )
    assert not Question.objects.exists()


def test_valid_token_relays_and_polls(app_server: Any, tokens: dict[str, Any]) -> None:
    auth = {"Authorization": f"Bearer {tokens['valid']}"}
    created = httpx.post(f"{app_server.url}/api/askuser/relay-question", json=QUESTION, headers=auth)
    assert created.status_code == 201
    assert Run.objects.get(pk=tokens["run"].pk).status == "waiting_for_user"
    bad_body = httpx.post(f"{app_server.url}/api/askuser/relay-question", json={"question": ""}, headers=auth)
    assert bad_body.status_code == 422


def test_a_run_of_this_process_is_checked_here_and_its_token_dies_with_the_run(
    app_server: Any, alice: Any
) -> None:
    """The process that supervises a run checks its token without Redis (the MCP server's
    calls land there in the embedded default): Redis losing the key (a restart without
    persistence) does not cut the run off, a wrong token for the run is still refused,
    and once the run's relay session closes the token is refused at once."""
    run = active_run(make_project(owner=alice), alice)
    session, token = open_session(run)
    forget_token_in_redis(run.pk)
    relay = f"{app_server.url}/api/askuser/relay-question"

    created = httpx.post(relay, json=QUESTION, headers={"Authorization": f"Bearer {token}"})
    assert created.status_code == 201, created.text
    assert Question.objects.get(question_id=created.json()["question_id"]).run_id == run.pk
    forged = f"pmr_{run.pk}_" + "A" * 43
    assert httpx.post(relay, json=QUESTION, headers={"Authorization": f"Bearer {forged}"}).status_code == 403

    asyncio.run(runtime.relay_session_close(session))
    late = httpx.post(relay, json=QUESTION, headers={"Authorization": f"Bearer {token}"})
    assert late.status_code == 403, late.text  # Redis no longer knows it, and neither does this process
    assert Question.objects.filter(run=run).count() == 1


@pytest.fixture
def pending(app_server: Any, alice: Any) -> dict[str, Any]:
    project = make_project(owner=alice)
    run = active_run(project, alice)
    _session, token = open_session(run)
    created = httpx.post(
        f"{app_server.url}/api/askuser/relay-question",
        json=QUESTION,
        headers={"Authorization": f"Bearer {token}"},
    )
    return {"question_id": created.json()["question_id"], "run": run}


def test_submit_answer_anonymous_is_refused(app_server: Any, pending: dict[str, Any]) -> None:
    body = {"question_id": pending["question_id"], "answer": "x"}
    # Without a CSRF cookie the CSRF check refuses first; with one, authentication does.
    assert httpx.post(f"{app_server.url}/api/askuser/submit-answer", json=body).status_code == 403
    anonymous = httpx.Client(base_url=app_server.url)
    anonymous.get("/accounts/login/")
    token = anonymous.cookies["csrftoken"]
    response = anonymous.post(
        "/api/askuser/submit-answer",
        json=body,
        headers={"X-CSRFToken": token, "Referer": app_server.url + "/"},
    )
    assert response.status_code == 401
    assert Question.objects.get(question_id=pending["question_id"]).status == "pending"


def test_submit_answer_with_a_signed_out_session_is_401(app_server: Any, pending: dict[str, Any]) -> None:
    owner = login_client(app_server, "alice", "alice-password")
    stale = owner.cookies["sessionid"]
    assert owner.post("/accounts/logout/").status_code == 302
    owner.cookies.set("sessionid", stale)  # a browser that kept the signed-out cookie

    response = owner.post(
        "/api/askuser/submit-answer", json={"question_id": pending["question_id"], "selectedOptions": [0]}
    )

    assert response.status_code == 401
    assert response.json() == {"detail": "Sign in first.", "code": "unauthorized"}
    assert Question.objects.get(question_id=pending["question_id"]).status == "pending"


def test_submit_answer_by_another_user_is_404(app_server: Any, pending: dict[str, Any], bob: Any) -> None:
    other = login_client(app_server, "bob", "bob-password")
    response = other.post(
        "/api/askuser/submit-answer", json={"question_id": pending["question_id"], "selectedOptions": [0]}
    )
    assert response.status_code == 404
    assert Question.objects.get(question_id=pending["question_id"]).status == "pending"


def test_submit_answer_without_csrf_is_403(app_server: Any, pending: dict[str, Any]) -> None:
    owner = login_client(app_server, "alice", "alice-password")
    del owner.headers["X-CSRFToken"]
    response = owner.post(
        "/api/askuser/submit-answer", json={"question_id": pending["question_id"], "selectedOptions": [0]}
    )
    assert response.status_code == 403
    assert Question.objects.get(question_id=pending["question_id"]).status == "pending"


def test_submit_answer_by_a_member_is_accepted(app_server: Any, pending: dict[str, Any], bob: Any) -> None:
    pending["run"].conversation.project.members.add(bob)
    member = login_client(app_server, "bob", "bob-password")
    response = member.post(
        "/api/askuser/submit-answer", json={"question_id": pending["question_id"], "selectedOptions": [1]}
    )
    assert response.status_code == 200, response.text
    question = Question.objects.get(question_id=pending["question_id"])
    assert (
        question.status == "answered"
        and question.answered_by == bob
        and question.answers == {"Proceed?": "No"}
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"selectedOptions": [5]}, "Option 5 does not exist for “Proceed?” (it has 2 options)."),
        (
            {"selectedOptions": [0, 1]},
            "“Proceed?” takes one choice: pick one option or type an answer, not both.",
        ),
        ({"answer": "   "}, "An answer is required for “Proceed?”."),
        ({"answers": {"Something else?": "Yes"}}, "“Something else?” is not one of this card's questions."),
    ],
)
def test_invalid_answers_are_422_and_change_nothing(
    app_server: Any, pending: dict[str, Any], body: dict[str, Any], message: str
) -> None:
    owner = login_client(app_server, "alice", "alice-password")
    response = owner.post("/api/askuser/submit-answer", json={"question_id": pending["question_id"], **body})
    assert response.status_code == 422
    assert response.json()["detail"] == message
    assert Question.objects.get(question_id=pending["question_id"]).status == "pending"


def test_the_relay_token_never_appears_in_logs(
    app_server: Any, alice: Any, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(ask("Log check?", ["Yes"]), QUOTE))
    card = next_question(client, started["events_url"])
    [config] = list(Path(app_server.secrets_dir()).glob("run-*/ask-user.json"))
    token = json.loads(config.read_text())["relayToken"]
    assert (config.stat().st_mode & 0o777) == 0o600 and (config.parent.stat().st_mode & 0o777) == 0o700
    assert submit_answer(client, card.data["question_id"], selectedOptions=[0]).status_code == 200
    events = read_sse(client, started["events_url"])
    assert not config.parent.exists(), "the per-run secrets directory is removed when the run ends"
    captured = capfd.readouterr()
    everything = "\n".join(r.getMessage() for r in caplog.records) + captured.out + captured.err
    assert token not in everything
    assert token not in json.dumps([e.data for e in events])
    # Nor in what is kept: the database, the workspace, the CLI's home with its transcripts.
    stored = [
        list(RunEvent.objects.values_list("data", flat=True)),
        list(Run.objects.values_list("error", "usage")),
        list(Question.objects.values_list("questions", "answers", "delivery_mismatch")),
    ]
    assert token not in json.dumps(stored, default=str)
    kept_files = [p for p in Path(settings.STORAGE_ROOT).rglob("*") if p.is_file()]
    assert kept_files, "the workspace and the CLI's session files are there to search"
    assert not [p for p in kept_files if token.encode() in p.read_bytes()]
    # The token is dead the moment the run ended.
    late = httpx.post(
        f"{app_server.url}/api/askuser/relay-question",
        json=QUESTION,
        headers={"Authorization": f"Bearer {token}"},
    )
    assert late.status_code == 410
