"""The page's click channel (askuser/clicks.py): answers and decisions over one WebSocket,
on the app served by uvicorn, with the rights and errors of their POST endpoints."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from askuser import clicks
from askuser.models import PermissionRequest, PermissionStatus, Question, QuestionStatus
from tests.conftest import LiveServer
from tests.helpers import PrivateRedis, ask_permission, login_client, open_question, owned_run, wait_until

pytestmark = pytest.mark.e2e


def ws_url(server: LiveServer, path: str = clicks.PATH) -> str:
    return server.url.replace("http://", "ws://") + path


def channel(server: LiveServer, client: httpx.Client | None, origin: str | None = "same") -> ClientConnection:
    headers: dict[str, str] = {}
    if client is not None:
        headers["Cookie"] = "; ".join(f"{name}={value}" for name, value in client.cookies.items())
    if origin is not None:
        headers["Origin"] = server.url if origin == "same" else origin
    return connect(ws_url(server), additional_headers=headers, open_timeout=10)


def click(socket: ClientConnection, click_id: Any, kind: str, body: Any) -> dict[str, Any]:
    socket.send(json.dumps({"id": click_id, "kind": kind, "body": body}))
    reply: dict[str, Any] = json.loads(socket.recv(timeout=10))
    return reply


def alices_question(alice: Any) -> str:
    """An open question in a new run of alice's, owned by this process as a supervised run is."""
    return asyncio.run(open_question(asyncio.run(owned_run(alice))))


@pytest.fixture
def signed_in(app_server: LiveServer, alice: Any, bob: Any) -> Iterator[dict[str, httpx.Client]]:
    clients = {
        "alice": login_client(app_server, "alice", "alice-password"),
        "bob": login_client(app_server, "bob", "bob-password"),
    }
    yield clients
    for client in clients.values():
        client.close()


def test_an_answer_over_the_channel_is_recorded_and_acknowledged_with_the_endpoints_body(
    app_server: LiveServer, signed_in: dict[str, httpx.Client], alice: Any
) -> None:
    question_id = alices_question(alice)
    with channel(app_server, signed_in["alice"]) as socket:
        reply = click(socket, 1, "answer", {"question_id": question_id, "selectedOptions": [0]})
    assert reply["id"] == 1 and reply["status"] == 200, reply
    assert reply["body"]["question_id"] == question_id
    assert reply["body"]["answered_by"] == "alice"
    assert reply["body"]["answers"] == {"Proceed?": "Yes"}
    question = Question.objects.get(question_id=question_id)
    assert question.status == QuestionStatus.ANSWERED and question.answered_by_id == alice.pk
    # A second answer, over the endpoint this time, is the endpoint's 409: one record, one answer.
    second = signed_in["alice"].post(
        "/api/askuser/submit-answer", json={"question_id": question_id, "selectedOptions": [1]}
    )
    assert second.status_code == 409
    assert Question.objects.get(question_id=question_id).answers == {"Proceed?": "Yes"}


def test_a_decision_over_the_channel_is_recorded_and_a_second_one_is_409(
    app_server: LiveServer, signed_in: dict[str, httpx.Client], alice: Any
) -> None:
    run = asyncio.run(owned_run(alice))
    request_id = asyncio.run(ask_permission(run))
    with channel(app_server, signed_in["alice"]) as socket:
        first = click(socket, 7, "decision", {"request_id": request_id, "decision": "allow"})
        second = click(socket, 8, "decision", {"request_id": request_id, "decision": "deny"})
    assert first["id"] == 7 and first["status"] == 200, first
    assert first["body"]["request_id"] == request_id and first["body"]["decision"] == "allow"
    assert second["id"] == 8 and second["status"] == 409, second
    assert second["body"]["code"] == "already_decided"
    assert PermissionRequest.objects.get(request_id=request_id).decision == "allow"


