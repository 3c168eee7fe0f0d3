"""Questions Claude asked during a run, and the answers users gave."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models

from core.prepared import PreparedGet, PreparedUpdate
from core.questions import FormAnswer
from core.storable import StorableJSONField
from promptmgr.models import Run


class QuestionSource(models.TextChoices):
    MCP = "mcp", "ask-user MCP tool (CLI engine)"
    SDK = "sdk", "AskUserQuestion via the Agent SDK"


class QuestionStatus(models.TextChoices):
    PENDING = "pending"
    ANSWERED = "answered"
    DELIVERED = "delivered"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    # A newer question of the same run replaced it before anybody answered.
    SUPERSEDED = "superseded"
    # Answered after it expired: the answer went to Claude as a user message.
    LATE = "late"


class LateDelivery(models.TextChoices):
    """How a late answer (or a message sent while Claude works) reached Claude."""

    TURN = "turn", "into the running turn"
    NEXT_TURN = "next_turn", "as the run's next turn"
    NEXT_PROMPT = "next_prompt", "as the conversation's next prompt"


# What the answer and decision paths read of a card's run and project: its state and
# owner for the checks, the project's timeout for an expiry's wording. Loading only these
# (not every column of three joined tables) halves the load's cost: most of it is Django
# compiling the SELECT, column by column (bench/decision_path.py).
RUN_AND_PROJECT_FIELDS = (
    "run__status",
    "run__created_at",
    "run__user_id",
    "run__conversation_id",
    "run__conversation__project_id",
    "run__conversation__project__owner_id",
    "run__conversation__project__ask_user_timeout",
)


def _with_run_and_project(queryset: models.QuerySet[Any]) -> models.QuerySet[Any]:
    own = [field.name for field in queryset.model._meta.concrete_fields]
    return queryset.select_related("run__conversation__project").only(*own, *RUN_AND_PROJECT_FIELDS)


class QuestionQuerySet(models.QuerySet["Question"]):
    def pending(self) -> QuestionQuerySet:
        return self.filter(status=QuestionStatus.PENDING)

    def with_run_and_project(self) -> QuestionQuerySet:
        """Every field of the question, with ``RUN_AND_PROJECT_FIELDS`` of its run."""
        return _with_run_and_project(self)  # type: ignore[return-value]


class Question(models.Model):
    """One card: a form of 1–4 questions in the normalized shape both engines share."""

    question_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="questions")
    source = models.CharField(max_length=8, choices=QuestionSource.choices)
    questions = StorableJSONField(
        help_text="[{question, header, options:[{label, description}], multiSelect}]"
    )
    status = models.CharField(max_length=12, choices=QuestionStatus.choices, default=QuestionStatus.PENDING)
    expires_at = models.DateTimeField()
    answers = models.JSONField(null=True, blank=True, help_text="{question text: answer text}")
    answer_items = models.JSONField(
        null=True, blank=True, help_text="[{question, selected, labels, other}] (core.questions.ItemAnswer)"
    )
    notes = models.TextField(blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="answered_questions",
    )
    answered_at = models.DateTimeField(null=True, blank=True)
    answered_by_policy = models.BooleanField(default=False)
    late_delivery = models.CharField(max_length=12, choices=LateDelivery.choices, blank=True)
    late_run = models.ForeignKey(
        Run,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The run a late answer started as its prompt.",
    )
    delivered_at = models.DateTimeField(null=True, blank=True)
    delivery_mismatch = models.TextField(blank=True)
    call_key = models.CharField(
        max_length=200,
        blank=True,
        help_text="The tool call that asked it (the MCP server's Idempotency-Key, or the SDK "
        "engine's tool_use_id): the same call asked again gets this question back.",
    )
    superseded_by = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The newer question of the run that replaced this one.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = QuestionQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "call_key"], condition=~models.Q(call_key=""), name="question_call_once"
            )
        ]

    def __str__(self) -> str:
        first = (self.questions or [{}])[0].get("question", "")
        return f"{first[:60]} ({self.status})"

    def answer_form(self) -> FormAnswer:
        """The answer as stored (``answer_items`` and ``notes``), as a validated form was."""
        return FormAnswer(items=self.answer_items or [], notes=self.notes)


class PermissionStatus(models.TextChoices):
    PENDING = "pending"
    ALLOWED = "allowed"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class Decision(models.TextChoices):
    ALLOW = "allow", "Allow once"
    ALWAYS = "always", "Always allow"
    DENY = "deny", "Deny"


class PermissionRequestQuerySet(models.QuerySet["PermissionRequest"]):
    def pending(self) -> PermissionRequestQuerySet:
        return self.filter(status=PermissionStatus.PENDING)

    def with_run_and_project(self) -> PermissionRequestQuerySet:
        """Every field of the request, with ``RUN_AND_PROJECT_FIELDS`` of its run."""
        return _with_run_and_project(self)  # type: ignore[return-value]


class PermissionRequest(models.Model):
    """One tool call Claude wants to make, waiting for (or decided by) a person."""

    request_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="permission_requests")
    source = models.CharField(max_length=8, choices=QuestionSource.choices)
    tool_name = models.CharField(max_length=200)
    tool_use_id = models.CharField(max_length=200, blank=True)
    tool_input = StorableJSONField(default=dict)
    preview = StorableJSONField(default=dict, help_text="What the card shows (askuser.previews).")
    suggested_rule = models.CharField(max_length=500, blank=True)
    status = models.CharField(
        max_length=12, choices=PermissionStatus.choices, default=PermissionStatus.PENDING
    )
    expires_at = models.DateTimeField()
    decision = models.CharField(max_length=8, choices=Decision.choices, blank=True)
    rule = models.CharField(max_length=500, blank=True, help_text='The rule an "Always allow" added.')
    message = models.TextField(blank=True, help_text="What Claude was told with a deny.")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="permission_decisions",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by_policy = models.BooleanField(default=False)
    call_key = models.CharField(
        max_length=200,
        blank=True,
        help_text="The tool call that asked (the MCP server's Idempotency-Key, or the SDK "
        "engine's tool_use_id): the same call asked again gets this request back.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = PermissionRequestQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            # The key first: a call asked again is found by its key alone (a run has hundreds).
            models.UniqueConstraint(
                fields=["call_key", "run"], condition=~models.Q(call_key=""), name="permission_call_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.status})"


class PolicyMode(models.TextChoices):
    SUGGEST = "suggest"
    AUTO = "auto"


class PolicyDecision(models.TextChoices):
    ANSWER = "answer", "Answer"
    ALLOW = "allow", "Allow"
    DENY = "deny", "Deny"
    DEFER = "defer", "Leave it to a person"


class PolicyOutcome(models.TextChoices):
    SUGGESTED = "suggested", "Shown as a suggestion"
    WAITING = "waiting", "Waiting for the delay"
    APPLIED = "applied", "Answered by the policy"
    PERSON_FIRST = "person_first", "A person answered first"
    OVERRIDDEN = "overridden", "Overridden by a person"
    DEFERRED = "deferred", "Left to a person"
    CLOSED = "closed", "The card closed first"
    FAILED = "failed", "The policy agent failed"


class PolicyAnswer(models.Model):
    """One decision of the answering-by-policy agent on a question or a tool approval.

    Kept whether or not it was applied: the reasoning, the model that gave it and what it
    cost, and what became of it (``outcome``)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="policy_answers")
    question = models.ForeignKey(
        Question, null=True, blank=True, on_delete=models.CASCADE, related_name="policy_answers"
    )
    permission_request = models.ForeignKey(
        PermissionRequest, null=True, blank=True, on_delete=models.CASCADE, related_name="policy_answers"
    )
    mode = models.CharField(max_length=8, choices=PolicyMode.choices)
    decision = models.CharField(max_length=8, choices=PolicyDecision.choices)
    answers = models.JSONField(null=True, blank=True, help_text="{question text: answer text}")
    answer_body = models.JSONField(null=True, blank=True, help_text="The answer as submit-answer takes it.")
    message = models.TextField(blank=True, help_text="What Claude is told with a deny.")
    reasoning = models.TextField(blank=True)
    # A category that is always left to a person (credentials, destructive…), decided
    # without the model.
    reserved = models.CharField(max_length=40, blank=True)
    model = models.CharField(max_length=100, blank=True)
    usage = models.JSONField(default=dict, blank=True, help_text="The model's token usage.")
    error = models.TextField(blank=True)
    outcome = models.CharField(max_length=14, choices=PolicyOutcome.choices)
    overridden_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"policy {self.decision} ({self.outcome})"


# The answer and decision paths load their card by its id, with its run and project, in
# front of everything else a person's click does: compiled once (core.prepared).
question_for_answer: PreparedGet[Question] = PreparedGet(
    lambda: Question.objects.with_run_and_project(), "question_id", placeholder=uuid.UUID(int=0)
)
request_for_decision: PreparedGet[PermissionRequest] = PreparedGet(
    lambda: PermissionRequest.objects.with_run_and_project(), "request_id", placeholder=uuid.UUID(int=0)
)
# Then the first answer or decision claims the card, if it is still pending and not expired:
# ``filter(pk=…, status=pending, expires_at__gt=now).update(…)``, written once.
_STILL_OPEN = (("pk", "="), ("status", "="), ("expires_at", ">"))
answer_claim: PreparedUpdate[Question] = PreparedUpdate(
    Question, ("status", "answers", "answer_items", "notes", "answered_by", "answered_at"), _STILL_OPEN
)
decision_claim: PreparedUpdate[PermissionRequest] = PreparedUpdate(
    PermissionRequest, ("status", "decision", "rule", "message", "decided_by", "decided_at"), _STILL_OPEN
)
