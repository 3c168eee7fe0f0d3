"""A run's events in the database: what is kept after Redis lets the stream go."""

from __future__ import annotations

from asgiref.sync import sync_to_async

from core.events import Event, read_events

from .models import RunEvent


def for_storage(events: list[Event]) -> list[Event]:
    """What the database keeps: everything but the text deltas a complete
    ``assistant_text`` repeats (deltas after the last one, e.g. of a cancelled reply, stay)."""
    last_text = max((i for i, e in enumerate(events) if e.event == "assistant_text"), default=-1)
    return [e for i, e in enumerate(events) if e.event != "text_delta" or i > last_text]


def persist_events(run_id: int, events: list[Event]) -> None:
    """Keep the run's events in the database so the conversation outlives Redis (a NUL
    character in them as U+FFFD: ``RunEvent.data`` is a ``core.storable`` field)."""
    RunEvent.objects.bulk_create(
        [RunEvent(run_id=run_id, seq=e.id, event=e.event, data=e.data) for e in for_storage(events)],
        ignore_conflicts=True,
        batch_size=500,
    )


async def all_events(run_id: int, *, after: int = 0) -> list[Event]:
    """The run's events in Redis after the id ``after`` (all of them by default)."""
    events: list[Event] = []
    while batch := await read_events(run_id, after, count=2000):
        events.extend(batch)
        after = batch[-1].id
    return events


async def store_events_after(run_id: int, after: int) -> int:
    """Keep the run's events in Redis after the id ``after`` in the database; the last id
    kept (``after`` when there was none). A history stored in parts must be split where no
    text is mid-reply, as at a turn's end: ``for_storage`` judges each part alone."""
    history = await all_events(run_id, after=after)
    if history:
        await sync_to_async(persist_events)(run_id, history)
    return history[-1].id if history else after
