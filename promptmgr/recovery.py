"""The sweep: runs whose owner is gone end ``failed``, with their events kept.

A worker owns each run it supervises through a Redis key (``live.owner_key``) naming the
worker, its lease, taken with ``SET NX`` when the queue delivers the run (``runner.claim``),
and registers itself (``live.worker_key``: where it runs), both refreshed by its
heartbeat here, whatever its runs are doing. A run's owner is gone when:

- the owner's registration lapsed (it stopped refreshing it: within ``live.WORKER_TTL``);
- the owner runs where this worker does (the same kernel and process namespace) and its
  process no longer exists: a restarted server fails its predecessor's runs at start-up;
- nobody owns a started run any more, or a queued one past ``ORPHAN_GRACE``.

Every worker sweeps at start-up and then every ``RUN_SWEEP_SECONDS``; an answer to a
question of a run whose owner is gone fails that run first (``run_recover_if_orphaned``),
so it gets 410 rather than being accepted and lost. Ending a dead run does what its
worker would have: the run fails, its slot is released, its relay token revoked, its
questions and permission requests closed, its secrets and temporary directory removed,
and its event stream given the TTL of a finished one. (Its processes died with the
worker: ``guardian.py``.) Reads never end a run; only the sweep does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from datetime import timedelta
from pathlib import Path

import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from askuser import facade as askuser
from core import events
from core.redis import close_idle_sync_connections, get_redis, outage_over, outage_seconds, outage_seen

from . import live, run_sandbox, sandbox
from .event_history import persist_events
from .models import Run, RunStatus
from .runner import OWNER_TTL, WORKER_ID, active_tasks
from .services import run_state

logger = logging.getLogger(__name__)

MSG_ORPHANED = "The worker running this prompt stopped unexpectedly."
# A queued run nobody has started may still be on its way to a worker.
ORPHAN_GRACE = timedelta(seconds=OWNER_TTL * 2)
HEARTBEAT_SECONDS = live.WORKER_TTL / 3
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
PID_NAMESPACE = Path("/proc/self/ns/pid")


def locality() -> str:
    """Where this worker's process ids mean something: this kernel's boot and its pid namespace.

    Two workers with the same locality can tell each other's liveness from a process id;
    any others only from the registration lapsing."""
    try:
        boot = BOOT_ID.read_text().strip()
        namespace = os.stat(PID_NAMESPACE).st_ino
    except OSError:  # not Linux, or /proc hidden: no shortcut, registrations decide
        return f"unknown:{WORKER_ID}"
    return f"{boot}:{namespace}"


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process holds the id
        return True
    return True


def worker_alive(worker: str) -> bool:
    """Whether the worker named in a run's owner key is still there."""
    if worker == WORKER_ID:
        return True
    registered = live.worker_locality_sync(worker)
    if registered is None:
        return False
    if registered == locality():
        try:
            pid = int(worker.rsplit(":", 2)[1])
        except (IndexError, ValueError):
            return True
        # Our own id taken over by this process (a restarted container) is no proof of life.
        return pid != os.getpid() and _process_exists(pid)
    return True


def _owner_gone(run: Run) -> bool:
    if run.pk in active_tasks():
        return False
    owner = live.owner_sync(run.pk)
    if owner is not None:
        return not worker_alive(owner)
    if run.status == RunStatus.QUEUED:
        return run.created_at <= timezone.now() - ORPHAN_GRACE
    return True


