"""Answering by policy: an agent answers Claude's questions (and tool approvals) for the team.

Per project (``Project.answer_policy``): ``off``; ``suggest``, where the agent's answer and
its reasoning appear on the card and a person decides; ``auto``, where the agent's answer is
given after ``answer_policy_delay`` seconds unless a person answers first (0: at once).

When a card is shown, ``question_consider`` / ``permission_consider`` start the agent in
the background. It first keeps to a person what is never its to decide: questions about
credentials or destructive actions, Bash commands unless the team's instructions mention
Bash, tool calls that look destructive; tool approvals only where the project lets the
policy decide them, and read-only tools inside the run's working directory are allowed by
rule. Anything else goes to the model (``policy_model``), which may still leave it to a
person. Every decision is kept (``PolicyAnswer``) with its reasoning and the model's usage,
and shown on the card (``policy_decision``). A policy answer goes to Claude through the
same store as a person's, so delivery verification checks it too; a member can replace it
until Claude has taken it (``answer_override``).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import re
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import events
from core.errors import Conflict, Invalid
from core.questions import AnswerIn, FormAnswer
from promptmgr.models import AnswerPolicy, Run, RunEvent

from . import live, services
from .answers import AnswerError, normalize_answers
from .models import (
    Decision,
    PermissionRequest,
    PermissionStatus,
    PolicyAnswer,
    PolicyDecision,
    PolicyOutcome,
    Question,
    QuestionStatus,
)
from .policy_model import AgentError, AgentReply, PolicyReply, ask_model, request_text

logger = logging.getLogger(__name__)

# Never the policy's to decide, whatever the instructions say.
CREDENTIALS = re.compile(
    r"\b(passwords?|passphrases?|secrets?|credentials?|api[ _-]?keys?|tokens?|private keys?|"
    r"ssh keys?|2fa|one-time codes?)\b",
    re.I,
)
DESTRUCTIVE = re.compile(
    r"\b(delete|deletes|deleting|deletion|drop|dropping|wipe|wiping|erase|erasing|destroy|destroying|"
    r"truncate|truncating|purge|purging|overwrite|overwriting|force[- ]push|irreversible)\b|"
    r"rm -rf|reset --hard|push (-f|--force)",
    re.I,
)
RESERVED = {"credentials": CREDENTIALS, "destructive": DESTRUCTIVE}
# Tools that only read; allowed by rule when what they read is inside the run's working directory.
READ_ONLY_TOOLS = frozenset({"Read", "Glob", "Grep", "LS", "NotebookRead"})
PATH_KEYS = ("file_path", "path", "notebook_path")

MSG_RESERVED = {
    "credentials": "It is about credentials or secrets, which the policy always leaves to a person.",
    "destructive": "It is about a destructive or irreversible action, which the policy always leaves to a person.",
    "bash": "The team's instructions do not mention Bash, so Bash commands are left to a person.",
    "outside": "It reads outside the run's working directory, which the policy leaves to a person.",
}
MSG_READ_ONLY = "{tool} only reads inside the run's working directory; the policy allows read-only tools."
MSG_FAILED = "The policy agent could not decide ({error}); a person decides."
MSG_INVALID = "The policy's answer does not fit the question ({error}); a person decides."
MSG_POLICY_TAKEN = "Claude already took the policy's answer; send Claude a message to correct it."
DENIED_BY_POLICY = "The team's policy denied this {tool} call: {message}"

_tasks: set[asyncio.Task[None]] = set()


def _spawn(work: Coroutine[Any, Any, None], name: str) -> None:
    """Run the agent beside the request that showed the card, which must not wait for it.

    In a fresh context: the agent outlives the request, and must not inherit the request's
    thread (``promptmgr.request_threads``), which is lent to the next request once this
    one ends (asgiref refuses thread-sensitive calls from a task that outlived it)."""
    task = asyncio.get_running_loop().create_task(work, name=name, context=contextvars.Context())
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


async def stop_all() -> None:
    """Server shutdown: agents still thinking or waiting out their delay stop."""
    for task in list(_tasks):
        task.cancel()
    if _tasks:
        await asyncio.wait(list(_tasks), timeout=5)


@dataclass(frozen=True)
class Setup:
    run_id: int
    mode: str
    delay: int
    instructions: str
    permissions: bool
    context: str
    model: str
    workdir: str


def _setup(run_id: int) -> Setup | None:
    run = Run.objects.select_related("conversation__project").get(pk=run_id)
    project = run.conversation.project
    if project.answer_policy == AnswerPolicy.OFF:
        return None
    return Setup(
        run_id=run_id,
        mode=project.answer_policy,
        delay=int(project.answer_policy_delay),
        instructions=project.answer_policy_instructions,
        permissions=bool(project.answer_policy_permissions),
        context=project.context,
        model=settings.ANSWER_POLICY_MODEL,
        workdir=run.workdir,
    )


# --- What is never the policy's ----------------------------------------------------------


def reserved_for_question(questions: list[dict[str, Any]]) -> str:
    """The category that keeps a question with a person, or ""."""
    parts = []
    for question in questions:
        parts.append(str(question.get("question", "")))
        for option in question.get("options") or []:
            parts += [str(option.get("label", "")), str(option.get("description", ""))]
    text = "\n".join(parts)
    return next((name for name, pattern in RESERVED.items() if pattern.search(text)), "")


def _inside(workdir: str, tool_input: dict[str, Any]) -> bool:
    if not workdir:
        return False
    root = Path(workdir).resolve()
    for key in PATH_KEYS:
        value = tool_input.get(key)
        if value:
            target = Path(str(value))
            target = (target if target.is_absolute() else root / target).resolve()
            if not target.is_relative_to(root):
                return False
    return True


def rule_for_tool(setup: Setup, tool_name: str, tool_input: dict[str, Any]) -> tuple[str, str]:
    """What the policy's rules decide before any model: ("allow" | "defer" | "", reserved category)."""
    if tool_name in READ_ONLY_TOOLS:
        return ("allow", "") if _inside(setup.workdir, tool_input) else ("defer", "outside")
    if tool_name == "Bash" and not re.search(r"\bbash\b", setup.instructions, re.I):
        return "defer", "bash"
    if DESTRUCTIVE.search(json.dumps(tool_input)) or CREDENTIALS.search(json.dumps(tool_input)):
        return "defer", "destructive" if DESTRUCTIVE.search(json.dumps(tool_input)) else "credentials"
    return "", ""


