"""Admin: projects with the per-project ask-user toggle, conversations and runs."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from promptmgr.models import Conversation, PermissionRule, Project, Run, RunEvent
from promptmgr.services.projects import project_check_engine_mode
from promptmgr.workspaces import workspace_sync


class ProjectAdminForm(forms.ModelForm):
    """Adds the rule that spans fields (SDK engine vs bypassPermissions) to the model's own."""

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        engine = cleaned.get("engine", self.instance.engine)
        permission_mode = cleaned.get("permission_mode", self.instance.permission_mode)
        try:
            project_check_engine_mode(engine=engine, permission_mode=permission_mode)
        except ValidationError as exc:
            self.add_error(None, exc)
        return cleaned


class PermissionRuleInline(admin.TabularInline):
    """The project's "Always allow" rules: who added each and when; removable, not editable."""

    model = PermissionRule
    extra = 0
    fields = ["rule", "added_by", "created_at"]
    readonly_fields = ["rule", "added_by", "created_at"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    form = ProjectAdminForm
    list_display = [
        "name",
        "owner",
        "engine",
        "permission_mode",
        "ask_user_enabled",
        "ask_user_timeout",
        "updated_at",
    ]
    list_display_links = ["name"]
    # The per-project ask-user switch and timeout, editable right in the list.
    list_editable = ["engine", "permission_mode", "ask_user_enabled", "ask_user_timeout"]
    list_filter = ["engine", "ask_user_enabled", "permission_mode"]
    list_select_related = ["owner"]
    search_fields = ["name", "context", "owner__username"]
    filter_horizontal = ["members"]
    raw_id_fields = ["owner"]
    # The repository is chosen when the project is created (the API or the pages clone it);
    # here it is shown, and the worktree settings (staff only, like the admin) edited.
    readonly_fields = [
        "created_at",
        "updated_at",
        "git_url",
        "git_ref",
        "default_branch",
        "workspace_status",
        "workspace_error",
        "git_secret_kind",
    ]
    inlines = [PermissionRuleInline]
    fieldsets = [
        (None, {"fields": ["name", "owner", "members", "context"]}),
        ("Claude", {"fields": ["engine", "permission_mode", "model"]}),
        ("Ask-user", {"fields": ["ask_user_enabled", "ask_user_timeout"]}),
        (
            "Answering by policy",
            {
                "fields": [
                    "answer_policy",
                    "answer_policy_delay",
                    "answer_policy_instructions",
                    "answer_policy_permissions",
                ]
            },
        ),
        ("Changes", {"fields": ["commit_after_run"]}),
        (
            "Workspace",
            {
                "fields": [
                    "git_url",
                    "git_ref",
                    "default_branch",
                    "workspace_status",
                    "workspace_error",
                    "git_secret_kind",
                    "worktree_copy_globs",
                    "worktree_setup_command",
                ]
            },
        ),
        ("History", {"fields": ["created_at", "updated_at"]}),
    ]

    def get_changelist_form(self, request: HttpRequest, **kwargs: Any) -> type[forms.ModelForm[Project]]:
        # The list's inline edits get the same cross-field check as the change form.
        kwargs.setdefault("form", ProjectAdminForm)
        return super().get_changelist_form(request, **kwargs)

    def save_model(self, request: HttpRequest, obj: Project, form: Any, change: bool) -> None:
        """Both the change form and the list's inline edits save here: regenerate the workspace."""
        super().save_model(request, obj, form, change)
        workspace_sync(project=obj)


class RunInline(admin.TabularInline):
    model = Run
    fields = readonly_fields = ("id", "status", "user", "engine", "created_at", "cost_usd")
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Conversation | None = None) -> bool:
        return False


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ["__str__", "project", "user", "updated_at"]
    list_select_related = ["project", "user"]
    list_filter = ["project"]
    search_fields = ["title", "project__name", "user__username", "claude_session_id"]
    raw_id_fields = ["project", "user"]
    readonly_fields = ["claude_session_id", "created_at", "updated_at"]
    inlines = [RunInline]


class RunEventInline(admin.TabularInline):
    model = RunEvent
    fields = readonly_fields = ("seq", "event", "data", "created_at")
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    """Runs are a record of what happened: viewable and deletable, never edited here."""

    list_display = ["id", "conversation", "user", "engine", "status", "created_at", "cost_usd"]
    list_select_related = ["conversation", "user"]
    list_filter = ["status", "engine"]
    search_fields = ["prompt", "user__username", "conversation__project__name"]
    date_hierarchy = "created_at"
    inlines = [RunEventInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Run | None = None) -> list[str]:
        return [field.name for field in Run._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