def test_another_users_question_and_request_are_404_and_stay_open(
    app_server: LiveServer, signed_in: dict[str, httpx.Client], alice: Any
) -> None:
    run = asyncio.run(owned_run(alice))
    question_id = asyncio.run(open_question(run))
    request_id = asyncio.run(ask_permission(run))
    with channel(app_server, signed_in["bob"]) as socket:
        answer = click(socket, 1, "answer", {"question_id": question_id, "selectedOptions": [0]})
        decision = click(socket, 2, "decision", {"request_id": request_id, "decision": "allow"})
    assert answer["status"] == 404 and answer["body"]["code"] == "not_found", answer
    assert decision["status"] == 404 and decision["body"]["code"] == "not_found", decision
    assert Question.objects.get(question_id=question_id).status == QuestionStatus.PENDING
    assert PermissionRequest.objects.get(request_id=request_id).decision == ""


def test_a_handshake_from_another_site_is_refused(
    app_server: LiveServer, signed_in: dict[str, httpx.Client]
) -> None:
    for origin in ("http://evil.example", None):
        with pytest.raises(InvalidStatus) as refused:
            channel(app_server, signed_in["alice"], origin=origin)
        assert refused.value.response.status_code == 403


def test_a_page_that_is_not_signed_in_is_told_so_in_the_close_code(app_server: LiveServer, db: Any) -> None:
    anonymous = httpx.Client(base_url=app_server.url)
    anonymous.cookies.set("sessionid", "no-such-session")
    for client in (None, anonymous):
        with channel(app_server, client) as socket, pytest.raises(ConnectionClosed):
            socket.recv(timeout=10)
        assert socket.close_code == clicks.CLOSE_NOT_SIGNED_IN


def test_after_signing_out_a_click_on_the_open_socket_is_401_and_changes_nothing(
    app_server: LiveServer, signed_in: dict[str, httpx.Client], alice: Any
) -> None:
    question_id = alices_question(alice)
    client = signed_in["alice"]
    with channel(app_server, client) as socket:
        assert client.post("/accounts/logout/").status_code == 302
        reply = click(socket, 3, "answer", {"question_id": question_id, "selectedOptions": [0]})
    assert reply["status"] == 401 and reply["body"] == {"detail": "Sign in first.", "code": "unauthorized"}
    assert Question.objects.get(question_id=question_id).status == QuestionStatus.PENDING


def test_bad_messages_get_the_endpoints_errors_and_the_socket_stays_usable(
    app_server: LiveServer, signed_in: dict[str, httpx.Client], alice: Any
) -> None:
    question_id = alices_question(alice)
    with channel(app_server, signed_in["alice"]) as socket:
        socket.send("{not json")
        not_json = json.loads(socket.recv(timeout=10))
        socket.send("[1, 2]")
        not_object = json.loads(socket.recv(timeout=10))
        no_id = click(socket, "x", "answer", {})
        unknown = click(socket, 4, "cancel", {})
        nul = click(socket, 5, "answer", {"question_id": question_id, "otherText": "a\x00b"})
        invalid = click(socket, 6, "answer", {"question_id": "not-a-uuid"})
        missing = click(
            socket, 7, "answer", {"question_id": "00000000-0000-4000-8000-000000000000", "answer": "x"}
        )
        answered = click(socket, 8, "answer", {"question_id": question_id, "selectedOptions": [1]})
    assert (not_json["id"], not_json["status"], not_json["body"]["code"]) == (None, 422, "invalid_json")
    assert (not_object["status"], not_object["body"]["code"]) == (422, "invalid_json")
    assert (no_id["id"], no_id["status"], no_id["body"]["detail"]) == (None, 422, clicks.MSG_NO_ID)
    assert (unknown["id"], unknown["status"]) == (4, 422) and "'cancel'" in unknown["body"]["detail"]
    assert (nul["id"], nul["status"], nul["body"]["code"]) == (5, 422, "nul_character")
    assert (invalid["id"], invalid["status"], invalid["body"]["code"]) == (6, 422, "invalid")
    assert invalid["body"]["errors"][0]["loc"] == ["body", "payload", "question_id"]
    assert (missing["id"], missing["status"]) == (7, 404)
    assert (answered["id"], answered["status"]) == (8, 200)
    assert Question.objects.get(question_id=question_id).answers == {"Proceed?": "No"}


