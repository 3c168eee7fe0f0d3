"""Projects, their conversations with Claude, runs (one prompt each) and run events."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from core.storable import StorableJSONField, StorableTextField

ASK_USER_TIMEOUT_MIN = 30
ASK_USER_TIMEOUT_MAX = 900
ANSWER_POLICY_DELAY_MAX = ASK_USER_TIMEOUT_MAX


def _default_ask_user_timeout() -> int:
    return int(settings.ASK_USER_DEFAULT_TIMEOUT)


class Engine(models.TextChoices):
    CLI = "cli", "Claude Code CLI + ask-user MCP relay"
    SDK = "sdk", "Claude Agent SDK (built-in AskUserQuestion)"


class PermissionMode(models.TextChoices):
    DEFAULT = "default", "Default (ask-user only; other tools need allow rules)"
    ACCEPT_EDITS = "acceptEdits", "Accept edits"
    PLAN = "plan", "Plan (read-only)"
    BYPASS = "bypassPermissions", "Bypass permissions (CLI engine only)"


class AnswerPolicy(models.TextChoices):
    OFF = "off", "Off: people answer"
    SUGGEST = "suggest", "Suggest: the policy's answer is shown, a person decides"
    AUTO = "auto", "Auto: the policy answers after the delay unless a person answers first"


class WorkspaceStatus(models.TextChoices):
    CLONING = "cloning"
    READY = "ready"
    FAILED = "failed"


class GitSecretKind(models.TextChoices):
    NONE = "", "None"
    TOKEN = "token", "Access token (HTTPS)"
    SSH_KEY = "ssh_key", "Deploy key (SSH)"


class ProjectQuerySet(models.QuerySet["Project"]):
    def visible_to(self, user: Any) -> ProjectQuerySet:
        """Projects the user owns or is a member of; nothing for anonymous users."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(Q(owner=user) | Q(members=user)).distinct()


class Project(models.Model):
    name = models.CharField(max_length=200)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="owned_projects"
    )
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="member_projects")
    context = models.TextField(
        blank=True, help_text="Becomes CLAUDE.local.md in each of the project's worktrees."
    )
    engine = models.CharField(max_length=8, choices=Engine.choices, default=Engine.CLI)
    ask_user_enabled = models.BooleanField(
        "ask-user enabled",
        default=True,
        help_text="Let Claude ask questions that appear as cards in the chat.",
    )
    ask_user_timeout = models.PositiveIntegerField(
        "ask-user timeout (s)",
        default=_default_ask_user_timeout,
        validators=[
            MinValueValidator(ASK_USER_TIMEOUT_MIN),
            MaxValueValidator(ASK_USER_TIMEOUT_MAX),
        ],
    )
    permission_mode = models.CharField(
        max_length=32, choices=PermissionMode.choices, default=PermissionMode.ACCEPT_EDITS
    )
    answer_policy = models.CharField(
        max_length=8,
        choices=AnswerPolicy.choices,
        default=AnswerPolicy.OFF,
        help_text="Whether an agent answers Claude's questions by the team's instructions.",
    )
    answer_policy_delay = models.PositiveIntegerField(
        "answer-policy delay (s)",
        default=30,
        validators=[MaxValueValidator(ANSWER_POLICY_DELAY_MAX)],
        help_text="Auto: seconds a person has to answer first; 0 answers at once.",
    )
    answer_policy_instructions = models.TextField(
        blank=True, help_text="The team's rules for answering, in plain words."
    )
    answer_policy_permissions = models.BooleanField(
        "policy decides tool approvals",
        default=False,
        help_text="Let the policy decide tool approvals too (read-only tools; Bash only if the "
        "instructions allow it).",
    )
    model = models.CharField(max_length=100, blank=True, help_text="Empty: the CLI's default.")
    git_url = models.CharField(
        max_length=1000, blank=True, help_text="Cloned into the workspace; empty: a fresh repository."
    )
    git_ref = models.CharField(max_length=255, blank=True, help_text="Branch or tag to start from.")
    default_branch = models.CharField(max_length=255, blank=True)
    workspace_status = models.CharField(
        max_length=16, choices=WorkspaceStatus.choices, default=WorkspaceStatus.READY
    )
    workspace_error = models.TextField(blank=True)
    # Fernet ciphertext (key from the environment); never shown, never logged.
    git_secret = models.TextField(blank=True, editable=False)
    git_secret_kind = models.CharField(max_length=16, choices=GitSecretKind.choices, blank=True, default="")
    commit_after_run = models.BooleanField(
        default=False, help_text="Commit each run's changes on the conversation's branch."
    )
    worktree_copy_globs = models.TextField(
        blank=True, help_text="Git-ignored files (one glob a line, e.g. .env) copied into new worktrees."
    )
    worktree_setup_command = models.TextField(
        blank=True, help_text="Run once in each new worktree, e.g. npm ci."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ask_user_timeout__gte=ASK_USER_TIMEOUT_MIN)
                & Q(ask_user_timeout__lte=ASK_USER_TIMEOUT_MAX),
                name="project_ask_user_timeout_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def is_visible_to(self, user: Any) -> bool:
        """``visible_to`` for one project already loaded: the owner with no further query."""
        if not getattr(user, "is_authenticated", False):
            return False
        return bool(self.owner_id == user.pk or self.members.filter(pk=user.pk).exists())


