"""Every API operation answers as its OpenAPI schema says: schemathesis against the served app.

The app runs under uvicorn on a real port with the real Redis, the scripted model and the
real CLI (a generated prompt really starts a run). Browser operations are called with a
real session and CSRF token, the relay operations with a real relay token of a live run.
Each operation gets positive cases (data the schema allows) and negative ones (data it
forbids); every response must pass all of schemathesis's checks.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import hypothesis
import hypothesis.errors
import pytest
import requests
import schemathesis
from hypothesis import strategies as st
from schemathesis.config._checks import (
    POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES,
    PositiveDataAcceptanceConfig,
)
from schemathesis.core.result import Ok
from schemathesis.generation import GenerationMode

from askuser import runtime
from core import events
from promptmgr import live
from promptmgr.event_history import persist_events
from promptmgr.models import RunStatus
from promptmgr.runner import WORKER_ID
from tests.helpers import make_project, make_run

pytestmark = pytest.mark.e2e

# Per operation and mode; enough to reach every branch of the small schemas, little
# enough that the whole run (a few real CLI runs among it) stays under a minute or two.
EXAMPLES = 25
# A run id no test creates: the events stream of an unknown run answers 404 at once.
UNKNOWN_RUN_ID = 987_654_321


def login_cookies(base_url: str, username: str, password: str) -> dict[str, str]:
    """The session and CSRF cookies of a real login."""
    session = requests.Session()
    session.trust_env = False
    session.get(f"{base_url}/accounts/login/")
    response = session.post(
        f"{base_url}/accounts/login/",
        data={
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": session.cookies["csrftoken"],
        },
        headers={"Referer": f"{base_url}/accounts/login/"},
        allow_redirects=False,
    )
    assert response.status_code == 302, response.text[:500]
    return {"sessionid": str(session.cookies["sessionid"]), "csrftoken": str(session.cookies["csrftoken"])}


def is_relay(path: str) -> bool:
    """The operations the MCP server calls with the run's relay token."""
    return "/relay-" in path or "/poll-" in path


def finished_run_with_events(project: Any, user: Any) -> int:
    """A completed run whose events (ending with ``done``) are in Redis and the database."""
    run = make_run(owner=user, project=project, status=RunStatus.COMPLETED)
    for event, data in [
        ("prompt", {"text": "p", "user": user.username, "conversation_id": run.conversation_id}),
        ("run_status", {"status": RunStatus.COMPLETED}),
        ("done", {"status": RunStatus.COMPLETED}),
    ]:
        events.append_event_sync(run.pk, event, data)
    persist_events(run.pk, events.read_all_events_sync(run.pk))
    return int(run.pk)


def live_run_token(project: Any, user: Any) -> tuple[int, str]:
    """A running run with a real relay token."""
    run = make_run(owner=user, project=project, status=RunStatus.RUNNING)

    async def open_relay() -> str:
        session = await runtime.relay_session_open(
            run_id=run.pk, project_id=project.pk, stream_token=str(run.stream_token), timeout=60
        )
        # Owned by the served worker (it runs in this process), so no sweep ends it.
        await live.set_owner(run.pk, WORKER_ID, ttl=3600)
        return str(json.loads(session.config_path.read_text())["relayToken"])

    return int(run.pk), asyncio.run(open_relay())


def is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return isinstance(value, str)


@dataclass(frozen=True)
class RealIds:
    project_id: int
    finished_run: int
    live_run: int
    question_id: str
    request_id: str

    def draw(self, data: st.DataObject, case: Any) -> None:
        """Point generated ids at things that exist, now and then, so the success paths
        are checked too (random integers and UUIDs almost never name a project, a run or a
        question)."""
        for values in (case.query, case.body):
            if not isinstance(values, dict):
                continue
            for name, real in (("question_id", self.question_id), ("request_id", self.request_id)):
                # Only a valid generated id: an invalid one is what a negative case tests.
                if is_uuid(values.get(name)):
                    values[name] = data.draw(st.sampled_from([real, values[name]]))
        params = case.path_parameters or {}
        if "project_id" in params:
            params["project_id"] = data.draw(st.sampled_from([self.project_id, params["project_id"]]))
        if "run_id" in params:
            if case.operation.path.endswith("/events"):
                # The stream of a run that is still going never ends by itself, and a
                # generated id may name one (the runs this test starts): only a finished
                # run or an unknown one, so every stream ends.
                params["run_id"] = data.draw(st.sampled_from([self.finished_run, UNKNOWN_RUN_ID]))
            else:
                choices = [self.finished_run, self.live_run, params["run_id"]]
                params["run_id"] = data.draw(st.sampled_from(choices))