def test_a_message_larger_than_the_servers_limit_is_413(
    app_server: LiveServer, signed_in: dict[str, httpx.Client], settings: Any
) -> None:
    with channel(app_server, signed_in["alice"]) as socket:
        reply = click(socket, 1, "answer", {"answer": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)})
    assert reply["status"] == 413 and reply["body"]["code"] == "too_large"


def test_no_other_websocket_is_served(app_server: LiveServer, signed_in: dict[str, httpx.Client]) -> None:
    cookies = "; ".join(f"{name}={value}" for name, value in signed_in["alice"].cookies.items())
    with pytest.raises(InvalidStatus) as refused:
        connect(
            ws_url(app_server, "/api/runs/1/events"),
            additional_headers={"Cookie": cookies, "Origin": app_server.url},
        )
    assert refused.value.response.status_code == 403


def test_a_click_whose_page_closes_before_the_reply_is_still_recorded(
    app_server: LiveServer, signed_in: dict[str, httpx.Client], alice: Any
) -> None:
    question_id = alices_question(alice)
    with channel(app_server, signed_in["alice"]) as socket:
        socket.send(
            json.dumps({"id": 1, "kind": "answer", "body": {"question_id": question_id, "answer": "Yes"}})
        )
    wait_until(
        lambda: Question.objects.get(question_id=question_id).status == QuestionStatus.ANSWERED,
        timeout=10,
        what="the answer of a page that went away",
    )


def test_with_redis_down_a_decision_is_recorded_and_the_socket_serves_the_next_click_once_it_is_back(
    private_redis: PrivateRedis, app_server: LiveServer, alice: Any
) -> None:
    # The decision is stored before Redis fails its hand-off, so it stands and is said to
    # (tests/askuser/test_decision_after_redis_failure.py: Claude takes it from the database).
    client = login_client(app_server, "alice", "alice-password")
    run = asyncio.run(owned_run(alice))
    first, second = asyncio.run(ask_permission(run)), asyncio.run(ask_permission(run))
    with channel(app_server, client) as socket:
        with private_redis.down():
            recorded = click(socket, 1, "decision", {"request_id": first, "decision": "allow"})
        allowed = click(socket, 2, "decision", {"request_id": second, "decision": "allow"})
    assert recorded["status"] == 200 and recorded["body"]["decision"] == "allow", recorded
    assert PermissionRequest.objects.get(request_id=first).status == PermissionStatus.ALLOWED
    assert allowed["status"] == 200, allowed


def test_a_message_above_the_sockets_limit_ends_that_socket_only(
    app_server: LiveServer, signed_in: dict[str, httpx.Client], alice: Any
) -> None:
    # uvicorn's --ws-max-size (4 MiB, Makefile's UVICORN_WS) refuses it before it is buffered
    # whole: the socket is closed (1009) or reset while the client is still sending.
    with channel(app_server, signed_in["alice"]) as socket, pytest.raises(ConnectionClosed):
        socket.send(json.dumps({"id": 1, "kind": "answer", "body": {"answer": "x" * 5_000_000}}))
        socket.recv(timeout=10)
    question_id = alices_question(alice)
    with channel(app_server, signed_in["alice"]) as socket:
        reply = click(socket, 2, "answer", {"question_id": question_id, "selectedOptions": [0]})
    assert reply["status"] == 200, reply


def test_an_origin_in_csrf_trusted_origins_may_connect_as_djangos_csrf_check_allows(
    app_server: LiveServer, signed_in: dict[str, httpx.Client], alice: Any, settings: Any
) -> None:
    settings.CSRF_TRUSTED_ORIGINS = ["https://pm.example.com"]
    question_id = alices_question(alice)
    with channel(app_server, signed_in["alice"], origin="https://pm.example.com") as socket:
        reply = click(socket, 1, "answer", {"question_id": question_id, "selectedOptions": [0]})
    assert reply["status"] == 200, reply
    with pytest.raises(InvalidStatus):
        channel(app_server, signed_in["alice"], origin="https://other.example.com")