# --- The conversation so far -------------------------------------------------------------


def _turn(event: str, data: dict[str, Any]) -> dict[str, str] | None:
    if event == "prompt":
        return {"role": "user", "text": str(data.get("text", ""))}
    if event == "user_message":
        return {"role": "user", "text": str(data.get("text", ""))}
    if event == "assistant_text":
        return {"role": "claude", "text": str(data.get("text", ""))}
    if event == "tool_use":
        return {"role": "tool", "text": f"{data.get('name')} {json.dumps(data.get('input'))[:500]}"}
    if event == "ask_user_answered":
        return {"role": "user", "text": "Answered: " + json.dumps(data.get("answers"), ensure_ascii=False)}
    return None


def _earlier_turns(run_id: int) -> list[dict[str, str]]:
    run = Run.objects.get(pk=run_id)
    rows = RunEvent.objects.filter(run__conversation_id=run.conversation_id, run_id__lt=run_id).order_by(
        "run_id", "seq"
    )
    return [t for row in rows.iterator() if (t := _turn(row.event, row.data)) is not None]


async def conversation_so_far(run_id: int) -> list[dict[str, str]]:
    """The conversation's earlier runs (database) and this run's events so far (Redis)."""
    turns = await sync_to_async(_earlier_turns)(run_id)
    turns += [t for e in await events.read_events(run_id, 0) if (t := _turn(e.event, e.data)) is not None]
    return turns


# --- Recording and telling ----------------------------------------------------------------


def _record(**fields: Any) -> PolicyAnswer:
    return PolicyAnswer.objects.create(**fields)


