"""Redis stopped for 30 seconds in the middle of two runs: both finish, nothing is lost.

A Redis of the test's own (the shared one on 6379 serves other tests), with an append-only
file, so a restart keeps what it held, as a production Redis does. The app runs under
uvicorn on a real port with the real CLI and the scripted model; the runs stream slowly
enough to be mid-reply when Redis goes, and on well after it is back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from core.redis import MSG_OUTAGE, MSG_RECOVERED
from promptmgr.models import Run
from tests.helpers import (
    PrivateRedis,
    SSEEvent,
    login_client,
    make_project,
    read_sse,
    script,
    start_run,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

OUTAGE_SECONDS = 30
# 160 deltas, one every 300 ms: about 50 s of reply, around the 30 s outage.
DELTAS = 160
REPLY = {"text": "y" * DELTAS, "pace_ms": 300, "chunk_chars": 1}


def ended(run_id: int) -> Callable[[], bool]:
    return lambda: not Run.objects.get(pk=run_id).is_active


def read_in_background(client: httpx.Client, url: str) -> tuple[threading.Thread, list[list[SSEEvent]]]:
    found: list[list[SSEEvent]] = []
    thread = threading.Thread(target=lambda: found.append(read_sse(client, url, timeout=180)), daemon=True)
    thread.start()
    return thread, found


def test_two_runs_outlive_a_30_second_redis_outage_and_their_streams_end_cleanly(
    private_redis: PrivateRedis, app_server: Any, alice: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    runs = [start_run(client, project.pk, script(REPLY)) for _ in range(2)]
    readers = [
        read_in_background(login_client(app_server, "alice", "alice-password"), r["events_url"]) for r in runs
    ]
    # Both mid-reply: some text has reached Redis.
    for started in runs:
        read_sse(client, started["events_url"], until=lambda e: e.event == "text_delta")

    private_redis.stop()
    stopped_at = time.monotonic()
    # Meanwhile a request that needs Redis gets a clear 503, not a 500.
    refused = client.post(f"/api/projects/{project.pk}/runs", json={"prompt": "hello"})
    time.sleep(OUTAGE_SECONDS - (time.monotonic() - stopped_at))
    private_redis.start()

    for thread, _found in readers:
        thread.join(timeout=150)
    assert refused.status_code == 503 and refused.json()["code"] == "redis_unavailable"
    for started, (_thread, found) in zip(runs, readers, strict=True):
        [events] = found
        # Every event once, in order, none lost: ids 1, 2, 3… and the whole reply.
        assert [e.id for e in events] == list(range(1, len(events) + 1))
        assert "".join(e.data["text"] for e in events if e.event == "text_delta") == REPLY["text"]
        assert events[-1].event == "done" and events[-1].data == {"status": "completed"}
        wait_until(ended(started["run_id"]), timeout=10, what="the run recorded as ended")
        assert Run.objects.get(pk=started["run_id"]).status == "completed"

    messages = [r.getMessage() for r in caplog.records]
    outage_warnings = [m for m in messages if m.startswith(MSG_OUTAGE.split("(")[0])]
    assert len(outage_warnings) == 1, outage_warnings
    assert sum(m.startswith(MSG_RECOVERED.split("%")[0]) for m in messages) == 1
    assert not [r for r in caplog.records if r.exc_info], "no traceback for an outage"
