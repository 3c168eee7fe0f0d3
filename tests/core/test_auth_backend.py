"""core.auth: the signed-in user loads as Django's ModelBackend loads it, by SQL compiled once.

Against the test database (SQLite, and PostgreSQL in ``make test-postgres``): the same user
for a known id, nobody for an unknown or inactive one, a sign-in that stores this backend,
Django's own session check still signing out a session whose password changed, and the
migration that moves sessions signed in through Django's backend to this one and back.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, SESSION_KEY
from django.contrib.auth.backends import ModelBackend as DjangoModelBackend
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from core.auth import BACKEND, DJANGO_BACKEND, ModelBackend

pytestmark = pytest.mark.unit

migration = importlib.import_module("core.migrations.0002_sessions_use_core_auth_backend")
PAGE = "/projects/"  # a page for signed-in people only


def test_the_app_signs_in_through_this_backend() -> None:
    assert settings.AUTHENTICATION_BACKENDS == [BACKEND]


def test_it_loads_the_user_django_loads_in_one_query(alice: Any) -> None:
    theirs = DjangoModelBackend().get_user(alice.pk)

    with CaptureQueriesContext(connection) as queries:
        ours = ModelBackend().get_user(alice.pk)

    assert len(queries.captured_queries) == 1
    assert ours == theirs == alice
    fields = [field.attname for field in type(alice)._meta.concrete_fields]
    assert [getattr(ours, name) for name in fields] == [getattr(theirs, name) for name in fields]
    # The session's id is a string; the key is converted as Django's get(pk=...) converts it.
    assert ModelBackend().get_user(str(alice.pk)) == alice


def test_nobody_for_an_unknown_or_inactive_user(alice: Any) -> None:
    assert ModelBackend().get_user(alice.pk + 1000) is None
    alice.is_active = False
    alice.save()
    assert ModelBackend().get_user(alice.pk) is None
    assert DjangoModelBackend().get_user(alice.pk) is None


def test_a_sign_in_stores_this_backend_and_keeps_the_person_signed_in(alice: Any) -> None:
    client = Client()
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-password"})
    assert response.status_code == 302

    assert client.session[BACKEND_SESSION_KEY] == BACKEND
    assert client.get(PAGE).status_code == 200


def test_a_password_change_still_signs_the_session_out(alice: Any) -> None:
    client = Client()
    client.force_login(alice)
    assert client.get(PAGE).status_code == 200

    alice.set_password("a-new-password")
    alice.save()

    response = client.get(PAGE)
    assert response.status_code == 302
    assert response["Location"].startswith(settings.LOGIN_URL)


def signed_in_session(user: Any, backend: str) -> str:
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = backend
    store["_auth_user_hash"] = user.get_session_auth_hash()
    store.create()
    assert store.session_key is not None
    return store.session_key


def test_the_migration_keeps_sessions_of_djangos_backend_signed_in(alice: Any) -> None:
    key = signed_in_session(alice, DJANGO_BACKEND)
    client = Client()
    client.cookies[settings.SESSION_COOKIE_NAME] = key
    # Django's backend is no longer configured: that session alone would not sign in.
    assert client.get(PAGE).status_code == 302

    migration.forwards(apps, None)

    assert SessionStore(key)[BACKEND_SESSION_KEY] == BACKEND
    assert SessionStore(key)[SESSION_KEY] == str(alice.pk)
    assert client.get(PAGE).status_code == 200


def test_the_migration_reversed_gives_the_sessions_back_to_djangos_backend(alice: Any, bob: Any) -> None:
    ours = signed_in_session(alice, BACKEND)
    other = signed_in_session(bob, "some.other.Backend")

    migration.backwards(apps, None)

    assert SessionStore(ours)[BACKEND_SESSION_KEY] == DJANGO_BACKEND
    assert SessionStore(other)[BACKEND_SESSION_KEY] == "some.other.Backend"