async def _announce(policy: PolicyAnswer, **extra: Any) -> None:
    subject = (
        {"question_id": str(policy.question.question_id)}
        if policy.question is not None
        else {"request_id": str(policy.permission_request.request_id) if policy.permission_request else ""}
    )
    await events.append_event(
        policy.run_id,
        "policy_decision",
        {
            **subject,
            "policy_id": policy.pk,
            "mode": policy.mode,
            "decision": policy.decision,
            "answers": policy.answers,
            "message": policy.message,
            "reasoning": policy.reasoning,
            "reserved": policy.reserved or None,
            "outcome": policy.outcome,
            **extra,
        },
    )


async def _ask(setup: Setup, subject: dict[str, Any]) -> AgentReply:
    text = request_text(
        project_context=setup.context,
        instructions=setup.instructions,
        conversation=await conversation_so_far(setup.run_id),
        subject=subject,
    )
    return await ask_model(model=setup.model, text=text)


async def _wait_out_the_delay(setup: Setup, created_at: Any) -> None:
    remaining = (created_at + timedelta(seconds=setup.delay) - timezone.now()).total_seconds()
    if remaining > 0:
        await asyncio.sleep(remaining)


# --- Questions -----------------------------------------------------------------------------


def answer_body(questions: list[dict[str, Any]], reply: PolicyReply) -> dict[str, Any]:
    """The model's choices as submit-answer's form shape (labels become option indices)."""
    by_question = {choice.question: choice for choice in reply.choices}
    answers: dict[str, Any] = {}
    for position, question in enumerate(questions):
        text = str(question["question"])
        choice = by_question.get(text) or (reply.choices[position] if position < len(reply.choices) else None)
        if choice is None:
            raise AnswerError(f"no answer for “{text}”")
        labels = [str(o["label"]) for o in question.get("options") or []]
        unknown = [label for label in choice.selected if label not in labels]
        if unknown:
            raise AnswerError(f"“{unknown[0]}” is not an option of “{text}”")
        answers[text] = {
            "selected": [labels.index(label) for label in choice.selected],
            "other": choice.other,
        }
    return {"answers": answers}


def question_consider(*, run_id: int, question_id: str, questions: list[dict[str, Any]]) -> None:
    """A question card was shown: let the policy think about it, in the background."""
    _spawn(_question_flow(run_id, question_id, questions), name=f"policy-{question_id}")


async def _question_flow(run_id: int, question_id: str, questions: list[dict[str, Any]]) -> None:
    try:
        setup = await sync_to_async(_setup)(run_id)
        if setup is None:
            return
        question = await Question.objects.aget(question_id=question_id)
        policy = await _question_decision(setup, question, questions)
        await _announce(policy, answer_at=_answer_at(setup, question, policy))
        if policy.outcome == PolicyOutcome.WAITING:
            await _wait_out_the_delay(setup, question.created_at)
            await question_answer_apply(policy_id=policy.pk)
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("run %s: the policy failed on question %s", run_id, question_id)


def _answer_at(setup: Setup, question: Question, policy: PolicyAnswer) -> str | None:
    if policy.outcome != PolicyOutcome.WAITING:
        return None
    return (question.created_at + timedelta(seconds=setup.delay)).isoformat()


