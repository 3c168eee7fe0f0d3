"""Admin: the questions Claude asked, the tool calls it asked to make, and what people decided; read-only."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from askuser.models import PermissionRequest, PolicyAnswer, Question


@admin.register(Question)
class QuestionAdmin(admin.ModelAdmin):
    """A record of who answered what; nothing here is edited by hand."""

    list_display = ["__str__", "run", "source", "status", "answered_by", "created_at", "expires_at"]
    list_select_related = ["run", "answered_by"]
    list_filter = ["status", "source"]
    search_fields = ["question_id", "notes", "answered_by__username"]
    date_hierarchy = "created_at"

    def get_readonly_fields(self, request: HttpRequest, obj: Question | None = None) -> list[str]:
        return [field.name for field in Question._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(PermissionRequest)
class PermissionRequestAdmin(admin.ModelAdmin):
    """Every tool approval: the call, who decided what and when, the rule it added."""

    list_display = ["tool_name", "run", "status", "decision", "decided_by", "rule", "created_at"]
    list_select_related = ["run", "decided_by"]
    list_filter = ["status", "decision", "source"]
    search_fields = ["request_id", "tool_name", "rule", "decided_by__username"]
    date_hierarchy = "created_at"

    def get_readonly_fields(self, request: HttpRequest, obj: PermissionRequest | None = None) -> list[str]:
        return [field.name for field in PermissionRequest._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(PolicyAnswer)
class PolicyAnswerAdmin(admin.ModelAdmin):
    """Every decision of the answering policy: its reasoning, the model's usage, what became of it."""

    list_display = ["__str__", "run", "mode", "decision", "reserved", "outcome", "model", "created_at"]
    list_select_related = ["run"]
    list_filter = ["mode", "decision", "outcome"]
    search_fields = ["reasoning", "model"]
    date_hierarchy = "created_at"

    def get_readonly_fields(self, request: HttpRequest, obj: PolicyAnswer | None = None) -> list[str]:
        return [field.name for field in PolicyAnswer._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
