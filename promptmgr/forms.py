"""Forms of the browser pages; they check input shape, the services check the rules."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from promptmgr.models import Engine
from promptmgr.services.projects import NAME_REQUIRED


class ProjectCreateForm(forms.Form):
    name = forms.CharField(max_length=200, error_messages={"required": NAME_REQUIRED})
    context = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="Instructions Claude reads first (the workspace's CLAUDE.md).",
    )
    engine = forms.ChoiceField(choices=Engine.choices, initial=Engine.CLI)

    def add_service_errors(self, exc: ValidationError) -> None:
        """Show a service's field errors next to their fields, the rest above the form."""
        for field, messages in exc.message_dict.items():
            for message in messages:
                self.add_error(field if field in self.fields else None, message)
