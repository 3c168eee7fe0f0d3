"""A server shutdown ends every run it owns: no process of the run is left, the run and
its open question are closed with a clear message, and the history is kept."""

from __future__ import annotations

from typing import Any

import pytest

from askuser.models import Question, QuestionStatus
from promptmgr.models import Run, RunEvent, RunStatus
from promptmgr.runner import MSG_SHUTDOWN
from tests.conftest import LiveServer
from tests.engines.support import ask_user_question, sdk_question
from tests.helpers import (
    ask,
    login_client,
    make_project,
    next_question,
    processes_in,
    run_workdir,
    script,
    start_run,
)

pytestmark = pytest.mark.e2e

QUESTIONS = {
    "cli": ask("Deploy now?", ["Yes", "No"]),
    "sdk": ask_user_question(sdk_question("Deploy now?", "Deploy", ["Yes", "No"])),
}


@pytest.mark.parametrize("engine", ["cli", "sdk"])
def test_a_shutdown_while_claude_waits_for_an_answer_reaps_the_run_and_closes_its_question(
    app_server: LiveServer, alice: Any, engine: str
) -> None:
    project = make_project(owner=alice, engine=engine)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script(QUESTIONS[engine]))
    question = next_question(client, started["events_url"])
    workspace = run_workdir(started["run_id"])
    assert processes_in(workspace), "Claude should be running, waiting for the answer"
    client.close()

    app_server.stop()

    assert processes_in(workspace) == []
    run = Run.objects.get(pk=started["run_id"])
    assert (run.status, run.error) == (RunStatus.CANCELLED, MSG_SHUTDOWN)
    assert run.ended_at is not None
    assert Question.objects.get(question_id=question.data["question_id"]).status == QuestionStatus.CANCELLED
    # What was shown stays showable after the restart, ending in the run's outcome.
    events = list(RunEvent.objects.filter(run=run).values_list("event", flat=True))
    assert "ask_user_question" in events
    assert events[-1] == "done"
    assert RunEvent.objects.get(run=run, event="done").data == {"status": "cancelled"}
