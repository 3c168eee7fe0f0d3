"""Talking to Claude while it works: messages into a running turn, late answers, next prompts.

- ``run_message_send``: a person's message to a running run. It is queued in the run's inbox
  (``live``), shown in the stream at once (``user_message``), and the run's supervisor
  writes it into the turn (``steering``), which says how Claude got it.
- ``late_answer_submit``: the answer to a question that expired. askuser records it and
  words it (``askuser.facade.late_answer_record``); it then reaches Claude like a message:
  into the conversation's running turn, or, with none running, as its next prompt.
- ``next_prompt_start``: what a run's turn never took in starts the conversation's next
  run, resumed with its session.
"""

from __future__ import annotations

import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

from askuser import facade as askuser
from core import events
from core.errors import Gone, Invalid
from core.questions import AnswerIn
from promptmgr import live
from promptmgr.models import Run
from promptmgr.steering import InboxMessage

from . import runs as runs_service

MAX_MESSAGE_CHARS = runs_service.MAX_PROMPT_CHARS
MSG_EMPTY = "Type a message first."
MSG_TOO_LONG = f"Messages are limited to {MAX_MESSAGE_CHARS} characters."
MSG_RUN_ENDED = "This run has ended; send your message as a new prompt instead."
# How several messages Claude never read are put together as one prompt.
JOINER = "\n\n"


def events_url(run_id: int) -> str:
    return f"/api/runs/{run_id}/events"


def _clean(text: str) -> str:
    text = text.strip()
    if not text:
        raise Invalid(MSG_EMPTY, code="empty_message")
    if len(text) > MAX_MESSAGE_CHARS:
        raise Invalid(MSG_TOO_LONG, code="message_too_long")
    return text


def _user_message_event(message: InboxMessage, **extra: Any) -> dict[str, Any]:
    return {
        "message_id": message.message_id,
        "text": message.text,
        "user": message.username,
        "kind": message.kind,
        "question_id": message.question_id or None,
        **extra,
    }


async def _queue(run_id: int, message: InboxMessage, **extra: Any) -> bool:
    """Queue the message for the run's turn and show it in its stream; False once the run
    takes no more messages."""
    if not await live.inbox_push(run_id, message.wire()):
        return False
    await events.append_event(run_id, "user_message", _user_message_event(message, **extra))
    return True


async def run_message_send(*, user: Any, run_id: int, text: str) -> dict[str, Any]:
    """Send a message into a running turn: 404 for a run the user may not see, 410 once it
    has ended, 422 for an empty or over-long text."""
    text = _clean(text)
    run = await sync_to_async(runs_service.run_visible)(user=user, run_id=run_id)
    if not run.is_active:
        raise Gone(MSG_RUN_ENDED, code="run_finished")
    message = InboxMessage(
        message_id=str(uuid.uuid4()), text=text, user_id=user.pk, username=user.get_username()
    )
    if not await _queue(run.pk, message):
        raise Gone(MSG_RUN_ENDED, code="run_finished")
    return {"message_id": message.message_id, "run_id": run.pk, "status": "queued"}


def _active_run_of(conversation_id: int) -> Run | None:
    return Run.objects.active().filter(conversation_id=conversation_id).order_by("-created_at", "-id").first()


def _run_and_author(run_id: int, user_id: int) -> tuple[Run, Any]:
    run = Run.objects.select_related("conversation").get(pk=run_id)
    return run, get_user_model().objects.get(pk=user_id)


async def _forward_or_start(
    *, conversation_id: int, project_id: int, author: Any, messages: list[InboxMessage]
) -> dict[str, Any]:
    """Into the conversation's running turn if it has one, else as its next prompt."""
    active = await sync_to_async(_active_run_of)(conversation_id)
    if active is not None and all([await _queue(active.pk, m) for m in messages]):
        return {"delivery": "forwarded", "run_id": active.pk, "events_url": events_url(active.pk)}
    run = await runs_service.run_start(
        user=author,
        project_id=project_id,
        prompt=JOINER.join(m.text for m in messages),
        conversation_id=conversation_id,
    )
    for message in messages:
        if message.kind == "late_answer":
            await askuser.late_answer_delivered(
                question_id=message.question_id, delivery="next_prompt", run_id=run.pk
            )
    return {"delivery": "next_prompt", "run_id": run.pk, "events_url": events_url(run.pk)}


async def next_prompt_start(*, run_id: int, messages: list[InboxMessage]) -> dict[str, Any]:
    """Messages the run's turn never read go on in its conversation (the run has ended):
    ``{delivery, run_id, events_url}``. Started by the first message's author."""
    run, author = await sync_to_async(_run_and_author)(run_id, messages[0].user_id)
    # The ending run's slot is free already: it must not count against its own follow-up.
    await live.release_run_slots([run.pk], run.user_id)
    return await _forward_or_start(
        conversation_id=run.conversation_id,
        project_id=run.conversation.project_id,
        author=author,
        messages=messages,
    )


async def late_answer_submit(*, user: Any, question_id: str, body: AnswerIn) -> dict[str, Any]:
    """Answer a question that expired: Claude gets the answer as a user message.

    ``{question_id, answers, delivery, run_id, events_url}``: ``delivery`` is "pending" while
    the running turn has yet to take it in (its ``user_message_delivered`` event tells how),
    "forwarded" into a newer run of the conversation, or "next_prompt" for a new run.
    """
    late = await askuser.late_answer_record(question_id=question_id, user=user, body=body)
    message = InboxMessage.late_answer(late)
    answered = {"question_id": late.question_id, "answers": late.answers}
    run = await sync_to_async(Run.objects.get)(pk=late.run_id)
    if run.is_active and await _queue(run.pk, message, answers=late.answers):
        return {**answered, "delivery": "pending", "run_id": run.pk, "events_url": events_url(run.pk)}
    conversation = await sync_to_async(lambda: run.conversation)()
    started = await _forward_or_start(
        conversation_id=run.conversation_id,
        project_id=conversation.project_id,
        author=user,
        messages=[message],
    )
    return {**answered, **started}
