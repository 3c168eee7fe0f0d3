"""core.sessions: a session loads as Django's own store loads it, by one plain SELECT.

Against the test database (SQLite, and PostgreSQL in ``make test-postgres``): the data a
sign-in saved, nothing for an expired or unknown key, and the key dropped then, as
Django's ``db.SessionStore`` does.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.sessions.backends.db import SessionStore as DjangoSessionStore
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.sessions import SessionStore

pytestmark = pytest.mark.unit


def saved(**data: Any) -> str:
    store = SessionStore()
    store.update(data)
    store.create()
    assert store.session_key is not None
    return store.session_key


def test_the_app_uses_this_store() -> None:
    assert settings.SESSION_ENGINE == "core.sessions"


def test_a_saved_session_loads_its_data_in_one_query(db: Any) -> None:
    key = saved(colour="blue", count=3)

    with CaptureQueriesContext(connection) as queries:
        store = SessionStore(key)
        data = dict(store.items())

    assert data == {"colour": "blue", "count": 3}
    assert len(queries.captured_queries) == 1
    assert store.session_key == key


def test_it_reads_what_djangos_own_store_wrote_and_the_other_way_round(db: Any) -> None:
    theirs = DjangoSessionStore()
    theirs["who"] = "django"
    theirs.create()
    ours_key = saved(who="us")

    assert SessionStore(theirs.session_key)["who"] == "django"
    assert DjangoSessionStore(ours_key)["who"] == "us"


def test_an_expired_session_loads_empty_and_drops_its_key(db: Any) -> None:
    key = saved(colour="blue")
    Session.objects.filter(session_key=key).update(expire_date=timezone.now() - timedelta(seconds=1))

    store = SessionStore(key)

    assert dict(store.items()) == {}
    assert store.session_key is None


def test_an_unknown_key_loads_empty(db: Any) -> None:
    store = SessionStore("x" * 32)

    assert dict(store.items()) == {}
    assert store.session_key is None


@pytest.mark.asyncio
async def test_the_async_load_gives_the_same_data(transactional_db: Any) -> None:
    from asgiref.sync import sync_to_async

    key = await sync_to_async(saved)(colour="green")

    assert await SessionStore(key).aget("colour") == "green"


def test_a_signed_in_browser_stays_signed_in_and_a_signed_out_one_does_not(db: Any, alice: Any) -> None:
    client = Client()
    client.force_login(alice)
    signed_in = client.get("/")
    assert signed_in.wsgi_request.user == alice

    client.logout()
    signed_out = client.get("/")
    assert not signed_out.wsgi_request.user.is_authenticated
