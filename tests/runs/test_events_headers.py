"""The events endpoint's response headers, as a real client and any proxy in between see them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import login_client, make_project, read_sse, script, start_run

pytestmark = pytest.mark.e2e


def test_the_event_stream_is_sse_and_tells_proxies_and_caches_not_to_hold_it(
    app_server: Any, alice: Any
) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "Headers first."}))

    with client.stream("GET", started["events_url"]) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"] == "text/event-stream"
        assert response.headers["Cache-Control"] == "no-cache"
        assert response.headers["X-Accel-Buffering"] == "no"

    # Let the run finish before the server goes away.
    assert read_sse(client, started["events_url"])[-1].data == {"status": "completed"}
