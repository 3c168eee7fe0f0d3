"""Work a request finishes after its response has gone out.

A person's decision is acknowledged once it is stored and its hand-off to the waiting
Claude turn is sent, with the card's events in the hand-off's own transaction
(``askuser.live.answer_replace_unless_taken``); the hand-off's reply from Redis is awaited
by the deferred work, not by the acknowledgement (decision → tool running has no room to
lose the hand-off's head start). A person's answer is acknowledged once it is committed,
its hand-off (with the card's events) following the response (answer → Claude has room
to spare against its target). What Claude does not wait for (the run's resume in the
database, the question cache's or pending set's clean-up, an always-allow rule for later
runs) follows the response instead of delaying it.
bench/askuser_latency.py and bench/approval_latency.py measure the acknowledgement
(target: 3 ms p50).

``serving(app)`` wraps the ASGI app (``promptmgr.asgi``): the request's deferred work runs in
the request's own task once the app has sent the response, so uvicorn's graceful shutdown
waits for it like for any request still being served. A deferred step that fails is logged
and the steps after it still run. Where no ASGI server defers (Django's test clients,
management commands, a service called directly), ``after_response`` runs the work at once,
so callers see the same state as before.

What a wake sets going comes first: the bookkeeping after a hand-off begins with
``give_way()``, which, in deferred work, waits ``GIVE_WAY_SECONDS``. The woken turn's next
steps (the long-poll's reply, the MCP server's tool result, the CLI starting the tool:
about 15 ms) then have the machine's cores to themselves instead of sharing them with the
bookkeeping's database work. A process killed while it gives way leaves what a killed
process always left here, for 50 ms longer: the run's row still "waiting" until its next
move (a new card, its end), and the clean-ups to their keys' TTLs.

This adds no window in which work can be lost: the same steps used to run after the same
commit, only before the acknowledgement instead of after it. An answer's hand-off that
never comes (the process died, Redis failed it) is taken from the database by Claude's next
poll (``askuser.services.answer_wait``), and so is a decision's
(``askuser.approvals.permission_wait``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

logger = logging.getLogger(__name__)

Work = Callable[[], Awaitable[None]]
ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]

# The request's deferred steps; None outside a request served through ``serving``. A list,
# not a tuple: Django runs the view in a task of its own, which sees a copy of this context,
# so the view appends to the request's list rather than setting the variable.
_deferred: ContextVar[list[Work] | None] = ContextVar("after_response", default=None)
# Set while a request's deferred work runs, so give_way() knows that nobody waits for it.
_running_deferred: ContextVar[bool] = ContextVar("after_response_running", default=False)

# Above the 15-20 ms from a wake to the tool's start; the figures behind it are in the
# design notes ("The bookkeeping gives way to the woken turn").
GIVE_WAY_SECONDS = 0.05


async def after_response(work: Work) -> None:
    """Run ``work`` once the current request's response has been sent (at once if nothing defers)."""
    deferred = _deferred.get()
    if deferred is None:
        await work()
        return
    deferred.append(work)


async def give_way() -> None:
    """In deferred work, wait ``GIVE_WAY_SECONDS`` so that what a hand-off woke runs first;
    at once where the work was not deferred (no server that defers, a service called directly)."""
    if _running_deferred.get():
        await asyncio.sleep(GIVE_WAY_SECONDS)


async def then_deferred(step: Callable[[], Awaitable[None]]) -> None:
    """Run ``step`` (which sends a response), then the ``after_response`` work it left."""
    deferred: list[Work] = []
    token = _deferred.set(deferred)
    try:
        await step()
    finally:
        _deferred.reset(token)
        # Even when the step failed or the client went away: the work belongs to a step
        # that was committed.
        running = _running_deferred.set(True)
        try:
            for work in deferred:
                try:
                    await work()
                except Exception:
                    logger.exception("A request's work after its response failed")
        finally:
            _running_deferred.reset(running)


def serving(app: ASGIApp) -> ASGIApp:
    """``app``, with each HTTP request's ``after_response`` work run after its response."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await then_deferred(lambda: app(scope, receive, send))

    return wrapped
