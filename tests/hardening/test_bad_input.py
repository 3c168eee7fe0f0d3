"""Bad input gets a clear JSON error, never a 500: too large, not JSON, NUL, a bad Last-Event-ID."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from django.conf import settings

from askuser import runtime
from core import events
from core.schemas import MSG_NOT_JSON, MSG_NOT_OBJECT, MSG_NUL, MSG_TOO_LARGE
from mcp_server.approvals import approve
from promptmgr.event_history import persist_events
from promptmgr.models import Run, RunStatus
from tests.helpers import login_client, make_project, make_run, read_sse

pytestmark = pytest.mark.e2e

THREE_MB = 3 * 1024 * 1024
# Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB by default), named in the sentence.
TOO_LARGE = {"detail": MSG_TOO_LARGE.format(limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE), "code": "too_large"}


@pytest.fixture
def alice_client(app_server: Any, alice: Any) -> httpx.Client:
    return login_client(app_server, "alice", "alice-password")


def relay_config(run: Run) -> tuple[str, str]:
    """A live relay session for ``run``: its config file's path and its token."""
    session = asyncio.run(
        runtime.relay_session_open(
            run_id=run.pk, project_id=run.conversation.project_id, stream_token="s", timeout=60
        )
    )
    return str(session.config_path), json.loads(session.config_path.read_text())["relayToken"]


def test_a_3_mb_prompt_answers_413_with_the_json_error_body(alice: Any, alice_client: httpx.Client) -> None:
    project = make_project(owner=alice)

    response = alice_client.post(f"/api/projects/{project.pk}/runs", json={"prompt": "x" * THREE_MB})

    assert response.status_code == 413
    assert response.json() == TOO_LARGE
    assert not Run.objects.exists()


def test_a_3_mb_form_body_answers_413_too(alice: Any, alice_client: httpx.Client) -> None:
    # A form body is read by the CSRF check, before the operation parses anything.
    project = make_project(owner=alice)

    response = alice_client.patch(
        f"/api/projects/{project.pk}",
        content=b"name=" + b"x" * THREE_MB,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )

    assert response.status_code == 413
    assert response.json() == TOO_LARGE


def test_a_3_mb_write_approval_is_denied_with_a_sentence_saying_it_was_too_large(
    app_server: Any, alice: Any
) -> None:
    run = make_run(owner=alice, project=make_project(owner=alice))
    config_path, token = relay_config(run)
    big_write = {"file_path": "big.txt", "content": "x" * THREE_MB}

    raw = httpx.post(
        f"{app_server.url}/api/askuser/relay-permission",
        json={"tool_name": "Write", "input": big_write, "tool_use_id": "toolu_big"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    result = asyncio.run(approve(config_path, "Write", big_write, "toolu_big"))

    assert raw.status_code == 413 and raw.json() == TOO_LARGE
    # What the CLI gets from the approve tool: a deny that says why, not "could not ask".
    decision = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert decision["behavior"] == "deny"
    assert "refused the permission request" in decision["message"]
    assert TOO_LARGE["detail"] in decision["message"]


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"{not json", MSG_NOT_JSON),
        (b"\xff\xfe", MSG_NOT_JSON),
        (b"[]", MSG_NOT_OBJECT),
        (b'"x"', MSG_NOT_OBJECT),
    ],
)
def test_a_body_that_is_no_json_object_answers_422(
    alice: Any, alice_client: httpx.Client, body: bytes, detail: str
) -> None:
    project = make_project(owner=alice)

    response = alice_client.patch(
        f"/api/projects/{project.pk}", content=body, headers={"Content-Type": "application/json"}
    )

    assert response.status_code == 422
    assert response.json() == {"detail": detail, "code": "invalid_json"}


