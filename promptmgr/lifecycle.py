"""Start-up and shutdown of a web worker (the ASGI lifespan)."""

from __future__ import annotations

import gc
import logging
from typing import Any

from asgiref.sync import sync_to_async

logger = logging.getLogger(__name__)


async def on_startup() -> None:
    """Load the instance id; start the Markdown render process; sweep what a crashed
    worker left (stale run secrets and runs nobody owns any more) now and then
    periodically; freeze what start-up loaded out of the garbage collector's way."""
    from askuser.facade import sweep_stale_secrets
    from core.redis import load_instance_uid
    from promptmgr.markdown import start_renderer
    from promptmgr.recovery import recover_orphaned_runs, start_sweeper
    from promptmgr.services.git_workspace import clones_recover_interrupted

    # Before anything touches Redis: every key carries this database's instance id.
    await sync_to_async(load_instance_uid)()
    start_renderer()
    await sync_to_async(recover_orphaned_runs)()
    # Clones a stopped worker left in "cloning" past their time limit become retryable.
    await sync_to_async(clones_recover_interrupted)()
    # After the recovery: the secrets of runs it just failed go too.
    await sync_to_async(sweep_stale_secrets)()
    start_sweeper()
    # What start-up loaded (~160k objects: Django, the SDK, the app) lives as long as the
    # worker, and a full collection would walk all of it, stalling every stream of the
    # worker for 77-94 ms; frozen, 0.002 ms (bench/machinery.py): the collector skips it.
    gc.collect()
    gc.freeze()


async def on_shutdown() -> None:
    """Stop every run this worker owns, reaping their process groups."""
    from promptmgr.recovery import stop_sweeper
    from promptmgr.runner import shutdown_all

    await stop_sweeper()
    await shutdown_all()
    # Collectable again: a process that serves the app more than once (the tests) must
    # not keep what one serving left frozen.
    gc.unfreeze()


async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await on_startup()
            except Exception as exc:  # a failed start-up must be visible, not silent
                logger.exception("start-up failed")
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await on_shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return
