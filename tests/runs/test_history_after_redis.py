"""A finished run's events outlive its Redis stream: the database serves them after."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core import events as run_events
from core import redis as core_redis
from promptmgr.models import Run
from promptmgr.sse import RunEventSource
from tests.helpers import login_client, make_project, read_sse, script, start_run, wait_until

pytestmark = pytest.mark.e2e


def finished_run_without_its_stream(app_server: Any, alice: Any) -> tuple[Any, dict[str, Any], list[Any]]:
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "Kept for later."}))
    events = read_sse(client, started["events_url"])
    run = Run.objects.get(pk=started["run_id"])
    wait_until(lambda: run.events.filter(event="done").exists(), timeout=5, what="the history stored")
    core_redis.get_redis().delete(run_events.events_key(run.pk), run_events.seq_key(run.pk))
    return client, started, events


def test_after_the_stream_expired_the_events_are_replayed_from_the_database(
    app_server: Any, alice: Any
) -> None:
    client, started, events = finished_run_without_its_stream(app_server, alice)

    replayed = read_sse(client, started["events_url"])

    # The database keeps everything but the deltas the complete text repeats.
    kept = [(e.id, e.event, e.data) for e in events if e.event != "text_delta"]
    assert [(e.id, e.event, e.data) for e in replayed] == kept
    tail = read_sse(client, started["events_url"], last_event_id=kept[-3][0])
    assert [e.id for e in tail] == [kept[-2][0], kept[-1][0]]


def test_a_reader_that_saw_the_stream_in_redis_falls_back_when_it_expires(
    app_server: Any, alice: Any
) -> None:
    _client, started, events = finished_run_without_its_stream(app_server, alice)
    source = RunEventSource(started["run_id"])
    source._in_redis = True  # as a reader that was tailing the stream when Redis let it go

    batch = asyncio.run(source.next_batch(0, 0.2))

    assert [e.event for e in batch] == [e.event for e in events if e.event != "text_delta"][: len(batch)]
    assert batch and batch[0].id == 1


def test_the_turns_output_is_stored_while_the_runs_changes_are_recorded(
    app_server: Any, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``done`` does not wait for a long run's whole history to be read back and written after
    the end snapshot: the turn's output is stored beside it (the snapshot below waits, up to 5
    s, to see the reply's row; before, nothing was stored until the snapshot had returned)."""
    from asgiref.sync import sync_to_async

    from promptmgr.models import RunEvent
    from promptmgr.services import changes

    seen_during_snapshot: list[bool] = []
    record_end = changes.record_end

    async def snapshot_seeing_the_history(run_id: int) -> dict[str, Any] | None:
        stored = sync_to_async(RunEvent.objects.filter(run_id=run_id, event="assistant_text").exists)
        for _ in range(100):
            if await stored():
                break
            await asyncio.sleep(0.05)
        seen_during_snapshot.append(await stored())
        recorded: dict[str, Any] | None = await record_end(run_id)
        return recorded

    # The runner calls it through the module (``run_changes.record_end``).
    monkeypatch.setattr(changes, "record_end", snapshot_seeing_the_history)
    client, started, events = finished_run_without_its_stream(app_server, alice)

    assert seen_during_snapshot == [True]
    # Stored in two parts, yet every event once and the history exactly as streamed.
    replayed = read_sse(client, started["events_url"])
    kept = [(e.id, e.event, e.data) for e in events if e.event != "text_delta"]
    assert [(e.id, e.event, e.data) for e in replayed] == kept
    assert RunEvent.objects.filter(run_id=started["run_id"]).count() == len(kept)