async def _question_decision(
    setup: Setup, question: Question, questions: list[dict[str, Any]]
) -> PolicyAnswer:
    common: dict[str, Any] = {"run_id": setup.run_id, "question": question, "mode": setup.mode}
    reserved = reserved_for_question(questions)
    if reserved:
        return await sync_to_async(_record)(
            **common,
            decision=PolicyDecision.DEFER,
            reserved=reserved,
            reasoning=MSG_RESERVED[reserved],
            outcome=PolicyOutcome.DEFERRED,
        )
    try:
        agent = await _ask(setup, {"kind": "question", "questions": questions})
    except AgentError as exc:
        return await sync_to_async(_record)(
            **common,
            decision=PolicyDecision.DEFER,
            reasoning=MSG_FAILED.format(error=exc),
            error=str(exc),
            outcome=PolicyOutcome.FAILED,
        )
    common |= {"model": agent.model, "usage": agent.usage, "reasoning": agent.reply.reasoning}
    if agent.reply.decision != "answer":
        return await sync_to_async(_record)(
            **common, decision=PolicyDecision.DEFER, outcome=PolicyOutcome.DEFERRED
        )
    try:
        body = answer_body(questions, agent.reply)
        form = normalize_answers(questions, body)
    except AnswerError as exc:
        return await sync_to_async(_record)(
            **common,
            decision=PolicyDecision.DEFER,
            error=MSG_INVALID.format(error=exc),
            outcome=PolicyOutcome.FAILED,
        )
    waiting = setup.mode == AnswerPolicy.AUTO
    return await sync_to_async(_record)(
        **common,
        decision=PolicyDecision.ANSWER,
        answers=form.display,
        answer_body=body,
        outcome=PolicyOutcome.WAITING if waiting else PolicyOutcome.SUGGESTED,
    )


def _apply_answer(policy_id: int) -> tuple[PolicyAnswer, FormAnswer] | None:
    policy = PolicyAnswer.objects.select_related("question").get(pk=policy_id)
    question = policy.question
    assert question is not None
    form = normalize_answers(question.questions, policy.answer_body or {})
    now = timezone.now()
    with transaction.atomic():
        # First answer wins, the policy's as a person's.
        updated = Question.objects.filter(
            pk=question.pk, status=QuestionStatus.PENDING, expires_at__gt=now
        ).update(
            status=QuestionStatus.ANSWERED,
            answers=form.display,
            answer_items=[item.model_dump() for item in form.items],
            notes="",
            answered_by=None,
            answered_by_policy=True,
            answered_at=now,
        )
        if not updated:
            question.refresh_from_db(fields=["status"])
            answered = question.status in (QuestionStatus.ANSWERED, QuestionStatus.DELIVERED)
            policy.outcome = PolicyOutcome.PERSON_FIRST if answered else PolicyOutcome.CLOSED
            policy.save(update_fields=["outcome"])
            return None
        services.resume_if_idle(question.run_id)
        policy.outcome, policy.applied_at = PolicyOutcome.APPLIED, now
        policy.save(update_fields=["outcome", "applied_at"])
    return policy, form


async def question_answer_apply(*, policy_id: int) -> bool:
    """Give the policy's answer, unless a person answered first or the question closed."""
    applied = await sync_to_async(_apply_answer)(policy_id)
    if applied is None:
        return False
    policy, form = applied
    assert policy.question is not None and policy.applied_at is not None
    question_id = str(policy.question.question_id)
    remaining = max(1, int((policy.question.expires_at - timezone.now()).total_seconds()))
    event = {
        "question_id": question_id,
        "answers": form.display,
        "notes": "",
        "answered_by": "policy",
        "by_policy": True,
        "reasoning": policy.reasoning,
        "policy_id": policy.pk,
        "answered_at": policy.applied_at.isoformat(),
    }
    # The card's update lands with the hand-off, as a person's answer's does.
    await live.answer_push(
        question_id,
        form.handoff().model_dump(),
        ttl=remaining + live.QUESTION_TTL_GRACE,
        run_events=services.card_and_resume(policy.run_id, "ask_user_answered", event),
    )
    await live.question_cache_clear(policy.run_id, question_id)
    return True


# --- Overriding a policy answer ------------------------------------------------------------


def _prepare_override(question_id: str, user: Any, body: AnswerIn) -> tuple[FormAnswer, int]:
    """The override's answer and the question's run."""
    question = services._load_for_user(question_id, user)
    if not (question.status == QuestionStatus.ANSWERED and question.answered_by_policy):
        raise Conflict(services.MSG_ALREADY_ANSWERED, code="already_answered")
    try:
        return normalize_answers(question.questions, body), question.run_id
    except AnswerError as exc:
        raise Invalid(str(exc), code="invalid_answer") from None


