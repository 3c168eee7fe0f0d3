"""What the rest of the project may use of askuser: the one door into this app.

A run supervisor opens the run's relay (token and MCP config), shows questions it finds
waiting, has answers verified when the ask tool's result comes back, hides relay tokens
from the stream and closes the run's questions when it ends. The SDK engine asks through
the same store. Nothing outside askuser imports its other modules.
"""

from __future__ import annotations

import contextlib

import redis

from . import approvals, live
from .approvals import permission_wait, permissions_close_for_run, request_withdraw
from .asking import question_create, question_push_if_unshown
from .delivery import ASK_TOOL_NAMES, MCP_ASK_TOOL, SDK_ASK_TOOL, question_result_seen
from .late import LateAnswer, late_answer_delivered, late_answer_record, unread_answers_take
from .models import Question, QuestionSource, QuestionStatus
from .permission_asking import PLAN_MODE_WRITE, permission_request_create
from .policy import stop_all as policy_stop_all
from .runtime import (
    DeltaRedactor,
    RelaySession,
    redact_tokens,
    relay_session_close,
    relay_session_open,
    remove_secrets,
    sweep_stale_secrets,
)
from .services import (
    PollResult,
    answer_wait,
    question_expire,
    questions_close_for_run,
)
from .warm_server import warm_server

__all__ = [
    "PLAN_MODE_WRITE",
    "ASK_TOOL_NAMES",
    "MCP_ASK_TOOL",
    "SDK_ASK_TOOL",
    "DeltaRedactor",
    "forget_questions",
    "LateAnswer",
    "late_answer_delivered",
    "late_answer_record",
    "unread_answers_take",
    "policy_stop_all",
    "permission_request_create",
    "permission_wait",
    "request_withdraw",
    "PollResult",
    "QuestionSource",
    "RelaySession",
    "answer_wait",
    "question_create",
    "question_expire",
    "question_result_seen",
    "questions_cancel_for_dead_run",
    "relay_revoke_for_dead_run",
    "cards_close_for_run",
    "redact_tokens",
    "relay_close",
    "relay_revoke",
    "relay_session_open",
    "run_question_keys",
    "show_waiting_question",
    "sweep_stale_secrets",
    "warm_server_stop",
]


def warm_server_stop() -> None:
    """The worker's shutdown: its warm ask-user server goes (it exits once its runs are gone)."""
    warm_server().stop()


async def show_waiting_question(run_id: int) -> bool:
    """The supervisor's idle tick: push a question nobody has shown yet; True while a
    question or a permission request waits for a person (the CLI is silent meanwhile)."""
    await question_push_if_unshown(run_id=run_id)
    if await live.question_cache_get(run_id) is not None:
        return True
    return await live.permissions_pending(run_id)


async def relay_revoke(session: RelaySession) -> None:
    """The turn is ending: its token stops working now, so no relay poll takes an answer
    the turn will never read (``live.answer_pop``'s ``unless_ended``); its secrets stay
    until ``relay_close``. A Redis outage leaves that to ``relay_close``."""
    with contextlib.suppress(redis.RedisError):
        await live.relay_token_revoke(session.run_id)


async def relay_close(session: RelaySession) -> None:
    """The run ended: its secrets go even when Redis is away, and its token is revoked."""
    remove_secrets(session)
    with contextlib.suppress(redis.RedisError):
        await relay_session_close(session)


def relay_revoke_for_dead_run(run_id: int) -> None:
    """A run whose worker died: its relay token stops working (sync, for the sweep; its
    secrets directory goes with ``sweep_stale_secrets``)."""
    live.relay_token_revoke_sync(run_id)


def questions_cancel_for_dead_run(run_id: int) -> int:
    """A run whose worker died: its open questions and permission requests are cancelled
    (sync, for the sweep)."""
    questions = Question.objects.filter(run_id=run_id, status=QuestionStatus.PENDING).update(
        status=QuestionStatus.CANCELLED
    )
    return questions + approvals.permissions_cancel_for_dead_run(run_id)


async def cards_close_for_run(run_id: int) -> None:
    """The run ended: its open questions and permission requests are cancelled, their cards closed."""
    await questions_close_for_run(run_id=run_id)
    await permissions_close_for_run(run_id=run_id)


async def polls_release() -> int:
    """This worker shuts down: the relay long-polls it holds answer "still waiting" now,
    and any it gets later at once (``live.polls_release``); how many it held."""
    return await live.polls_release()


async def forget_questions(run_id: int) -> None:
    """The run ended: its question cache goes from Redis (the database keeps the questions)."""
    await live.questions_forget(run_id)


def run_question_keys(run_id: int) -> list[str]:
    """askuser's Redis keys of one run (cleared before a new run of the same id starts)."""
    return live.run_question_keys(run_id)
