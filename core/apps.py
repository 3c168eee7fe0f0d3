from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Infrastructure both apps share: Redis access, the run event stream, this instance's id."""

    name = "core"
    verbose_name = "Core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import malloc

        # Every process sets Django up before it starts a thread (uvicorn as it imports
        # promptmgr.asgi, manage.py runworker before its run slots): the one place where
        # all of them cap glibc's arenas in time.
        malloc.cap_arenas()
