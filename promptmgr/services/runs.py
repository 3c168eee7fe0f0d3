"""Starting, reading and cancelling runs."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction

from askuser import facade as askuser
from core import events
from core.errors import Conflict, Forbidden, Invalid, NotFound, TooMany, Unavailable
from core.events import Event
from core.redis import get_async_redis
from promptmgr import internal_url, live, run_queue
from promptmgr.models import Conversation, Project, Run, RunEvent, RunStatus
from promptmgr.services.git_workspace import workspace_require_ready
from promptmgr.services.worktrees import conversation_worktree_ensure
from promptmgr.workspaces import workspace_path

logger = logging.getLogger(__name__)

MAX_PROMPT_CHARS = 100_000
MSG_EMPTY_PROMPT = "Type a prompt first."
MSG_LONG_PROMPT = f"Prompts are limited to {MAX_PROMPT_CHARS} characters."
MSG_CONVERSATION_BUSY = "Claude is still working in this conversation; wait for it or cancel it first."
MSG_USER_CAP = "You already have {limit} runs going; wait for one to finish or cancel one."
MSG_GLOBAL_CAP = "The server is at its limit of {limit} concurrent runs; try again shortly."
MSG_NOT_FOUND = "Not found."
MSG_ALREADY_FINISHED = "This run has already finished."
MSG_DELETE_NOT_YOURS = "Only the conversation's author or the project's owner can delete it."


def project_visible(*, user: Any, project_id: int) -> Project:
    project = Project.objects.visible_to(user).filter(pk=project_id).first()
    if project is None:
        raise NotFound(MSG_NOT_FOUND)
    return project


def run_visible(*, user: Any, run_id: int) -> Run:
    run = Run.objects.visible_to(user).select_related("conversation").filter(pk=run_id).first()
    if run is None:
        raise NotFound(MSG_NOT_FOUND)
    return run


def conversation_visible(*, user: Any, conversation_id: int) -> Conversation:
    conversation = (
        Conversation.objects.filter(project__in=Project.objects.visible_to(user), pk=conversation_id)
        .select_related("project")
        .first()
    )
    if conversation is None:
        raise NotFound(MSG_NOT_FOUND)
    return conversation


def _legacy_workdir(conversation: Conversation) -> Path | None:
    """Where a conversation from before worktrees worked (the project's directory), if it is one.

    Claude Code keeps a session's transcript by working directory, so such a conversation
    goes on where its session lives rather than in a new worktree, where --resume would
    find nothing.
    """
    if conversation.branch or not conversation.runs.exists():
        return None
    last = conversation.runs.exclude(workdir="").order_by("-created_at", "-id").first()
    # Runs stored before Run.workdir existed worked in the project's directory.
    return Path(last.workdir) if last is not None else workspace_path(conversation.project)


def _create_run(*, user: Any, project_id: int, prompt: str, conversation_id: int | None) -> Run:
    text = prompt.strip()
    if not text:
        raise Invalid(MSG_EMPTY_PROMPT, code="empty_prompt")
    if len(text) > MAX_PROMPT_CHARS:
        raise Invalid(MSG_LONG_PROMPT, code="prompt_too_long")
    project = project_visible(user=user, project_id=project_id)
    workspace_require_ready(project)
    if conversation_id is None:
        conversation = Conversation.objects.create(project=project, user=user, title=text[:80])
    else:
        found = Conversation.objects.filter(pk=conversation_id, project=project).first()
        if found is None:
            raise NotFound(MSG_NOT_FOUND)
        conversation = found
        if conversation.runs.active().exists():
            raise Conflict(MSG_CONVERSATION_BUSY, code="conversation_busy")
    conversation.project = project
    # Outside the transaction: git may take a while on a large repository, and the
    # database must not stay locked meanwhile.
    try:
        workdir = _legacy_workdir(conversation) or conversation_worktree_ensure(conversation)
    except Conflict:
        if conversation_id is None:
            conversation.delete()
        raise
    with transaction.atomic():
        # Locked and checked again: another prompt may have started a run meanwhile.
        locked = Conversation.objects.select_for_update().filter(pk=conversation.pk).first()
        if locked is None:
            raise NotFound(MSG_NOT_FOUND)
        if conversation_id is not None and locked.runs.active().exists():
            raise Conflict(MSG_CONVERSATION_BUSY, code="conversation_busy")
        return Run.objects.create(
            conversation=locked,
            user=user,
            engine=project.engine,
            prompt=text,
            workdir=str(workdir),
        )


def conversation_delete(*, user: Any, conversation_id: int) -> None:
    """Its author or the project's owner deletes a conversation with no run going.

    Its runs and their events go with it; once that is committed its worktree is removed,
    what was uncommitted there committed on its branch, which stays (``signals``).
    """
    conversation = conversation_visible(user=user, conversation_id=conversation_id)
    if user.pk not in (conversation.user_id, conversation.project.owner_id):
        raise Forbidden(MSG_DELETE_NOT_YOURS, code="not_yours")
    if conversation.runs.active().exists():
        raise Conflict(MSG_CONVERSATION_BUSY, code="conversation_busy")
    conversation.delete()


def _discard_run(run_id: int) -> None:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return
    conversation = run.conversation
    run.delete()
    # A conversation that was opened just for this run goes with it.
    if not conversation.runs.exists():
        conversation.delete()


def _ended_among(run_ids: set[int]) -> set[int]:
    return run_ids - set(Run.objects.active().filter(pk__in=run_ids).values_list("pk", flat=True))


async def _claim_slot(run: Run) -> int:
    """Claim a concurrency slot; at a cap, first free slots of runs that already ended.

    A run that ended while Redis was unreachable could not give its slot back, and it
    must not hold it for ever.
    """
    claimed = await live.claim_run_slot(
        run.pk, run.user_id, per_user=settings.RUNS_PER_USER, total=settings.RUNS_GLOBAL
    )
    if claimed > 0:
        return claimed
    holders = await live.run_slot_holders(run.user_id)
    ended = await sync_to_async(_ended_among)(holders)
    if not ended:
        return claimed
    logger.warning("freed the run slots of ended runs %s", sorted(ended))
    for user_id, run_ids in (await sync_to_async(_by_user)(ended, run.user_id)).items():
        await live.release_run_slots(run_ids, user_id)
    return await live.claim_run_slot(
        run.pk, run.user_id, per_user=settings.RUNS_PER_USER, total=settings.RUNS_GLOBAL
    )


def _by_user(run_ids: set[int], fallback_user_id: int) -> dict[int, list[int]]:
    """Runs grouped by who started them; runs no longer in the database go to the fallback."""
    by_user: dict[int, list[int]] = {}
    found = dict(Run.objects.filter(pk__in=run_ids).values_list("pk", "user_id"))
    for run_id in run_ids:
        by_user.setdefault(found.get(run_id, fallback_user_id), []).append(run_id)
    return by_user


async def _clear_leftover_keys(run_id: int) -> None:
    """A new run starts with no live state: a restored backup hands out ids again whose
    keys an earlier life of this database may have left in Redis."""
    keys = [events.events_key(run_id), events.seq_key(run_id), *live.run_control_keys(run_id)]
    await get_async_redis().delete(*keys, *askuser.run_question_keys(run_id))


async def run_start(*, user: Any, project_id: int, prompt: str, conversation_id: int | None = None) -> Run:
    """Create the run, claim a concurrency slot and send it to the run queue."""
    # A run here would hang: its MCP server (and the demo model's CLI) could not reach us.
    if (unreachable := internal_url.problem()) is not None:
        raise Unavailable(unreachable, code="internal_url_unreachable")
    run = await sync_to_async(_create_run)(
        user=user, project_id=project_id, prompt=prompt, conversation_id=conversation_id
    )
    try:
        claimed = await _claim_slot(run)
        if claimed > 0:
            await _clear_leftover_keys(run.pk)
            await events.append_event(
                run.pk,
                "prompt",
                {
                    "text": run.prompt,
                    "user": getattr(user, "username", ""),
                    "conversation_id": run.conversation_id,
                },
            )
            await events.append_event(run.pk, "run_status", {"status": RunStatus.QUEUED})
            # Bounded from its first event: a short run can end before the first heartbeat
            # would bound it, and its end sets the finished stream's TTL only after "done".
            await events.bound_stream(run.pk, settings.RUN_MAX_DURATION + settings.EVENT_STREAM_TTL)
            # Whichever worker takes it runs it (``run_queue``): this process, or another.
            await run_queue.enqueue(run.pk)
    except redis.RedisError:
        # Nothing half-written: without Redis the run cannot be watched, so it never existed.
        await sync_to_async(_discard_run)(run.pk)
        with contextlib.suppress(redis.RedisError):
            await live.release_run_slots([run.pk], run.user_id)
        raise
    if claimed < 0:
        # Nothing half-written: the refused run leaves no trace.
        await sync_to_async(_discard_run)(run.pk)
        if claimed == -1:
            raise TooMany(MSG_USER_CAP.format(limit=settings.RUNS_PER_USER), code="user_run_cap")
        raise TooMany(MSG_GLOBAL_CAP.format(limit=settings.RUNS_GLOBAL), code="server_run_cap")
    return run


async def run_cancel(*, user: Any, run_id: int) -> Run:
    run = await sync_to_async(run_visible)(user=user, run_id=run_id)
    if not run.is_active:
        raise Conflict(MSG_ALREADY_FINISHED, code="run_finished")
    # Whichever worker owns the run hears this on its control channel.
    await live.request_cancel(run.pk)
    return run


def stored_events(run_id: int, after: int) -> list[Event]:
    rows = RunEvent.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")
    return [Event(id=row.seq, event=row.event, data=row.data) for row in rows]


def run_is_active(run_id: int) -> bool:
    """Whether more events can come (a run whose worker died ends at the next sweep)."""
    return Run.objects.active().filter(pk=run_id).exists()


def conversation_history(conversation: Conversation) -> list[dict[str, Any]]:
    """Every run of a conversation with its stored events, for showing it again."""
    history = []
    for run in conversation.runs.order_by("created_at", "id"):
        events = [] if run.is_active else stored_events(run.pk, 0)
        history.append(
            {
                "run_id": run.pk,
                "prompt": run.prompt,
                "status": run.status,
                "error": run.error,
                "active": run.is_active,
                # The changes card shows a reverted run as such (revert adds no event).
                "reverted_at": run.reverted_at,
                "events_url": f"/api/runs/{run.pk}/events",
                "events": [{"id": e.id, "event": e.event, "data": e.data} for e in events],
            }
        )
    return history
