from __future__ import annotations

from django.apps import AppConfig


class PromptmgrConfig(AppConfig):
    name = "promptmgr"
    verbose_name = "PromptManager"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import signals  # noqa: F401 (connects the receivers)
