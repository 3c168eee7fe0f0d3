from __future__ import annotations

from django.apps import AppConfig


class AskuserConfig(AppConfig):
    name = "askuser"
    verbose_name = "Ask user"
    default_auto_field = "django.db.models.BigAutoField"