class PermissionRule(models.Model):
    """An "Always allow" rule of a project, e.g. ``Bash(npm test:*)``.

    Written into each workspace's Claude settings (``permissions.allow``), where the CLI
    itself matches it; PromptManager never matches rules on its own.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="permission_rules")
    rule = models.CharField(max_length=500)
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["project", "rule"], name="permission_rule_unique")]

    def __str__(self) -> str:
        return self.rule


class ConversationQuerySet(models.QuerySet["Conversation"]):
    def with_active_status(self) -> ConversationQuerySet:
        """Annotate ``active_status``: the status of the conversation's unfinished run, or None.

        The sidebar shows it, so a question waiting in a conversation that is not open is
        not missed."""
        active = (
            Run.objects.active().filter(conversation=models.OuterRef("pk")).order_by("-created_at", "-id")
        )
        return self.annotate(active_status=models.Subquery(active.values("status")[:1]))


class Conversation(models.Model):
    """A thread of runs that continue one Claude session (``--resume``)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="conversations")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations")
    title = models.CharField(max_length=200, blank=True)
    claude_session_id = models.CharField(max_length=100, blank=True)
    branch = models.CharField(max_length=255, blank=True, help_text="pm/<id>, made from the default branch.")
    worktree_path = models.CharField(max_length=1000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ConversationQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at", "-id"]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.pk}"


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_USER = "waiting_for_user"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


ACTIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING_FOR_USER)


class RunQuerySet(models.QuerySet["Run"]):
    def visible_to(self, user: Any) -> RunQuerySet:
        return self.filter(conversation__project__in=Project.objects.visible_to(user))

    def active(self) -> RunQuerySet:
        return self.filter(status__in=ACTIVE_RUN_STATUSES)


class Run(models.Model):
    """One prompt sent to Claude and everything that came back."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="runs")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    engine = models.CharField(max_length=8, choices=Engine.choices, default=Engine.CLI)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    prompt = models.TextField()
    workdir = models.CharField(
        max_length=1000, blank=True, help_text="Where Claude works: the run's working directory."
    )
    stream_token = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # The worktree's state as git objects when the run started and ended (commit ids of
    # snapshots), so its changes are a plain ``git diff`` between the two.
    start_snapshot = models.CharField(max_length=64, blank=True)
    end_snapshot = models.CharField(max_length=64, blank=True)
    changed_files = models.JSONField(default=list, blank=True)
    reverted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    error = StorableTextField(blank=True, help_text="What went wrong, in a sentence or a few.")
    stderr_tail = StorableTextField(blank=True, help_text="The end of what Claude Code wrote to stderr.")
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    num_turns = models.PositiveIntegerField(null=True, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_RUN_STATUSES


class RunEvent(models.Model):
    """An SSE event of a run, kept so a conversation can be shown again after a reload."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    event = models.CharField(max_length=40)
    data = StorableJSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="run_event_seq_unique")]

    def __str__(self) -> str:
        return f"{self.event} #{self.seq} of run {self.run_id}"
