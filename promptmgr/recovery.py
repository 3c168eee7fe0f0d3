"""Runs whose worker died: failed, with their events kept, so none stays "running".

A worker owns each run it supervises through a Redis key it refreshes every loop turn;
a run past its grace period with no owner key belongs to a worker that is gone.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import redis
from django.utils import timezone

from . import live
from .event_history import persist_events
from .models import ACTIVE_RUN_STATUSES, Run, RunStatus
from .runner import OWNER_TTL, active_tasks

logger = logging.getLogger(__name__)

MSG_ORPHANED = "The worker running this prompt stopped unexpectedly."
ORPHAN_GRACE = timedelta(seconds=OWNER_TTL * 2)


def recover_run_if_orphaned(run: Run) -> bool:
    """Fail an active run whose worker is gone (no owner key in Redis); keep its events.

    Called at start-up for every active run, and by SSE readers of a run that went quiet,
    so a crashed worker never leaves a run "running" forever.
    """
    if run.pk in active_tasks() or not run.is_active or run.created_at > timezone.now() - ORPHAN_GRACE:
        return False
    client = live.get_redis()
    if client.get(live.owner_key(run.pk)) is not None:
        return False
    if not Run.objects.filter(pk=run.pk, status__in=ACTIVE_RUN_STATUSES).update(
        status=RunStatus.FAILED, ended_at=timezone.now(), error=MSG_ORPHANED
    ):
        return False
    from askuser.models import Question, QuestionStatus

    Question.objects.filter(run_id=run.pk, status=QuestionStatus.PENDING).update(
        status=QuestionStatus.CANCELLED
    )
    live.append_event_sync(run.pk, "error", {"message": MSG_ORPHANED, "final": True})
    live.append_event_sync(run.pk, "run_status", {"status": RunStatus.FAILED, "error": MSG_ORPHANED})
    live.append_event_sync(run.pk, "done", {"status": RunStatus.FAILED})
    persist_events(run.pk, live.read_all_events_sync(run.pk))
    live.release_run_slots_sync([(run.pk, run.user_id)])
    return True


def recover_orphaned_runs() -> list[int]:
    """Start-up sweep: every active run nobody owns any more becomes failed."""
    recovered = []
    try:
        for run in Run.objects.active():
            if recover_run_if_orphaned(run):
                recovered.append(run.pk)
    except redis.RedisError:
        logger.warning("could not look for orphaned runs: Redis is unreachable")
    return recovered