def test_nul_in_a_body_answers_422_and_changes_nothing(alice: Any, alice_client: httpx.Client) -> None:
    project = make_project(owner=alice)

    renamed = alice_client.patch(f"/api/projects/{project.pk}", json={"name": "a\x00b"})
    prompted = alice_client.post(f"/api/projects/{project.pk}/runs", json={"prompt": "hi\x00"})
    nested = alice_client.patch(f"/api/projects/{project.pk}", json={"context": "ok", "model": "m\u0000"})

    for response in (renamed, prompted, nested):
        assert response.status_code == 422
        assert response.json() == {"detail": MSG_NUL, "code": "nul_character"}
    project.refresh_from_db()
    assert project.name == "Test project" and project.context == ""
    assert not Run.objects.exists()


def test_nul_in_a_relayed_tool_input_answers_422(app_server: Any, alice: Any) -> None:
    run = make_run(owner=alice, project=make_project(owner=alice))
    _config, token = relay_config(run)

    response = httpx.post(
        f"{app_server.url}/api/askuser/relay-permission",
        json={"tool_name": "Write", "input": {"file_path": "a", "content": "\x00"}, "tool_use_id": "t"},
        headers={"Authorization": f"Bearer {token}"},
    )

    assert response.status_code == 422
    assert response.json()["code"] == "nul_character"


def test_nul_in_a_query_answers_422(alice: Any, alice_client: httpx.Client) -> None:
    project = make_project(owner=alice)

    response = alice_client.get(f"/api/projects/{project.pk}/files", params={"path": "a\x00"})

    assert response.status_code == 422
    assert response.json() == {"detail": MSG_NUL, "code": "nul_character"}


@pytest.fixture
def finished_run(alice: Any) -> Run:
    run: Run = make_run(owner=alice, status=RunStatus.COMPLETED)
    for event, data in [("prompt", {"text": "p"}), ("run_status", {"status": "completed"}), ("done", {})]:
        events.append_event_sync(run.pk, event, data)
    persist_events(run.pk, events.read_all_events_sync(run.pk))
    return run


@pytest.mark.parametrize("header", ["-1", "abc", "1.5", "1e3", "9" * 30, "1 2", "0x10"])
def test_a_last_event_id_that_names_no_event_replays_the_stream_from_the_start(
    alice_client: httpx.Client, finished_run: Run, header: str
) -> None:
    streamed = alice_client.get(
        f"/api/runs/{finished_run.pk}/events", headers={"Last-Event-ID": header}, timeout=30
    )

    assert streamed.status_code == 200
    assert [line for line in streamed.text.splitlines() if line.startswith("id:")] == [
        "id: 1",
        "id: 2",
        "id: 3",
    ]


def test_a_valid_last_event_id_still_resumes_after_it(alice_client: httpx.Client, finished_run: Run) -> None:
    resumed = read_sse(alice_client, f"/api/runs/{finished_run.pk}/events", last_event_id=2)

    assert [(e.id, e.event) for e in resumed] == [(3, "done")]


@pytest.mark.parametrize("value", ["-1", "abc", str(2**63)])
def test_a_last_event_id_query_that_is_no_event_id_answers_422(
    alice_client: httpx.Client, finished_run: Run, value: str
) -> None:
    response = alice_client.get(f"/api/runs/{finished_run.pk}/events", params={"last_event_id": value})

    assert response.status_code == 422
    assert response.json()["code"] == "invalid"


@pytest.mark.parametrize(
    "params", [{"last_event_id": "120.0"}, [("last_event_id", "1"), ("last_event_id", "2")]]
)
def test_a_last_event_id_query_that_is_not_one_whole_number_answers_422(
    alice_client: httpx.Client, finished_run: Run, params: Any
) -> None:
    response = alice_client.get(f"/api/runs/{finished_run.pk}/events", params=params)

    assert response.status_code == 422
    assert response.json()["code"] == "invalid"


def test_a_3_mb_form_to_a_page_is_refused_as_a_bad_request_not_a_500(app_server: Any) -> None:
    client = httpx.Client(base_url=app_server.url, timeout=30)
    client.get("/accounts/login/")

    response = client.post(
        "/accounts/login/",
        content=b"username=" + b"x" * THREE_MB,
        headers={"Content-Type": "application/x-www-form-urlencoded", "Referer": f"{app_server.url}/"},
    )

    # Django's own answer to RequestDataTooBig outside the API (a SuspiciousOperation).
    assert response.status_code == 400