def recover_run_if_orphaned(run: Run) -> bool:
    """Fail an active run whose worker is gone and clean up after it; keep its events."""
    if not run.is_active or not _owner_gone(run):
        return False
    try:
        # Only from the state judged: a queued run a worker takes meanwhile is not failed.
        outcome = run_state.Outcome(status=RunStatus.FAILED, error=MSG_ORPHANED)
        ended = run_state.run_finish(run.pk, outcome, expected=run.status)
    except run_state.IllegalTransition:
        return False  # it ended meanwhile, by its own worker
    if not ended:
        return False
    # First what lets anyone act on the dead run: its token and its open cards.
    askuser.relay_revoke_for_dead_run(run.pk)
    askuser.questions_cancel_for_dead_run(run.pk)
    live.release_run_slots_sync([(run.pk, run.user_id)])
    events.append_event_sync(run.pk, "error", {"message": MSG_ORPHANED, "final": True})
    events.append_event_sync(run.pk, "run_status", {"status": RunStatus.FAILED, "error": MSG_ORPHANED})
    # Stored before "done", as the runner does: a reader that saw "done" finds the history.
    persist_events(run.pk, events.read_all_events_sync(run.pk))
    done = events.append_event_sync(run.pk, "done", {"status": RunStatus.FAILED})
    persist_events(run.pk, [e for e in events.read_all_events_sync(run.pk) if e.id >= done])
    events.expire_stream_sync(run.pk, settings.EVENT_STREAM_TTL)
    return True


def run_recover_if_orphaned(run: Run) -> bool:
    """Fail the run now if its owner is gone (an answer to one of its questions came in)."""
    try:
        recovered = recover_run_if_orphaned(run)
    except redis.RedisError:
        return False  # the sweep will see to it once Redis is back
    if recovered:
        logger.warning("marked orphaned run %s as failed", run.pk)
        _remove_leftovers()
    return recovered


def _remove_leftovers() -> None:
    """The secrets and temporary directories of runs that no longer run."""
    askuser.sweep_stale_secrets()
    active = set(Run.objects.active().values_list("pk", flat=True))
    sandbox.sweep_stale_run_tmp(active)
    run_sandbox.sweep_stale_prefixes()


def recover_orphaned_runs() -> list[int]:
    """One sweep: every active run nobody owns any more becomes failed."""
    recovered = []
    try:
        if outage_seconds():  # an outage was seen (maybe only by requests): is it over?
            get_redis().ping()
        for run in Run.objects.active():
            if recover_run_if_orphaned(run):
                recovered.append(run.pk)
    except redis.RedisError as exc:
        outage_seen(exc)  # one warning per outage (core.redis), not one per sweep
    else:
        outage_over()
    finally:
        close_idle_sync_connections()  # the next sweep is 10 s away
    if recovered:
        logger.warning("marked %d orphaned runs as failed: %s", len(recovered), recovered)
    _remove_leftovers()
    return recovered


async def heartbeat() -> None:
    """This worker is alive: its registration, and the owner key of every run it supervises
    (whose event stream gets a TTL too, should the run somehow never end)."""
    await live.worker_register(WORKER_ID, locality(), ttl=live.WORKER_TTL)
    for run_id in active_tasks():
        await live.set_owner(run_id, WORKER_ID, ttl=OWNER_TTL)
        await events.bound_stream(run_id, settings.RUN_MAX_DURATION + settings.EVENT_STREAM_TTL)


async def heartbeat_forever() -> None:
    """Refresh ownership every ``HEARTBEAT_SECONDS``, apart from what the runs do: a run busy
    with a burst of output (or a slow setup command) must not look abandoned."""
    while True:
        await asyncio.sleep(HEARTBEAT_SECONDS)
        # An outage is logged once elsewhere; the next beat tries again.
        with contextlib.suppress(redis.RedisError):
            await heartbeat()


async def sweep_forever() -> None:
    """Sweep every ``RUN_SWEEP_SECONDS`` until cancelled (started by the ASGI lifespan)."""
    while True:
        await asyncio.sleep(settings.RUN_SWEEP_SECONDS)
        try:
            await sync_to_async(recover_orphaned_runs)()
        except Exception:  # the sweep must outlive a bad turn (a database hiccup)
            logger.exception("the orphaned-run sweep failed; it runs again shortly")


_background: list[asyncio.Task[None]] = []


async def start_sweeper() -> None:
    """Register this worker, then keep it registered and sweep periodically."""
    await heartbeat()
    loop = asyncio.get_running_loop()
    _background.extend(
        [
            loop.create_task(heartbeat_forever(), name="worker-heartbeat"),
            loop.create_task(sweep_forever(), name="orphan-sweep"),
        ]
    )


async def stop_sweeper() -> None:
    tasks = list(_background)
    _background.clear()
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
