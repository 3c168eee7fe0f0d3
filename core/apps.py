from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Infrastructure both apps share: Redis access, the run event stream, this instance's id."""

    name = "core"
    verbose_name = "Core"
    default_auto_field = "django.db.models.BigAutoField"