def check_operation(
    operation: Any, mode: GenerationMode, auth: Any, ids: RealIds, statuses: Counter[int]
) -> None:
    """Generated cases of one operation, each sent and validated by every check."""

    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    )
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode, auth_storage=auth), data=st.data())
    def check(case: Any, data: st.DataObject) -> None:
        ids.draw(data, case)
        response = case.call_and_validate(timeout=30)
        statuses[response.status_code] += 1

    check()


def test_every_operation_answers_as_its_openapi_schema_says(
    app_server: Any, alice: Any, settings: Any
) -> None:
    # A long-poll that finds nothing answers 202 after this many seconds instead of 25.
    settings.ASK_USER_LONG_POLL_SECONDS = 1
    project = make_project(owner=alice)
    finished_run = finished_run_with_events(project, alice)
    live_run, relay_token = live_run_token(project, alice)

    cookies = login_cookies(app_server.url, "alice", "alice-password")

    schema = schemathesis.openapi.from_url(f"{app_server.url}/api/openapi.json")
    schema.config.generation.update(
        # The real session and relay token authenticate every call; generated stand-ins
        # for the session cookie and the bearer token would only ever test the 401 path.
        with_security_parameters=False,
        # The API refuses a NUL character in any text (422 nul_character, tested on its
        # own in test_bad_input.py): PostgreSQL cannot store one. JSON Schema cannot say so
        # for the free-form objects (a tool's input), so schema-valid data must not hold one.
        allow_x00=False,
        # Unknown query parameters are ignored, as HTTP APIs commonly do: adding one does not
        # make a request invalid, so it is no negative case.
        allow_extra_parameters=False,
    )
    # Schema-valid data may still break a rule JSON Schema cannot state: a project name the
    # owner already uses, an SDK project in bypassPermissions, a git URL of a scheme the
    # server does not clone (422, with the field at fault); or meet a state that forbids
    # it: a message to a run that has ended (410). Both are right answers.
    schema.config.checks.positive_data_acceptance = PositiveDataAcceptanceConfig(
        expected_statuses=[*POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES, "410", "422"]
    )

    @schema.auth()
    class Credentials:
        """A real browser session (cookie, CSRF header) or the run's real relay token.

        Set as schemathesis auth, so its ignored-auth check can also call each operation
        without them and see it refused.
        """

        def get(self, case: Any, context: Any) -> str:
            return relay_token if is_relay(case.operation.path) else cookies["sessionid"]

        def set(self, case: Any, data: str, context: Any) -> None:
            headers = dict(case.headers or {})
            if is_relay(case.operation.path):
                headers["Authorization"] = f"Bearer {relay_token}"
            else:
                case.cookies = {**(case.cookies or {}), **cookies}
                headers.update({"X-CSRFToken": cookies["csrftoken"], "Referer": f"{app_server.url}/"})
            case.headers = headers

    results = list(schema.get_all_operations())
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    assert len(operations) == len(results), [result for result in results if not isinstance(result, Ok)]
    assert len(operations) >= 17, [op.label for op in operations]

    # A question and a permission request of the live run, waiting for the browser.
    relayed = {"Authorization": f"Bearer {relay_token}"}
    question = requests.post(
        f"{app_server.url}/api/askuser/relay-question", json={"question": "Go on?"}, headers=relayed
    )
    permission = requests.post(
        f"{app_server.url}/api/askuser/relay-permission",
        json={"tool_name": "Bash", "input": {"command": "make"}, "tool_use_id": "toolu_schema"},
        headers=relayed,
    )
    assert question.status_code == permission.status_code == 201, (question.text, permission.text)
    ids = RealIds(
        project_id=project.pk,
        finished_run=finished_run,
        live_run=live_run,
        question_id=question.json()["question_id"],
        request_id=permission.json()["request_id"],
    )
    seen: dict[str, Counter[int]] = {}
    failures: dict[str, str] = {}
    for operation in operations:
        statuses = seen[operation.label] = Counter()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                check_operation(operation, mode, schema.auth, ids, statuses)
            except hypothesis.errors.Unsatisfiable:
                # Nothing to get wrong: an operation with no parameters and no body has no
                # negative cases (its positive ones ran).
                if mode != GenerationMode.NEGATIVE:
                    raise
            except (Exception, BaseExceptionGroup) as exc:  # every failing operation is reported
                failures[f"{operation.label} ({mode})"] = str(exc)[:3000]

    print("\n".join(f"{label}: {dict(sorted(counts.items()))}" for label, counts in seen.items()))
    assert not failures, "\n\n".join(f"{label}\n{text}" for label, text in failures.items())
