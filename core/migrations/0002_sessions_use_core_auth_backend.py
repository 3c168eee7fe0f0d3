"""Stored sessions signed in through Django's ModelBackend now name ``core.auth.ModelBackend``
(``AUTHENTICATION_BACKENDS``), so the switch signs nobody out; reversed, they name Django's again.

Only the backend's path changes in each session's data; its user, hash and expiry stay.
"""

from typing import Any

from django.db import migrations

# As they are written at this migration (core.auth's BACKEND and DJANGO_BACKEND).
DJANGO_BACKEND = "django.contrib.auth.backends.ModelBackend"
BACKEND = "core.auth.ModelBackend"


def _rename_backend(apps: Any, old: str, new: str) -> None:
    from django.contrib.auth import BACKEND_SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore
    from django.utils import timezone

    Session = apps.get_model("sessions", "Session")
    store = SessionStore()  # only its encode/decode (the engine's signing salt)
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator():
        data = store.decode(session.session_data)
        if data.get(BACKEND_SESSION_KEY) == old:
            data[BACKEND_SESSION_KEY] = new
            session.session_data = store.encode(data)
            session.save(update_fields=["session_data"])


def forwards(apps: Any, schema_editor: Any) -> None:
    _rename_backend(apps, DJANGO_BACKEND, BACKEND)


def backwards(apps: Any, schema_editor: Any) -> None:
    _rename_backend(apps, BACKEND, DJANGO_BACKEND)


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_initial"),
        ("sessions", "0001_initial"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
