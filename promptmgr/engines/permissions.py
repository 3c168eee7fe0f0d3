"""``can_use_tool`` for the SDK engine: the same approvals as the CLI engine's prompt tool.

The CLI consults the permission mode and the workspace's allow and deny rules first and
calls ``can_use_tool`` only for a call it would otherwise ask the user about (verified
with the bundled CLI: a Write is allowed under acceptEdits and asked about under default
and plan; a Bash command with an allow rule is never asked about). With ask-user on, every
such call goes to the shared store (askuser's ``permission_asking`` and ``approvals``): a
permission card, or for ``AskUserQuestion`` a question card whose answers come back as
``updated_input["answers"]``.
The store's result, in the CLI's own JSON shape, becomes the SDK's result object.

With ask-user off there is nobody to ask, so the callback refuses as ``-p`` mode does,
with the CLI's own wording. Plan mode never writes, whoever would click Allow: the store
refuses those calls for both engines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from claude_agent_sdk import (
    PermissionResultAllow,
    PermissionResultDeny,
    PermissionUpdate,
    ToolPermissionContext,
)
from claude_agent_sdk.types import PermissionRuleValue
from redis import RedisError

from askuser import facade as askuser
from askuser.facade import QuestionSource
from core.errors import DomainError, Invalid
from core.redis import outage_seen
from core.tool_names import ASK_USER_QUESTION, FILE_EDIT_TOOLS
from mcp_server.answers import CANCELLED, RUN_ENDED
from promptmgr.models import PermissionMode

logger = logging.getLogger(__name__)

PATH_KEYS = ("file_path", "notebook_path")
# How long one wait for the answer lasts before the stop flag and the expiry are checked again.
WAIT_SLICE = 1.0
# While Redis is unreachable the wait is tried again after these pauses, doubling, as the
# CLI engine's MCP server polls again through a 503 (mcp_server.relay_http).
OUTAGE_PAUSE_START = 0.2
OUTAGE_PAUSE_MAX = 2.0

MSG_NOT_GRANTED = "Claude requested permissions to use {tool}, but you haven't granted it yet."
MSG_WRITE_NOT_GRANTED = "Claude requested permissions to write to {path}, but you haven't granted it yet."
MSG_QUESTIONS_OFF = "Asking the user is switched off for this project. Proceed with your best judgment."
MSG_ASK_FAILED = "Could not ask the user ({error}). Proceed with your best judgment."

PermissionResult = PermissionResultAllow | PermissionResultDeny
T = TypeVar("T")


def refusal(tool_name: str, tool_input: dict[str, Any], *, permission_mode: str) -> str:
    """What the CLI engine's ``-p`` mode tells Claude for a call it would have asked about."""
    path = next((str(tool_input[k]) for k in PATH_KEYS if tool_input.get(k)), "")
    if tool_name in FILE_EDIT_TOOLS and path:
        if permission_mode == PermissionMode.PLAN:
            return askuser.PLAN_MODE_WRITE.format(path=path)
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
        """Ask a person through the shared store; without ask-user, refuse as ``-p`` mode does."""
        if not self.ask_user:
            if tool_name == ASK_USER_QUESTION:
                return PermissionResultDeny(message=MSG_QUESTIONS_OFF)
            return PermissionResultDeny(
                message=refusal(tool_name, tool_input, permission_mode=self.permission_mode)
            )
        try:
            return await self._ask(tool_name, tool_input, context.tool_use_id or "")
        except Exception as exc:
            # An exception would reach the CLI as a protocol error; Claude gets a sentence instead.
            logger.exception("run %s: asking the user failed", self.run_id)
            return PermissionResultDeny(message=MSG_ASK_FAILED.format(error=exc))

    async def _ask(self, tool_name: str, tool_input: dict[str, Any], tool_use_id: str) -> PermissionResult:
        await self.caught_up()

        def ask() -> Awaitable[dict[str, Any]]:
            return askuser.permission_request_create(
                run_id=self.run_id,
                source=QuestionSource.SDK,
                tool_name=tool_name,
                tool_input=tool_input,
                tool_use_id=tool_use_id,
                call_key=tool_use_id,
            )

        try:
            # Asked again while Redis is unreachable, keyed by the call's tool_use_id (the
            # CLI always sends one): the request may be stored already, and the same key gets
            # that one rather than a second (askuser's permission_asking._create).
            created = await (self._through_outage(ask) if tool_use_id else ask())
        except Invalid as exc:
            return PermissionResultDeny(message=exc.detail)
        except DomainError:
            return PermissionResultDeny(message=RUN_ENDED)
        if created is None:
            return PermissionResultDeny(message=CANCELLED)
        request_id = str(created["request_id"])
        try:
            result = await self._wait(request_id)
        except asyncio.CancelledError:
            # The CLI withdrew the request, or the client is closing: close the card too.
            with contextlib.suppress(Exception):
                await asyncio.shield(askuser.request_withdraw(run_id=self.run_id, request_id=request_id))
            raise
        if result is None:
            return PermissionResultDeny(message=CANCELLED)
        return sdk_result(result)

    async def _wait(self, request_id: str) -> dict[str, Any] | None:
        """The permission result, or None once the run is being stopped.

        ``permission_wait`` reads the request's expiry from the database on every turn and
        expires it when the time is up, just as the MCP engine's long-poll does. A Redis
        outage does not end the wait: a person can still decide (the decision is stored in
        the database), and the wait takes it from there.
        """
        while not self.stopping.is_set():
            result = await self._through_outage(
                lambda: askuser.permission_wait(
                    run_id=self.run_id, request_id=request_id, wait_seconds=WAIT_SLICE
                )
            )
            if result is not None:
                return result
        return None

    async def _through_outage(self, step: Callable[[], Awaitable[T]]) -> T | None:
        """``step()``, tried again while Redis is unreachable; None once the run is stopping.

        A step that returns does not say Redis is back (a decision may come from the
        database), so the outage's end is left to the stream tails and appends to report."""
        pause = OUTAGE_PAUSE_START
        while not self.stopping.is_set():
            try:
                return await step()
            except RedisError as exc:
                outage_seen(exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), pause)
                pause = min(pause * 2, OUTAGE_PAUSE_MAX)
        return None


def sdk_result(result: dict[str, Any]) -> PermissionResult:
    """The store's permission result (the CLI's JSON shape) as the SDK's result object."""
    if result.get("behavior") != "allow":
        return PermissionResultDeny(message=str(result.get("message") or CANCELLED))
    updates = [
        PermissionUpdate(
            type=update["type"],
            rules=[
                PermissionRuleValue(tool_name=rule["toolName"], rule_content=rule.get("ruleContent"))
                for rule in update.get("rules") or []
            ],
            behavior=update.get("behavior"),
            destination=update.get("destination"),
        )
        for update in result.get("updatedPermissions") or []
    ]
    return PermissionResultAllow(
        updated_input=result.get("updatedInput"), updated_permissions=updates or None
    )
