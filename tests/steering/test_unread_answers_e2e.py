"""An answer given in time whose turn ended before Claude read it is not lost.

The person answers a card while the run is ending (its CLI died, or the run was
cancelled) and before the waiting tool took the answer: the answer is accepted, since the
card is still open, and the turn never reads it. When the run ends, the answer goes on as
the conversation's next prompt, as a late answer does, or, after a cancel, the card says
Claude never read it. The real CLI asks through the real MCP server; the test holds the
run's end (its end snapshot) until the answer is in.
"""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from askuser import live
from askuser.models import LateDelivery, Question, QuestionStatus
from core.redis import get_redis
from promptmgr.models import Run
from promptmgr.processes import ManagedProcess
from tests.conftest import LiveServer
from tests.engines.support import ask_user_question, mcp_ask_user, sdk_question
from tests.helpers import (
    QUOTE,
    HeldEnd,
    SSEEvent,
    kill_the_cli,
    login_client,
    make_project,
    next_question,
    read_sse,
    script,
    start_run,
    submit_answer,
    wait_until,
)

pytestmark = pytest.mark.e2e

UNREAD_TEXT = "Answer to your question “{question}” (your turn ended before you read it): {answer}"


def of(events: list[SSEEvent], name: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.event == name]


def relay_polls_waiting() -> int:
    """Relay long-polls the app server (in this process) holds blocked in Redis."""
    return sum(len(held.blocked) for held in list(live._held.values()))


def asked(client: httpx.Client, project: Any) -> tuple[dict[str, Any], str]:
    """A run whose Claude asks one question (the project's engine's way); the run and the
    question's id once its card shows."""
    spec = sdk_question("Which colour?", "Colour", ["Red", "Blue"])
    steps = (mcp_ask_user(spec) if project.engine == "cli" else ask_user_question(spec), QUOTE)
    started = start_run(client, project.pk, script(*steps))
    return started, next_question(client, started["events_url"]).data["question_id"]


def test_an_answer_the_dead_turn_never_read_is_the_conversations_next_prompt(
    app_server: LiveServer, alice: Any, monkeypatch: pytest.MonkeyPatch, scripted_model_url: str
) -> None:
    end = HeldEnd(monkeypatch)
    project = make_project(owner=alice, ask_user_timeout=120)
    client = login_client(app_server, "alice", "alice-password")
    started, question_id = asked(client, project)

    kill_the_cli(started["run_id"])
    end.wait()
    # The card is still open: the answer is taken, and nothing waits for it any more.
    response = submit_answer(client, question_id, answer="", selectedOptions=[1])
    assert response.status_code == 200, response.text
    end.release.set()

    events = read_sse(client, started["events_url"])
    assert events[-1].data == {"status": "failed"}
    [delivered] = of(events, "user_message_delivered")
    assert (delivered["delivery"], delivered["question_id"], delivered["kind"]) == (
        "next_prompt",
        question_id,
        "late_answer",
    )
    assert delivered["run_id"] != started["run_id"]
    following = read_sse(client, delivered["events_url"], until=lambda e: e.event == "ask_user_question")
    [prompt] = of(following, "prompt")
    unread_text = UNREAD_TEXT.format(question="Which colour?", answer="Blue")
    assert prompt["text"] == unread_text
    assert prompt["conversation_id"] == started["conversation_id"]
    # Claude read it: the model was sent it, and (the offline model asks on a prompt that
    # mentions a question) the next turn goes on as usual.
    requests = httpx.get(f"{scripted_model_url}/_scripted/requests").json()
    assert any(unread_text in str(request["messages"]) for request in requests)
    again = submit_answer(client, following[-1].data["question_id"], answer="Keep it simple")
    assert again.status_code == 200, again.text
    assert read_sse(client, delivered["events_url"])[-1].data == {"status": "completed"}
    question = Question.objects.get(question_id=question_id)
    assert (question.status, question.late_delivery, question.late_run_id, question.answered_by) == (
        QuestionStatus.LATE,
        LateDelivery.NEXT_PROMPT,
        delivered["run_id"],
        alice,
    )


