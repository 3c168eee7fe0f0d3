"""Forms of the browser pages; they check input shape, the services check the rules."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from promptmgr.models import ASK_USER_TIMEOUT_MAX, ASK_USER_TIMEOUT_MIN, Engine, PermissionMode, Project
from promptmgr.services.projects import NAME_REQUIRED, TIMEOUT_OUT_OF_RANGE

MEMBER_REQUIRED = "Type the username of the person to add."
DELETE_CONFIRM_MISMATCH = "Type the project name exactly as shown to delete it."


class ServiceErrorsForm(forms.Form):
    def add_service_errors(self, exc: ValidationError) -> None:
        """Show a service's field errors next to their fields, the rest above the form."""
        for field, messages in exc.message_dict.items():
            for message in messages:
                self.add_error(field if field in self.fields else None, message)


class ProjectCreateForm(ServiceErrorsForm):
    name = forms.CharField(max_length=200, error_messages={"required": NAME_REQUIRED})
    context = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="Instructions Claude reads before every prompt.",
    )
    engine = forms.ChoiceField(choices=Engine.choices, initial=Engine.CLI)
    git_url = forms.CharField(
        required=False,
        max_length=1000,
        label="Repository URL",
        help_text="Cloned in the background (https or ssh); empty: a fresh repository.",
    )
    git_ref = forms.CharField(
        required=False, max_length=255, label="Branch or tag", help_text="Empty: the repository's default."
    )
    git_token = forms.CharField(
        required=False,
        max_length=10_000,
        label="Access token",
        widget=forms.PasswordInput(render_value=False),
        help_text="For a private https repository; stored encrypted and never shown again.",
    )


class ProjectSettingsForm(ServiceErrorsForm):
    """The settings page's main form; bypassPermissions is offered to staff only."""

    name = forms.CharField(max_length=200, error_messages={"required": NAME_REQUIRED})
    context = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6}),
        help_text="Instructions Claude reads before every prompt.",
    )
    engine = forms.ChoiceField(choices=Engine.choices)
    permission_mode = forms.ChoiceField(
        choices=PermissionMode.choices,
        help_text="Which tool calls run without asking. Accept edits: file edits run, commands ask.",
    )
    ask_user_enabled = forms.BooleanField(
        required=False,
        label="Let Claude ask questions and request approvals in the chat",
    )
    ask_user_timeout = forms.IntegerField(
        label="Question timeout (seconds)",
        min_value=ASK_USER_TIMEOUT_MIN,
        max_value=ASK_USER_TIMEOUT_MAX,
        error_messages={
            "min_value": TIMEOUT_OUT_OF_RANGE,
            "max_value": TIMEOUT_OUT_OF_RANGE,
            "required": TIMEOUT_OUT_OF_RANGE,
        },
        help_text=f"How long a question or approval waits for an answer ({ASK_USER_TIMEOUT_MIN}–{ASK_USER_TIMEOUT_MAX}).",
    )
    model = forms.CharField(max_length=100, required=False, help_text="Empty: the CLI's default model.")
    commit_after_run = forms.BooleanField(
        required=False,
        label="Commit each run's changes on the conversation's branch",
        help_text="One commit per run, by the person who sent the prompt, with the prompt as its message.",
    )

    def __init__(self, *args: Any, user: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Only staff may choose bypass; a project already in it keeps showing it to members.
        if not user.is_staff and project.permission_mode != PermissionMode.BYPASS:
            field = self.fields["permission_mode"]
            assert isinstance(field, forms.ChoiceField)
            field.choices = [c for c in PermissionMode.choices if c[0] != PermissionMode.BYPASS]


class MemberAddForm(ServiceErrorsForm):
    username = forms.CharField(max_length=150, label="Username", error_messages={"required": MEMBER_REQUIRED})


class ProjectDeleteForm(forms.Form):
    """Deleting asks for the project's name, typed, so one stray click cannot do it."""

    confirm_name = forms.CharField(max_length=200, label="Type the project's name to confirm", required=False)

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.project = project

    def clean_confirm_name(self) -> str:
        typed = str(self.cleaned_data.get("confirm_name") or "").strip()
        if typed != self.project.name:
            raise ValidationError(DELETE_CONFIRM_MISMATCH)
        return typed
