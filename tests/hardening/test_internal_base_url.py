"""A wrong INTERNAL_BASE_URL is caught right after start-up, with a clear sentence, instead
of a run that hangs for minutes while the CLI retries."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from promptmgr import internal_url
from promptmgr.models import Run
from tests.conftest import LiveServer
from tests.helpers import free_port, login_client, make_project, read_sse, script, start_run, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture
def serve(transactional_db: Any, model_settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Start the app on a port of its own with the INTERNAL_BASE_URL the test gives."""
    # Nothing answering gives up after this long (30 s in production).
    monkeypatch.setattr(internal_url, "DEADLINE", 3.0)
    servers: list[LiveServer] = []

    def start(internal: str | None) -> LiveServer:
        server = LiveServer(free_port())
        model_settings.INTERNAL_BASE_URL = internal or server.url
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def refused_run(server: LiveServer, project_id: int) -> Any:
    client = login_client(server, "alice", "alice-password")
    return client.post(f"/api/projects/{project_id}/runs", json={"prompt": "hello"})


def test_nothing_listening_at_internal_base_url_is_logged_and_runs_are_refused_at_once(
    serve: Any, alice: Any, caplog: pytest.LogCaptureFixture
) -> None:
    project = make_project(owner=alice)
    wrong = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    server = serve(wrong)

    wait_until(lambda: internal_url.problem() is not None, timeout=10, what="the check to give up")
    response = refused_run(server, project.pk)

    assert time.monotonic() - started < 15  # not the 179 s a hanging run took
    expected = internal_url.MSG_UNREACHABLE.format(url=wrong, reason="ConnectionRefusedError")
    assert response.status_code == 503
    assert response.json() == {"detail": expected, "code": "internal_url_unreachable"}
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == internal_url.__name__] == [
        (logging.ERROR, expected)
    ]
    assert not Run.objects.exists()


def test_another_server_at_internal_base_url_is_caught_too(
    serve: Any, alice: Any, scripted_model_url: str
) -> None:
    project = make_project(owner=alice)
    server = serve(scripted_model_url)  # an HTTP server, but not this app

    wait_until(lambda: internal_url.problem() is not None, timeout=10, what="the check")
    response = refused_run(server, project.pk)

    assert response.status_code == 503
    assert response.json()["detail"] == internal_url.MSG_OTHER_SERVER.format(url=scripted_model_url)


def test_the_right_internal_base_url_passes_the_check_and_runs_work(serve: Any, alice: Any) -> None:
    project = make_project(owner=alice)
    server = serve(None)
    wait_until(lambda: internal_url._task is not None and internal_url._task.done(), timeout=10, what="check")
    assert internal_url.problem() is None

    client = login_client(server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "fine"}))
    assert read_sse(client, started["events_url"])[-1].data == {"status": "completed"}
