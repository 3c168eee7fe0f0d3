"""``can_use_tool`` for the SDK engine.

The CLI consults the permission mode and the workspace's allow and deny rules first and
calls ``can_use_tool`` only for a call it would otherwise ask the user about. The CLI
engine (``-p``) refuses every such call, so this callback does too, with the CLI's own
wording; verified with the bundled CLI: a Write is allowed under acceptEdits and asked
about under default and plan; a Bash command with an allow rule is never asked about;
ExitPlanMode is asked about in plan mode. The one exception is ``AskUserQuestion``: its
1–4 questions become a card in the shared question store, and the user's answers go back
as ``updated_input["answers"]`` (``{question text: label, "label, label" or typed text}``),
which the CLI turns into the tool result Claude reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny, ToolPermissionContext

from askuser import facade as askuser
from askuser.facade import PollResult, QuestionSource
from core.errors import DomainError
from core.questions import Handoff, questions_from_tool_input
from mcp_server.answers import CANCELLED, RUN_ENDED, SUPERSEDED, TIMED_OUT
from promptmgr.models import PermissionMode

logger = logging.getLogger(__name__)

ASK_USER_QUESTION = "AskUserQuestion"
WRITE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
PATH_KEYS = ("file_path", "notebook_path")
# How long one wait for the answer lasts before the stop flag and the expiry are checked again.
WAIT_SLICE = 1.0

MSG_NOT_GRANTED = "Claude requested permissions to use {tool}, but you haven't granted it yet."
MSG_WRITE_NOT_GRANTED = "Claude requested permissions to write to {path}, but you haven't granted it yet."
MSG_PLAN_MODE = "Cannot write to {path} while in plan mode."
MSG_QUESTIONS_OFF = "Asking the user is switched off for this project. Proceed with your best judgment."
MSG_ASK_FAILED = "Could not ask the user ({error}). Proceed with your best judgment."
MSG_CONSUMED = "the answer was collected by someone else"

PermissionResult = PermissionResultAllow | PermissionResultDeny


def answered_input(tool_input: dict[str, Any], answer: Handoff) -> dict[str, Any] | None:
    """The tool input with the user's answers, or None when the hand-off holds none.

    The card's notes go in ``annotations`` under the first question, which the CLI
    appends to that answer ("… notes: …").
    """
    answers = {question: text for question, text in answer.answers.items() if text}
    if not answers:
        return None
    updated = {**tool_input, "answers": answers}
    if answer.notes:
        first = str(tool_input["questions"][0]["question"])
        updated["annotations"] = {first: {"notes": answer.notes}}
    return updated


def refusal(tool_name: str, tool_input: dict[str, Any], *, permission_mode: str) -> str:
    """What the CLI engine's ``-p`` mode tells Claude for a call it would have asked about."""
    path = next((str(tool_input[k]) for k in PATH_KEYS if tool_input.get(k)), "")
    if tool_name in WRITE_TOOLS and path:
        if permission_mode == PermissionMode.PLAN:
            return MSG_PLAN_MODE.format(path=path)
        return MSG_WRITE_NOT_GRANTED.format(path=path)
    return MSG_NOT_GRANTED.format(tool=tool_name)


class PermissionGate:
    """The ``can_use_tool`` callback of one run."""

    def __init__(
        self,
        *,
        run_id: int,
        permission_mode: str,
        ask_user: bool,
        stopping: asyncio.Event,
        caught_up: Callable[[], Awaitable[None]],
    ) -> None:
        self.run_id = run_id
        self.permission_mode = permission_mode
        self.ask_user = ask_user
        self.stopping = stopping
        # Lets the supervisor emit the tool_use before the card, as the CLI engine orders them.
        self.caught_up = caught_up

    async def can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResult:
        if tool_name != ASK_USER_QUESTION:
            return PermissionResultDeny(
                message=refusal(tool_name, tool_input, permission_mode=self.permission_mode)
            )
        if not self.ask_user:
            return PermissionResultDeny(message=MSG_QUESTIONS_OFF)
        try:
            return await self._ask(tool_input)
        except Exception as exc:
            # An exception would reach the CLI as a protocol error; Claude gets a sentence instead.
            logger.exception("run %s: asking the user failed", self.run_id)
            return PermissionResultDeny(message=MSG_ASK_FAILED.format(error=exc))

    async def _ask(self, tool_input: dict[str, Any]) -> PermissionResult:
        try:
            questions = questions_from_tool_input(tool_input)
        except ValueError as exc:
            return PermissionResultDeny(message=str(exc))
        await self.caught_up()
        try:
            card = await askuser.question_create(
                run_id=self.run_id, source=QuestionSource.SDK, questions=questions
            )
        except DomainError:
            return PermissionResultDeny(message=RUN_ENDED)
        question_id = str(card["question_id"])
        try:
            result = await self._wait(question_id)
        except asyncio.CancelledError:
            # The CLI withdrew the request, or the client is closing: close the card too.
            with contextlib.suppress(Exception):
                await asyncio.shield(askuser.question_expire(question_id=question_id, reason="cancelled"))
            raise
        if result is None or result.status == "cancelled":
            return PermissionResultDeny(message=CANCELLED)
        if result.status == "expired":
            return PermissionResultDeny(message=TIMED_OUT.format(seconds=card["timeout"]))
        if result.status == "superseded":
            return PermissionResultDeny(message=SUPERSEDED)
        updated = (
            answered_input(tool_input, result.answer)
            if result.status == "answered" and result.answer is not None
            else None
        )
        if updated is None:
            return PermissionResultDeny(message=MSG_ASK_FAILED.format(error=MSG_CONSUMED))
        return PermissionResultAllow(updated_input=updated)

    async def _wait(self, question_id: str) -> PollResult | None:
        """The answer, the question's final state, or None once the run is being stopped.

        ``answer_wait`` reads the question's expiry from the database on every turn and
        expires it when the time is up, just as the MCP engine's long-poll does.
        """
        while not self.stopping.is_set():
            result = await askuser.answer_wait(
                run_id=self.run_id, question_id=question_id, wait_seconds=WAIT_SLICE
            )
            if result.status != "waiting":
                return result
        return None
