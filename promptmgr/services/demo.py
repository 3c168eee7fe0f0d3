"""The demo login a fresh install starts with (``manage.py ensure_demo_user``), and what the
chat page tells a new user the offline demo model can show."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from promptmgr.models import Project
from promptmgr.scripted_model.scenarios import DEMO_TRIGGERS
from promptmgr.services.projects import project_create

QUESTIONS_OFF = "questions and approvals are off for this project (see its Settings)"

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


def project_asks_user(project: Project) -> bool:
    """Claude may ask questions and request approvals here (both engines, both switches)."""
    return bool(settings.ASK_USER_ENABLED and project.ask_user_enabled)


@dataclass(frozen=True)
class DemoTriggerView:
    word: str
    prompt: str
    what: str
    available: bool
    off_reason: str


def demo_triggers(*, project: Project) -> list[DemoTriggerView]:
    """The demo's trigger words for this project; those that need ask-user say when it is off."""
    asks = project_asks_user(project)
    return [
        DemoTriggerView(
            word=t.word,
            prompt=t.example,
            what=t.what,
            available=asks or not t.needs_ask_user,
            off_reason="" if asks or not t.needs_ask_user else QUESTIONS_OFF,
        )
        for t in DEMO_TRIGGERS
    ]
