"""Messages sent to a running turn, on the run supervisor's side.

A person's message (``POST /api/runs/{id}/messages``) or a late answer to an expired
question is queued in the run's inbox in Redis (``live.inbox_push``), which wakes the
supervisor wherever it runs. ``RunInbox`` writes each message into the turn's stream-json
input (``engines.inbox``) and, once the CLI took it in, says how: into the running turn, or
as the start of its next turn (``user_message_delivered``). When the run ends, whatever the
turn never took in goes on as the conversation's next prompt (``services.messages``), or,
after a cancel, is reported as not delivered. So do answers to its questions that the turn
never read (``askuser.unread_answers_take``): the CLI died, or the run was cancelled, after
the person answered and before the waiting tool took the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from askuser import facade as askuser

from . import live
from .engines.base import Turn
from .models import RunStatus

logger = logging.getLogger(__name__)

Emit = Callable[[str, dict[str, Any]], Awaitable[None]]

# "{what}": "message", or "answer" for an answer to one of the run's questions.
MSG_NOT_DELIVERED_CANCELLED = "The run was cancelled before Claude read this {what}."
MSG_NOT_DELIVERED_FAILED = "Claude never read this {what}, and it could not start the next prompt: {error}"


@dataclass(frozen=True)
class InboxMessage:
    """A message on its way to Claude: typed by a person, or a late answer to ``question_id``."""

    message_id: str
    text: str
    user_id: int
    username: str
    kind: str = "message"  # "message" | "late_answer"
    question_id: str = ""

    @classmethod
    def late_answer(cls, late: askuser.LateAnswer) -> InboxMessage:
        """An answer on its way as a message: its author is who answered."""
        return cls(
            message_id=str(uuid.uuid4()),
            text=late.text,
            user_id=late.user.pk,
            username=late.user.get_username(),
            kind="late_answer",
            question_id=late.question_id,
        )

    def wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> InboxMessage:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def delivered_event(message: InboxMessage, delivery: str, run_id: int, **extra: Any) -> dict[str, Any]:
    """The ``user_message_delivered`` event's data."""
    return {
        "message_id": message.message_id,
        "delivery": delivery,
        "run_id": run_id,
        "kind": message.kind,
        "question_id": message.question_id or None,
        **extra,
    }


def undelivered_event(message: InboxMessage, wording: str, **fields: str) -> dict[str, Any]:
    """The ``user_message_undelivered`` event's data: one of the ``MSG_NOT_DELIVERED`` wordings
    filled in with ``fields`` (and the card's question, for an answer)."""
    what = "answer" if message.question_id else "message"
    event: dict[str, Any] = {"message_id": message.message_id, "detail": wording.format(what=what, **fields)}
    if message.question_id:
        event["question_id"] = message.question_id
    return event


class RunInbox:
    """Takes the run's messages from Redis into its turn and reports how each reached Claude."""

    def __init__(self, run_id: int, emit: Emit) -> None:
        self.run_id = run_id
        self._emit = emit
        self._turn: Turn | None = None
        self._written: dict[str, InboxMessage] = {}  # in the turn's input, not yet taken in
        self._held: list[InboxMessage] = []  # the turn took no more input
        self._wake = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None

    def attach(self, turn: Turn) -> None:
        """The turn started: messages that came meanwhile go in now, later ones as they come."""
        self._turn = turn
        self._pump = asyncio.create_task(self._pump_loop(), name=f"inbox-{self.run_id}")
        self.wake()

    def wake(self) -> None:
        self._wake.set()

    async def _pump_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._deliver_waiting()
            except Exception:
                # A Redis hiccup: the idle tick wakes the pump again in 2 s.
                logger.warning("run %s: could not take its messages", self.run_id, exc_info=True)

    async def _deliver_waiting(self) -> None:
        turn = self._turn
        if turn is None:
            return
        for raw in await live.inbox_take(self.run_id):
            message = InboxMessage.from_wire(raw)
            self._written[message.message_id] = message
            if not await turn.send_message(message.text, message.message_id):
                del self._written[message.message_id]
                self._held.append(message)

    async def report_deliveries(self) -> None:
        """Say how the messages the CLI took in since the last call reached Claude."""
        if self._turn is None:
            return
        for delivery in self._turn.take_deliveries():
            message = self._written.pop(delivery.message_id, None)
            if message is None:
                continue
            await self._emit(
                "user_message_delivered", delivered_event(message, delivery.delivery, self.run_id)
            )
            if message.kind == "late_answer":
                await askuser.late_answer_delivered(
                    question_id=message.question_id, delivery=delivery.delivery, run_id=self.run_id
                )

    async def close(self, *, status: str, error: str = "") -> None:
        """The run is over: seal the inbox, and send on (or report) what Claude never read."""
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        await self.report_deliveries()
        # Answers first: they answer what Claude last asked.
        unread = [InboxMessage.late_answer(a) for a in await askuser.unread_answers_take(self.run_id)]
        unread += self._held
        if self._turn is not None:
            unread += [self._written[m] for m in self._turn.unstarted_messages() if m in self._written]
        unread += [InboxMessage.from_wire(raw) for raw in await live.inbox_seal(self.run_id)]
        if not unread:
            return
        if status == RunStatus.CANCELLED:
            for message in unread:
                await self._emit(
                    "user_message_undelivered", undelivered_event(message, MSG_NOT_DELIVERED_CANCELLED)
                )
            return
        # Imported here: the runs service starts runs through the runner, which imports this.
        from .services import messages

        try:
            started = await messages.next_prompt_start(run_id=self.run_id, messages=unread)
        except Exception as exc:
            logger.warning("run %s: its unread messages could not start the next prompt", self.run_id)
            error = str(getattr(exc, "detail", None) or exc)
            for message in unread:
                await self._emit(
                    "user_message_undelivered",
                    undelivered_event(message, MSG_NOT_DELIVERED_FAILED, error=error),
                )
            return
        for message in unread:
            await self._emit("user_message_delivered", delivered_event(message, **started))
