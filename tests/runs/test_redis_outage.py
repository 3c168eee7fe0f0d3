"""A Redis outage: clear errors, nothing half-written, no process left behind."""

from __future__ import annotations

from typing import Any

import pytest

from promptmgr.models import Conversation, Run
from tests.helpers import (
    SLOW_TEXT,
    PrivateRedis,
    login_client,
    make_project,
    processes_in,
    read_sse,
    run_workdir,
    script,
    start_run,
    wait_until,
)

pytestmark = pytest.mark.e2e


def test_starting_a_run_without_redis_is_503_and_writes_nothing(
    app_server: Any, alice: Any, private_redis: PrivateRedis
) -> None:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    private_redis.kill()
    response = client.post(f"/api/projects/{project.pk}/runs", json={"prompt": "hello"})
    assert response.status_code == 503
    assert response.json()["detail"].startswith("The live service (Redis) is unreachable")
    assert not Run.objects.exists()
    assert not Conversation.objects.exists()


def test_redis_gone_past_the_outage_limit_fails_the_run_and_reaps_the_cli(
    app_server: Any, alice: Any, private_redis: PrivateRedis, settings: Any
) -> None:
    # A run holds its events through a shorter outage (tests/hardening/test_redis_outage.py).
    settings.REDIS_OUTAGE_SECONDS = 3
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(SLOW_TEXT))
    seen = read_sse(client, started["events_url"], until=lambda e: e.event == "text_delta")
    private_redis.kill()

    def ended() -> bool:
        return not Run.objects.get(pk=started["run_id"]).is_active

    wait_until(ended, timeout=30, what="the run to end")
    run = Run.objects.get(pk=started["run_id"])
    assert run.status == "failed"
    assert run.error.startswith("Lost the connection to Redis (Redis was unreachable for more than 3 s)")
    wait_until(
        lambda: processes_in(run_workdir(started["run_id"])) == [], timeout=10, what="the CLI to be reaped"
    )
    # What this worker had streamed is kept, so the conversation can still be shown.
    wait_until(lambda: run.events.filter(event="session").exists(), timeout=20, what="streamed events kept")
    assert run.events.filter(event="text_delta").exists()
    # And what the CLI printed while Redis was gone, held by the worker, after it in order.
    seen_text = "".join(e.data["text"] for e in seen if e.event == "text_delta")
    kept_text = "".join(
        d["text"]
        for d in run.events.filter(event="text_delta").order_by("seq").values_list("data", flat=True)
    )
    assert kept_text.startswith(seen_text) and len(kept_text) > len(seen_text), (seen_text, kept_text)
