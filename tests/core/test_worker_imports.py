"""What a served worker imports at rest: every module is memory it keeps (its code objects,
about 27 MiB of a worker's 90), so modules it never uses stay out.

Checked in a real interpreter that loads the app as uvicorn and ``manage.py runworker``
do (``promptmgr.asgi``, the runner and the run queue), with an Anthropic key set as in
production: no demo model, so none of the Starlette routing and form parsing that only
the demo model uses; no ``django.test`` package, which django-ninja's import of
``django.test.signals`` brought in before ``core.apps.load_test_signals_alone``; and no
urllib.request, which only the ``INTERNAL_BASE_URL`` check used. The same
interpreter then imports the test package, as the suite does, and its signals still
reach ninja's settings."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

PROGRAM = textwrap.dedent(
    """
    import json, sys
    import promptmgr.asgi, promptmgr.runner, promptmgr.run_queue  # noqa: F401

    at_rest = {name: name in sys.modules for name in sys.argv[1:]}
    from django.test import Client, override_settings
    from django.test.signals import setting_changed
    from django.test.utils import setup_test_environment
    from ninja.conf import settings as ninja_settings

    def templates_rendered():
        # The client hears template_rendered from the instrumented renderer: one signal.
        setup_test_environment()
        response = Client().get("/accounts/login/")
        return [response.status_code, [t.name for t in response.templates][:1]]

    with override_settings(NINJA_PAGINATION_PER_PAGE=7):
        overridden = ninja_settings.PAGINATION_PER_PAGE
    print(json.dumps({
        "at_rest": at_rest,
        "overridden": overridden,
        "restored": ninja_settings.PAGINATION_PER_PAGE,
        "one_signal": setting_changed is __import__("django.core.signals").core.signals.setting_changed,
        "client_sees_templates": templates_rendered(),
    }))
    """
)
UNUSED_AT_REST = [
    "django.test",
    "django.test.client",
    "unittest.mock",
    "xml.dom.minidom",
    "http.server",
    "urllib.request",
    "starlette.routing",
    "starlette.applications",
    "promptmgr.scripted_model.server",
]


@functools.cache  # one interpreter per key, whichever tests read what it saw
def served_worker(*, anthropic_key: str) -> dict[str, object]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "promptmgr.settings", "ANTHROPIC_API_KEY": anthropic_key}
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM, *UNUSED_AT_REST],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answer: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def test_a_served_worker_imports_neither_the_test_package_nor_the_demo_models_routing() -> None:
    seen = served_worker(anthropic_key="sk-test-not-used")
    assert seen["at_rest"] == dict.fromkeys(UNUSED_AT_REST, False)


def test_the_test_package_imported_later_still_reaches_ninjas_settings_and_serves_a_client() -> None:
    seen = served_worker(anthropic_key="sk-test-not-used")
    assert seen["overridden"] == 7
    assert seen["restored"] == 100
    assert seen["one_signal"] is True
    assert seen["client_sees_templates"] == [200, ["registration/login.html"]]


def test_without_a_key_the_demo_model_is_loaded() -> None:
    seen = served_worker(anthropic_key="")
    at_rest = seen["at_rest"]
    assert isinstance(at_rest, dict)
    assert at_rest["promptmgr.scripted_model.server"] is True
    assert at_rest["django.test"] is False
