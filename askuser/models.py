"""Questions Claude asked during a run, and the answers users gave."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

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


class QuestionQuerySet(models.QuerySet["Question"]):
    def pending(self) -> QuestionQuerySet:
        return self.filter(status=QuestionStatus.PENDING)


class Question(models.Model):
    """One card: a form of 1–4 questions in the normalized shape both engines share."""

    question_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="questions")
    source = models.CharField(max_length=8, choices=QuestionSource.choices)
    questions = models.JSONField(
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
    delivered_at = models.DateTimeField(null=True, blank=True)
    delivery_mismatch = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = QuestionQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        first = (self.questions or [{}])[0].get("question", "")
        return f"{first[:60]} ({self.status})"


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


class PermissionRequest(models.Model):
    """One tool call Claude wants to make, waiting for (or decided by) a person."""

    request_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="permission_requests")
    source = models.CharField(max_length=8, choices=QuestionSource.choices)
    tool_name = models.CharField(max_length=200)
    tool_use_id = models.CharField(max_length=200, blank=True)
    tool_input = models.JSONField(default=dict)
    preview = models.JSONField(default=dict, help_text="What the card shows (askuser.previews).")
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
    created_at = models.DateTimeField(auto_now_add=True)

    objects = PermissionRequestQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.status})"
