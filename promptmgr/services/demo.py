"""The demo login a fresh install starts with (``manage.py ensure_demo_user``)."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from promptmgr.models import Project
from promptmgr.services.projects import project_create

DEMO_USERNAME = "demo"
DEMO_PROJECT_NAME = "Demo project"
DEMO_PROJECT_CONTEXT = (
    "This is a sandbox project for trying PromptManager.\n\n"
    "When a decision is the user's to make (a name, a choice between approaches), ask them "
    "with the ask_user tool instead of guessing."
)


@dataclass(frozen=True)
class DemoUserResult:
    user_created: bool
    project_created: bool
    project_name: str | None


def demo_user_ensure(*, password: str) -> DemoUserResult:
    """Create or repair the demo superuser; give it a sample project if it owns none."""
    user_model = get_user_model()
    with transaction.atomic():
        user, user_created = user_model.objects.get_or_create(username=DEMO_USERNAME)
        user.is_staff = True
        user.is_superuser = True
        user.is_active = True
        if user_created or not user.check_password(password):
            user.set_password(password)
        user.save()
    if Project.objects.filter(owner=user).exists():
        return DemoUserResult(user_created=user_created, project_created=False, project_name=None)
    project = project_create(owner=user, name=DEMO_PROJECT_NAME, context=DEMO_PROJECT_CONTEXT)
    return DemoUserResult(user_created=user_created, project_created=True, project_name=project.name)
