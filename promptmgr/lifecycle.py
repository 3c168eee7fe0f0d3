"""Start-up and shutdown of a web worker."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


async def on_startup() -> None:
    """Filled by the streaming work: sweep stale run secrets and orphaned runs."""


async def on_shutdown() -> None:
    """Filled by the streaming work: stop every run this worker owns."""


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
