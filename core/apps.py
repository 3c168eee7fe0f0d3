from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import django
from django.apps import AppConfig


def load_test_signals_alone() -> None:
    """Load ``django.test.signals`` by itself, without the ``django.test`` package.

    django-ninja 1.7's ``ninja.conf`` imports ``setting_changed`` from
    ``django.test.signals`` (Django defines it in ``django.core.signals``), and importing
    that module runs ``django/test/__init__.py`` first: the test client and runner,
    unittest and its mock, xml.dom, wsgiref and http.server, about 2.5 MiB that every
    worker kept at rest and never used. The module itself needs none of that package, so
    it is loaded here from its file under its own name, and a later ``from
    django.test.signals import …`` (ninja's, or the test package's own) finds it ready.
    Only the test suite imports ``django.test`` now. ``core`` is listed before ``ninja``
    in ``INSTALLED_APPS``, and Django imports each app's ``apps`` module in that order.
    """
    name = "django.test.signals"
    if name in sys.modules or "django.test" in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, Path(django.__file__).parent / "test" / "signals.py")
    if spec is None or spec.loader is None:  # pragma: no cover - Django's own file
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


load_test_signals_alone()


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
