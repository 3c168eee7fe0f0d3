"""The sweep: runs whose owner is gone end ``failed``, with their events kept.

A worker owns each run it supervises through a Redis key it refreshes every loop turn
(``live.owner_key``); a run past its grace period with no owner key belongs to a worker
that is gone. Every web worker sweeps at start-up and then every ``RUN_SWEEP_SECONDS``,
so no run stays "running" after its worker died. Reads never end a run; only the sweep does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from askuser import facade as askuser
from core import events

from . import live
from .event_history import persist_events
from .models import Run, RunStatus
from .runner import OWNER_TTL, active_tasks
from .services import run_state

logger = logging.getLogger(__name__)

MSG_ORPHANED = "The worker running this prompt stopped unexpectedly."
ORPHAN_GRACE = timedelta(seconds=OWNER_TTL * 2)


def _owner_gone(run: Run) -> bool:
    if run.pk in active_tasks() or run.created_at > timezone.now() - ORPHAN_GRACE:
        return False
    return not live.has_owner_sync(run.pk)


def recover_run_if_orphaned(run: Run) -> bool:
    """Fail an active run whose worker is gone (no owner key in Redis); keep its events."""
    if not run.is_active or not _owner_gone(run):
        return False
    try:
        ended = run_state.run_finish(run.pk, run_state.Outcome(status=RunStatus.FAILED, error=MSG_ORPHANED))
    except run_state.IllegalTransition:
        return False  # it ended meanwhile, by its own worker
    if not ended:
        return False
    askuser.questions_cancel_for_dead_run(run.pk)
    events.append_event_sync(run.pk, "error", {"message": MSG_ORPHANED, "final": True})
    events.append_event_sync(run.pk, "run_status", {"status": RunStatus.FAILED, "error": MSG_ORPHANED})
    # Stored before "done", as the runner does: a reader that saw "done" finds the history.
    persist_events(run.pk, events.read_all_events_sync(run.pk))
    done = events.append_event_sync(run.pk, "done", {"status": RunStatus.FAILED})
    persist_events(run.pk, [e for e in events.read_all_events_sync(run.pk) if e.id >= done])
    live.release_run_slots_sync([(run.pk, run.user_id)])
    return True


def recover_orphaned_runs() -> list[int]:
    """One sweep: every active run nobody owns any more becomes failed."""
    recovered = []
    try:
        for run in Run.objects.active():
            if recover_run_if_orphaned(run):
                recovered.append(run.pk)
    except redis.RedisError:
        logger.warning("could not look for orphaned runs: Redis is unreachable")
    if recovered:
        logger.warning("marked %d orphaned runs as failed: %s", len(recovered), recovered)
    return recovered


async def sweep_forever() -> None:
    """Sweep every ``RUN_SWEEP_SECONDS`` until cancelled (started by the ASGI lifespan)."""
    while True:
        await asyncio.sleep(settings.RUN_SWEEP_SECONDS)
        try:
            await sync_to_async(recover_orphaned_runs)()
        except Exception:  # the sweep must outlive a bad turn (a database hiccup)
            logger.exception("the orphaned-run sweep failed; it runs again shortly")


_sweeper: asyncio.Task[None] | None = None


def start_sweeper() -> None:
    global _sweeper
    _sweeper = asyncio.get_running_loop().create_task(sweep_forever(), name="orphan-sweep")


async def stop_sweeper() -> None:
    global _sweeper
    if _sweeper is not None:
        _sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await _sweeper
        _sweeper = None