def _record_override(question_id: str, user: Any, form: FormAnswer, answered_at: datetime) -> None:
    with transaction.atomic():
        question = Question.objects.select_for_update().get(question_id=question_id)
        Question.objects.filter(pk=question.pk).update(
            answers=form.display,
            answer_items=[item.model_dump() for item in form.items],
            notes=form.notes,
            answered_by=user,
            answered_by_policy=False,
            answered_at=answered_at,
        )
        PolicyAnswer.objects.filter(question=question, outcome=PolicyOutcome.APPLIED).update(
            outcome=PolicyOutcome.OVERRIDDEN, overridden_by=user
        )


async def answer_override(*, question_id: str, user: Any, body: AnswerIn) -> dict[str, Any]:
    """A member replaces the policy's answer; 409 once Claude has taken it (or for an
    answer a person gave).

    The card's update lands with the swap, ahead of it, so every page hears of the new
    answer before anything Claude does with it; the database follows.
    """
    form, run_id = await sync_to_async(_prepare_override)(question_id, user, body)
    answered_at = timezone.now()
    event = {
        "question_id": question_id,
        "answers": form.display,
        "notes": form.notes,
        "answered_by": getattr(user, "username", ""),
        "overrides_policy": True,
        "answered_at": answered_at.isoformat(),
    }
    ttl = int(settings.ASK_USER_DEFAULT_TIMEOUT) + live.QUESTION_TTL_GRACE
    replaced = await live.answer_replace_unless_taken(
        question_id,
        form.handoff().model_dump(),
        ttl=ttl,
        run_events=(run_id, [("ask_user_answered", event)]),
    )
    if not replaced:
        raise Conflict(MSG_POLICY_TAKEN, code="already_taken")
    await sync_to_async(_record_override)(question_id, user, form, answered_at)
    return event


# --- Tool approvals ------------------------------------------------------------------------


def permission_consider(*, run_id: int, request_id: str, tool_name: str, tool_input: dict[str, Any]) -> None:
    """A permission card was shown: let the policy think about it where the project allows."""
    _spawn(_permission_flow(run_id, request_id, tool_name, tool_input), name=f"policy-{request_id}")


async def _permission_flow(run_id: int, request_id: str, tool_name: str, tool_input: dict[str, Any]) -> None:
    try:
        setup = await sync_to_async(_setup)(run_id)
        if setup is None or not setup.permissions:
            return
        request = await PermissionRequest.objects.aget(request_id=request_id)
        policy = await _permission_decision(setup, request, tool_name, tool_input)
        answer_at = None
        if policy.outcome == PolicyOutcome.WAITING:
            answer_at = (request.created_at + timedelta(seconds=setup.delay)).isoformat()
        await _announce(policy, answer_at=answer_at)
        if policy.outcome == PolicyOutcome.WAITING:
            await _wait_out_the_delay(setup, request.created_at)
            await permission_decision_apply(policy_id=policy.pk)
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("run %s: the policy failed on permission request %s", run_id, request_id)


async def _permission_decision(
    setup: Setup, request: PermissionRequest, tool_name: str, tool_input: dict[str, Any]
) -> PolicyAnswer:
    common: dict[str, Any] = {"run_id": setup.run_id, "permission_request": request, "mode": setup.mode}
    waiting = PolicyOutcome.WAITING if setup.mode == AnswerPolicy.AUTO else PolicyOutcome.SUGGESTED
    ruled, reserved = rule_for_tool(setup, tool_name, tool_input)
    if ruled == "defer":
        return await sync_to_async(_record)(
            **common,
            decision=PolicyDecision.DEFER,
            reserved=reserved,
            reasoning=MSG_RESERVED[reserved],
            outcome=PolicyOutcome.DEFERRED,
        )
    if ruled == "allow":
        return await sync_to_async(_record)(
            **common,
            decision=PolicyDecision.ALLOW,
            reasoning=MSG_READ_ONLY.format(tool=tool_name),
            outcome=waiting,
        )
    subject = {
        "kind": "tool_call",
        "tool_call": {"tool_name": tool_name, "input": tool_input, "working_directory": setup.workdir},
    }
    try:
        agent = await _ask(setup, subject)
    except AgentError as exc:
        return await sync_to_async(_record)(
            **common,
            decision=PolicyDecision.DEFER,
            reasoning=MSG_FAILED.format(error=exc),
            error=str(exc),
            outcome=PolicyOutcome.FAILED,
        )
    decision = agent.reply.decision if agent.reply.decision in ("allow", "deny") else PolicyDecision.DEFER
    return await sync_to_async(_record)(
        **common,
        decision=decision,
        message=agent.reply.message if decision == "deny" else "",
        reasoning=agent.reply.reasoning,
        model=agent.model,
        usage=agent.usage,
        outcome=PolicyOutcome.DEFERRED if decision == PolicyDecision.DEFER else waiting,
    )


