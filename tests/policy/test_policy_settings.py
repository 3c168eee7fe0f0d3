"""A project's answer-policy settings through ``/api/projects``: read, changed, and refused when
the delay would let questions expire before the policy answers."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from promptmgr.services.projects import POLICY_DELAY_TOO_LONG
from tests.helpers import make_project

pytestmark = [pytest.mark.django_db, pytest.mark.unit]

JSON = "application/json"


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_policy_settings_are_read_and_changed_by_members(alice: Any, bob: Any) -> None:
    project = make_project(owner=alice, members=(bob,))
    client = signed_in(bob)
    assert client.get(f"/api/projects/{project.pk}").json()["answer_policy"] == "off"

    response = client.patch(
        f"/api/projects/{project.pk}",
        {
            "answer_policy": "auto",
            "answer_policy_delay": 0,
            "answer_policy_instructions": "We use Postgres.",
            "answer_policy_permissions": True,
        },
        content_type=JSON,
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["answer_policy"], body["answer_policy_delay"], body["answer_policy_permissions"]) == (
        "auto",
        0,
        True,
    )
    project.refresh_from_db()
    assert project.answer_policy_instructions == "We use Postgres."


def test_an_auto_delay_as_long_as_the_timeout_is_refused(alice: Any) -> None:
    project = make_project(owner=alice, ask_user_timeout=60)
    client = signed_in(alice)
    response = client.patch(
        f"/api/projects/{project.pk}",
        {"answer_policy": "auto", "answer_policy_delay": 60},
        content_type=JSON,
    )
    assert response.status_code == 422
    assert [e["msg"] for e in response.json()["errors"]] == [POLICY_DELAY_TOO_LONG.format(timeout=60)]
    unknown = client.patch(f"/api/projects/{project.pk}", {"answer_policy": "sometimes"}, content_type=JSON)
    assert unknown.status_code == 422


def test_a_stranger_gets_404(alice: Any, bob: Any) -> None:
    project = make_project(owner=alice)
    response = signed_in(bob).patch(
        f"/api/projects/{project.pk}", {"answer_policy": "auto"}, content_type=JSON
    )
    assert response.status_code == 404