def test_an_answer_a_cancelled_turn_never_read_is_reported_on_its_card(
    app_server: LiveServer, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    end = HeldEnd(monkeypatch)
    project = make_project(owner=alice, ask_user_timeout=120)
    client = login_client(app_server, "alice", "alice-password")
    started, question_id = asked(client, project)

    assert client.post(f"/api/runs/{started['run_id']}/cancel").status_code == 202
    end.wait()
    response = submit_answer(client, question_id, answer="Red")
    assert response.status_code == 200, response.text
    end.release.set()

    events = read_sse(client, started["events_url"])
    assert events[-1].data == {"status": "cancelled"}
    assert of(events, "user_message_delivered") == []
    [undelivered] = of(events, "user_message_undelivered")
    assert undelivered["question_id"] == question_id
    assert undelivered["detail"] == "The run was cancelled before Claude read this answer."
    # Nothing started after a cancel, and the answer stays where it was given.
    assert list(Run.objects.filter(conversation__project=project).values_list("pk", flat=True)) == [
        started["run_id"]
    ]
    assert Question.objects.get(question_id=question_id).status == QuestionStatus.LATE


@pytest.mark.parametrize("slow", ["end", "exit"])
def test_an_answer_a_poll_still_open_after_its_turn_ended_would_take_is_reported_on_its_card(
    app_server: LiveServer, alice: Any, monkeypatch: pytest.MonkeyPatch, slow: str
) -> None:
    """A relay long-poll can outlive its turn: the ended turn's MCP server is killed, but
    the server notices its connection is gone only a moment later (under load, after the
    person's answer came). Here the test holds such a poll open itself, with the run's
    relay token, so it surely still waits when the person answers. It must not take the
    answer, which nobody would then read. The turn ends slowly either way: its run's end
    is held (``end``), or its CLI gets the cancel's signal only after the answer, as a CLI
    slow to exit would (``exit``): the turn stops reading answers at the cancel."""
    held = HeldEnd(monkeypatch) if slow == "end" else HeldSignal(monkeypatch)
    project = make_project(owner=alice, ask_user_timeout=120)
    client = login_client(app_server, "alice", "alice-password")
    started, question_id = asked(client, project)
    with ThreadPoolExecutor(1) as pool:
        poll = relay_poll_waiting(app_server, pool, started["run_id"], question_id)

        assert client.post(f"/api/runs/{started['run_id']}/cancel").status_code == 202
        held.wait()
        wait_until(
            lambda: relay_token_ended(started["run_id"]), timeout=10, what="the turn to stop reading answers"
        )
        response = submit_answer(client, question_id, answer="Red")
        assert response.status_code == 200, response.text
        polled = poll.result(timeout=30)
    held.release.set()

    assert (polled.status_code, polled.json().get("code")) == (410, "run_finished"), polled.text
    events = read_sse(client, started["events_url"])
    assert events[-1].data == {"status": "cancelled"}
    [undelivered] = of(events, "user_message_undelivered")
    assert undelivered["question_id"] == question_id
    assert Question.objects.get(question_id=question_id).status == QuestionStatus.LATE


def test_the_sdk_engine_closes_the_card_of_a_dead_turn_before_anyone_can_answer_it(
    app_server: LiveServer, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK engine waits for the answer inside the run, and that wait ends with the turn,
    cancelling the question: the person is told at once, so no answer is taken unread."""
    end = HeldEnd(monkeypatch)
    project = make_project(owner=alice, ask_user_timeout=120, engine="sdk")
    client = login_client(app_server, "alice", "alice-password")
    started, question_id = asked(client, project)

    kill_the_cli(started["run_id"])
    end.wait()
    response = submit_answer(client, question_id, answer="Red")
    end.release.set()

    assert response.status_code == 410, response.text
    assert response.json()["code"] == "cancelled"
    events = read_sse(client, started["events_url"])
    assert events[-1].data == {"status": "failed"}
    assert of(events, "user_message_delivered") == of(events, "user_message_undelivered") == []
    assert Question.objects.get(question_id=question_id).status == QuestionStatus.CANCELLED


class HeldSignal:
    """A cancel reaches the run's turn, but its CLI gets the stop signal only once the test
    lets it go (``release``): the CLI runs on meanwhile, as a slow exit would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()
        self._later: set[asyncio.Task[None]] = set()
        terminate = ManagedProcess.terminate

        def held(process: ManagedProcess) -> None:
            self.reached.set()

            async def later() -> None:
                for _ in range(600):
                    if self.release.is_set():
                        break
                    await asyncio.sleep(0.05)
                terminate(process)

            task = asyncio.get_running_loop().create_task(later())
            self._later.add(task)
            task.add_done_callback(self._later.discard)

        monkeypatch.setattr(ManagedProcess, "terminate", held)

    def wait(self) -> None:
        assert self.reached.wait(30), "the cancel never reached the CLI's turn"


def relay_poll_waiting(
    app_server: LiveServer, pool: ThreadPoolExecutor, run_id: int, question_id: str
) -> Future[httpx.Response]:
    """A poll-answer of the test's own with the run's relay token, blocked in Redis beside
    the MCP server's."""
    [config] = list(Path(settings.RUN_SECRETS_DIR).glob(f"run-{run_id}-*/ask-user.json"))
    token = json.loads(config.read_text())["relayToken"]
    poll = pool.submit(
        httpx.get,
        f"{app_server.url}/api/askuser/poll-answer",
        params={"question_id": question_id},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    wait_until(lambda: relay_polls_waiting() >= 2, timeout=10, what="the test's poll to wait")
    return poll


def relay_token_ended(run_id: int) -> bool:
    token: Any = get_redis().get(live.relay_token_key(run_id))
    return token is not None and str(token).startswith(live.ENDED_MARK)