def _apply_decision(policy_id: int) -> PolicyAnswer | None:
    policy = PolicyAnswer.objects.select_related("permission_request").get(pk=policy_id)
    request = policy.permission_request
    assert request is not None
    allowed = policy.decision == PolicyDecision.ALLOW
    tool = request.tool_name
    told = DENIED_BY_POLICY.format(tool=tool, message=policy.message or policy.reasoning)
    now, message = timezone.now(), "" if allowed else told
    fields = {
        "status": PermissionStatus.ALLOWED if allowed else PermissionStatus.DENIED,
        "decision": Decision.ALLOW if allowed else Decision.DENY,
        "message": message,
        "decided_by": None,
        "decided_by_policy": True,
        "decided_at": now,
    }
    with transaction.atomic():
        updated = PermissionRequest.objects.filter(
            pk=request.pk, status=PermissionStatus.PENDING, expires_at__gt=now
        ).update(**fields)
        if not updated:
            request.refresh_from_db(fields=["status"])
            decided = request.status in (PermissionStatus.ALLOWED, PermissionStatus.DENIED)
            policy.outcome = PolicyOutcome.PERSON_FIRST if decided else PolicyOutcome.CLOSED
            policy.save(update_fields=["outcome"])
            return None
        services.resume_if_idle(request.run_id)
        policy.outcome, policy.applied_at, policy.message = PolicyOutcome.APPLIED, now, message
        policy.save(update_fields=["outcome", "applied_at", "message"])
    # The request as stored, for its card's update (decided_event).
    for name, value in fields.items():
        setattr(request, name, value)
    return policy


def decided_event(request: PermissionRequest, reasoning: str) -> dict[str, Any]:
    """The card's update (``permission_decided``) for the policy's decision of ``request``
    (as stored): its wake's, and the one a poll puts on the pages when it takes the decision
    from the database after the wake was lost (``approvals._stored_decided_event``)."""
    assert request.decided_at is not None
    return {
        "request_id": str(request.request_id),
        "decision": request.decision,
        "by": "policy",
        "by_policy": True,
        "rule": None,
        "message": request.message,
        "reasoning": reasoning,
        "decided_at": request.decided_at.isoformat(),
    }


def applied_reasoning(request: PermissionRequest) -> str:
    """The reasoning of the policy's decision that decided ``request``."""
    applied = PolicyAnswer.objects.filter(permission_request=request, outcome=PolicyOutcome.APPLIED)
    return applied.values_list("reasoning", flat=True).first() or ""


async def permission_decision_apply(*, policy_id: int) -> bool:
    """Decide the tool call as the policy said, unless a person decided first."""
    policy = await sync_to_async(_apply_decision)(policy_id)
    if policy is None:
        return False
    request = policy.permission_request
    assert request is not None
    request_id = str(request.request_id)
    remaining = max(1, int((request.expires_at - timezone.now()).total_seconds()))
    event = decided_event(request, policy.reasoning)
    # The card's update lands with the wake, as a person's decision's does.
    await live.answer_wake(
        request_id,
        ttl=remaining + live.QUESTION_TTL_GRACE,
        run_events=services.card_and_resume(policy.run_id, "permission_decided", event),
    )
    await live.permission_pending_remove(policy.run_id, request_id)
    return True
