"""Runs API: start a run, read its status, cancel it, and stream its events (SSE)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, StreamingHttpResponse
from ninja import Field, Router, Schema, Status
from ninja.params.functions import Header, Query

from core.errors import Invalid
from core.schemas import errors

from .models import Run
from .services import runs as runs_service
from .sse import RunEventSource, event_stream

router = Router()


class RunIn(Schema):
    prompt: str = Field(..., max_length=runs_service.MAX_PROMPT_CHARS)
    conversation_id: int | None = None


class RunStartOut(Schema):
    run_id: int
    conversation_id: int
    stream_token: str
    events_url: str


class RunOut(Schema):
    id: int
    conversation_id: int
    status: str
    engine: str
    prompt: str
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None
    error: str
    stderr_tail: str
    cost_usd: Decimal | None
    usage: dict[str, Any]
    duration_ms: int | None
    num_turns: int | None


class ConversationOut(Schema):
    id: int
    title: str
    updated_at: datetime


class ConversationListItemOut(ConversationOut):
    active_status: str | None  # queued, running or waiting_for_user while a run is unfinished


class ConversationDetailOut(ConversationOut):
    runs: list[dict[str, Any]]


def _events_url(run_id: int) -> str:
    return f"/api/runs/{run_id}/events"


@router.post(
    "/projects/{project_id}/runs",
    response={
        201: RunStartOut,
        **errors(401, 403, 404, 409, 422, 429, 503),
    },
)
async def start_run(request: HttpRequest, project_id: int, payload: RunIn) -> Status[RunStartOut]:
    run = await runs_service.run_start(
        user=request.user,
        project_id=project_id,
        prompt=payload.prompt,
        conversation_id=payload.conversation_id,
    )
    return Status(
        201,
        RunStartOut(
            run_id=run.pk,
            conversation_id=run.conversation_id,
            stream_token=str(run.stream_token),
            events_url=_events_url(run.pk),
        ),
    )


@router.get("/runs/{run_id}", response={200: RunOut, **errors(401, 404, 422)})
def get_run(request: HttpRequest, run_id: int) -> Run:
    return runs_service.run_visible(user=request.user, run_id=run_id)


@router.post(
    "/runs/{run_id}/cancel",
    response={
        202: RunOut,
        **errors(401, 403, 404, 409, 422, 503),
    },
)
async def cancel_run(request: HttpRequest, run_id: int) -> Status[Run]:
    return Status(202, await runs_service.run_cancel(user=request.user, run_id=run_id))


# The largest id a Redis stream entry can carry: larger ones cannot name an event.
MAX_EVENT_ID = 2**63 - 1
# One event of the stream (OpenAPI 3.1: the schema of an event-stream describes each event).
SSE_EVENT = {
    "type": "object",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$"},
        "event": {"type": "string", "pattern": "^[a-z_]+$"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"type": "object"},
        },
        "retry": {"type": "integer"},
    },
}
SSE_RESPONSE = {
    200: {
        "description": "The run's events as Server-Sent Events, ``done`` last (docs/design-notes.md)",
        "content": {"text/event-stream": {"schema": SSE_EVENT}},
    }
}


MSG_BAD_LAST_EVENT_ID = "last_event_id must be given once, as a whole number of 0 or more."


def stream_start(header: str | None, query: int | None) -> int:
    """The id a stream starts after: ``Last-Event-ID`` (what EventSource sends when it
    reconnects), else ``?last_event_id=``, else 0.

    A header that is not a whole number from 0 to 2^63 - 1 is ignored, and the stream
    starts from the beginning: a client reading it deduplicates by id anyway.
    """
    value = (header or "").strip()
    if value.isascii() and value.isdigit() and int(value) <= MAX_EVENT_ID:
        return int(value)
    return query or 0


@router.get(
    "/runs/{run_id}/events",
    response={200: None, **errors(401, 404, 422)},
    openapi_extra={"responses": SSE_RESPONSE},
)
async def run_events(
    request: HttpRequest,
    run_id: int,
    last_event_id: int | None = Query(None, ge=0, le=MAX_EVENT_ID),
    last_event_id_header: str | None = Header(None, alias="Last-Event-ID"),
) -> StreamingHttpResponse:
    # Pydantic's lax int takes "120.0", and a repeated parameter would pass as its last
    # copy; the schema says one integer, so anything else is refused.
    raw = request.GET.getlist("last_event_id")
    if len(raw) > 1 or (raw and not (raw[0].isascii() and raw[0].isdigit())):
        raise Invalid(MSG_BAD_LAST_EVENT_ID, code="invalid")
    await sync_to_async(runs_service.run_visible)(user=request.user, run_id=run_id)
    stream = event_stream(
        RunEventSource(run_id),
        after=stream_start(last_event_id_header, last_event_id),
        heartbeat=settings.SSE_HEARTBEAT_SECONDS,
        max_outage=settings.REDIS_OUTAGE_SECONDS,
    )
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


@router.get(
    "/projects/{project_id}/conversations",
    response={200: list[ConversationListItemOut], **errors(401, 404, 422)},
)
def list_conversations(request: HttpRequest, project_id: int) -> Any:
    project = runs_service.project_visible(user=request.user, project_id=project_id)
    return list(project.conversations.with_active_status()[:200])


@router.get(
    "/conversations/{conversation_id}",
    response={200: ConversationDetailOut, **errors(401, 404, 422)},
)
def get_conversation(request: HttpRequest, conversation_id: int) -> Any:
    conversation = runs_service.conversation_visible(user=request.user, conversation_id=conversation_id)
    return {
        "id": conversation.pk,
        "title": conversation.title,
        "updated_at": conversation.updated_at,
        "runs": runs_service.conversation_history(conversation),
    }


@router.delete(
    "/conversations/{conversation_id}",
    response={204: None, **errors(401, 403, 404, 409, 422)},
    summary="Delete a conversation; its worktree goes, its branch stays",
)
def delete_conversation(request: HttpRequest, conversation_id: int) -> Status[None]:
    runs_service.conversation_delete(user=request.user, conversation_id=conversation_id)
    return Status(204, None)
