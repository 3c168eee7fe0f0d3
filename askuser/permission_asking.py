"""A tool call's permission request: stored, its card shown, and the same call asked again.

Both engines ask here: the CLI engine's ``approve`` MCP tool through relay-permission
(``askuser.api``), the SDK engine's ``can_use_tool`` directly. A request is written to the
database, then added to the run's pending set and shown through Redis in one script
(``live.permission_pending_add``); a call asked again (``PermissionRequest.call_key``) gets
the request it made. AskUserQuestion through either becomes a question (``asking``).
Waiting for and making the decision are ``approvals``'.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone

from core.errors import Gone, Invalid
from core.prepared import PreparedGet, PreparedRows
from core.questions import questions_from_tool_input
from core.tool_names import ASK_USER_QUESTION, FILE_EDIT_TOOLS
from promptmgr.models import ACTIVE_RUN_STATUSES, PermissionMode, Project, Run, RunStatus
from promptmgr.services import run_state

from . import asking, live, policy, previews, services
from .models import Decision, PermissionRequest, PermissionStatus, QuestionSource

# Tool inputs larger than this travel to the browser as their preview only.
MAX_EVENT_INPUT_CHARS = 50_000
# The CLI's own wording for a write in plan mode (the SDK engine's -p refusals use it too).
PLAN_MODE_WRITE = "Cannot write to {path} while in plan mode."


def _event_input(tool_input: dict[str, Any]) -> dict[str, Any]:
    return tool_input if len(repr(tool_input)) <= MAX_EVENT_INPUT_CHARS else {}


def _plan_mode_refusal(project: Project, tool_name: str, tool_input: dict[str, Any]) -> str:
    """Plan mode never writes, whoever would click Allow: the refusal, or "" for other calls."""
    if project.permission_mode != PermissionMode.PLAN or tool_name not in FILE_EDIT_TOOLS:
        return ""
    return PLAN_MODE_WRITE.format(path=previews.file_path(tool_input))


# What making a card reads of its run and project (the rest of their columns is not loaded).
CREATE_RUN_FIELDS = (
    "status",
    "workdir",
    "conversation__project__ask_user_timeout",
    "conversation__project__permission_mode",
)
# The run's row lock with those columns, compiled once (core.prepared; see
# asking.run_for_new_question).
run_for_new_request: PreparedGet[Run] = PreparedGet(
    lambda: Run.objects.select_for_update().select_related("conversation__project").only(*CREATE_RUN_FIELDS),
    "id",
    placeholder=0,
)


# The requests asked under a tool call's key, with their runs, compiled once: on the card's
# way, like the above. Keys are random (the MCP server's) or Claude's tool_use_ids, so this
# is one row at most, found through the (call_key, run) index however long the run.
requests_by_call: PreparedRows[PermissionRequest] = PreparedRows(
    lambda: PermissionRequest.objects.exclude(call_key="").order_by().values_list("pk", "run_id"),
    "call_key",
    placeholder="<call key>",
)


@dataclass(frozen=True)
class _Created:
    request: PermissionRequest
    timeout: int
    # The same tool call asked again: this is the request it made before.
    again: bool = False


def _create(
    run_id: int, source: str, tool_name: str, tool_input: dict[str, Any], tool_use_id: str, call_key: str
) -> _Created:
    with transaction.atomic():
        run = run_for_new_request.get(run_id)
        if run.status not in ACTIVE_RUN_STATUSES:
            raise Gone(services.MSG_RUN_FINISHED, code="run_finished")
        project = run.conversation.project
        timeout = int(project.ask_user_timeout)
        # The same tool call asked again: its request was stored, but its relay was answered
        # 503 (Redis failed to show the card) or its reply was lost on the way (a proxy's
        # 502, a web process restarting), so it posted again; the SDK engine asks again the
        # same way through an outage. It gets the request it made, whatever became of it,
        # not a second one that would keep the run waiting on a card nobody decides.
        if call_key:
            again = next((pk for pk, run in requests_by_call.rows(call_key) if run == run_id), None)
            if again is not None:
                return _asked_again(again, timeout)
        root = Path(run.workdir) if run.workdir else None
        call = {
            "run": run,
            "source": source,
            "tool_name": tool_name,
            "tool_use_id": tool_use_id,
            "call_key": call_key,
            "tool_input": tool_input,
        }
        refused = _plan_mode_refusal(project, tool_name, tool_input)
        if refused:
            # Decided at once and kept for the record; no card, the run does not wait.
            refusal = PermissionRequest.objects.create(
                **call,
                status=PermissionStatus.DENIED,
                decision=Decision.DENY,
                message=refused,
                decided_at=timezone.now(),
                expires_at=timezone.now(),
            )
            return _Created(refusal, timeout)
        request = PermissionRequest.objects.create(
            **call,
            preview=previews.preview(tool_name, tool_input, root),
            suggested_rule=previews.suggested_rule(tool_name, tool_input, root) or "",
            expires_at=timezone.now() + timedelta(seconds=timeout),
        )
        run_state.run_wait_for_user(run_id)
    return _Created(request, timeout)


def _asked_again(pk: int, project_timeout: int) -> _Created:
    """The request a call made before, with the timeout it was asked with (the project's
    for one refused at once, which had none)."""
    request = PermissionRequest.objects.get(pk=pk)
    asked = round((request.expires_at - request.created_at).total_seconds())
    return _Created(request, asked if asked > 0 else project_timeout, again=True)


def _card(request: PermissionRequest, timeout: int) -> dict[str, Any]:
    return {
        "request_id": str(request.request_id),
        "kind": "permission",
        "source": request.source,
        "tool_name": request.tool_name,
        "tool_use_id": request.tool_use_id,
        "input": _event_input(request.tool_input),
        "preview": request.preview,
        "suggested_rule": request.suggested_rule or None,
        "expires_at": request.expires_at.isoformat(),
        "timeout": timeout,
    }


async def permission_request_create(
    *,
    run_id: int,
    source: QuestionSource,
    tool_name: str,
    tool_input: dict[str, Any],
    tool_use_id: str,
    call_key: str = "",
) -> dict[str, Any]:
    """Show the card for a tool call and mark the run waiting: ``{request_id, kind, expires_at, timeout}``.

    AskUserQuestion becomes a question card instead (``kind`` "question"); its request id
    is the question's id, and ``permission_wait`` answers both kinds alike. ``call_key``
    names the tool call (see ``PermissionRequest.call_key``): asked again, the call gets
    the request or question it made before, its card shown now if it never was.
    """
    if tool_name == ASK_USER_QUESTION:
        try:
            specs = questions_from_tool_input(tool_input)
        except ValueError as exc:
            raise Invalid(str(exc), code="invalid_questions") from None
        card = await asking.question_create(run_id=run_id, source=source, questions=specs, call_key=call_key)
        return {
            "request_id": card["question_id"],
            "kind": "question",
            "expires_at": card["expires_at"],
            "timeout": card["timeout"],
        }
    created = await sync_to_async(_create)(run_id, source, tool_name, tool_input, tool_use_id, call_key)
    request, timeout = created.request, created.timeout
    request_id = str(request.request_id)
    reply = {
        "request_id": request_id,
        "kind": "permission",
        "expires_at": request.expires_at,
        "timeout": timeout,
    }
    if request.status != PermissionStatus.PENDING:
        return reply  # refused at once (plan mode), or decided since it was first asked
    left = int((request.expires_at - timezone.now()).total_seconds()) if created.again else timeout
    if left <= 0:
        return reply  # the poll says its time is up (and expires it)
    # Pending, and on the page with the run's new status, in one round trip. A card goes
    # out once: asked again, only one never shown does (Redis failed its first asking after
    # the commit), and one shown before gets nothing more, not even the run's status.
    shown = await live.permission_pending_add(
        run_id,
        request_id,
        ttl=left + live.QUESTION_TTL_GRACE,
        then=[
            ("permission_request", _card(request, timeout)),
            ("run_status", {"status": RunStatus.WAITING_FOR_USER}),
        ],
    )
    if shown:
        policy.permission_consider(
            run_id=run_id, request_id=request_id, tool_name=request.tool_name, tool_input=request.tool_input
        )
    return reply
