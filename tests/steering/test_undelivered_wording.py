"""``steering.undelivered_event``: what a card or a bubble says when Claude never read it."""

from __future__ import annotations

import pytest

from promptmgr.steering import (
    MSG_NOT_DELIVERED_CANCELLED,
    MSG_NOT_DELIVERED_FAILED,
    InboxMessage,
    undelivered_event,
)

pytestmark = pytest.mark.unit


def message(**fields: str) -> InboxMessage:
    return InboxMessage(message_id="m-1", text="Hello", user_id=1, username="alice", **fields)


def test_a_typed_message_is_called_a_message_and_names_no_question() -> None:
    assert undelivered_event(message(), MSG_NOT_DELIVERED_CANCELLED) == {
        "message_id": "m-1",
        "detail": "The run was cancelled before Claude read this message.",
    }


def test_an_answer_is_called_an_answer_and_names_its_question_for_the_card() -> None:
    answer = message(kind="late_answer", question_id="q-1")

    event = undelivered_event(answer, MSG_NOT_DELIVERED_FAILED, error="Too many runs.")

    assert event == {
        "message_id": "m-1",
        "detail": "Claude never read this answer, and it could not start the next prompt: Too many runs.",
        "question_id": "q-1",
    }
