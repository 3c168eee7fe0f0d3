"""The exact text Claude reads back from ask_user."""

from __future__ import annotations

import pytest

from core.questions import Handoff
from mcp_server import answers
from mcp_server.answers import format_answer

pytestmark = pytest.mark.unit


def test_a_single_choice_reads_user_selected() -> None:
    assert format_answer(Handoff(answer="Option A", selectedLabels=["Option A"])) == "User selected: Option A"


def test_several_choices_are_joined_with_commas() -> None:
    assert format_answer(Handoff(selectedLabels=["A", "C"])) == "User selected: A, C"


def test_free_text_reads_user_answered() -> None:
    assert format_answer(Handoff(otherText="Use port 8080")) == "User answered: Use port 8080"


def test_free_text_given_only_as_the_display_answer_is_used() -> None:
    assert format_answer(Handoff(answer="Ship it on Friday")) == "User answered: Ship it on Friday"


def test_choices_and_other_text_are_both_reported() -> None:
    answer = Handoff(answer="A, also B", selectedLabels=["A"], otherText="but keep B's logging")
    assert format_answer(answer) == "User selected: A. User also wrote: but keep B's logging"


def test_notes_are_appended_on_their_own_line() -> None:
    answer = Handoff(selectedLabels=["Postgres"], notes="We already run it in staging.")
    assert format_answer(answer) == "User selected: Postgres\nNotes: We already run it in staging."


def test_blank_notes_and_blank_labels_are_ignored() -> None:
    answer = Handoff(selectedLabels=["  ", "B "], otherText="  ", notes="   ")
    assert format_answer(answer) == "User selected: B"


def test_an_answer_with_no_content_says_so() -> None:
    assert format_answer(Handoff()) == answers.EMPTY_ANSWER


def test_answer_is_parsed_from_the_poll_payload() -> None:
    payload = {
        "status": "answered",
        "answer": "A, C",
        "selectedOptions": [0, 2],
        "selectedLabels": ["A", "C"],
        "otherText": None,
        "notes": "quick",
    }
    assert Handoff.model_validate(payload) == Handoff(
        answer="A, C", selectedOptions=[0, 2], selectedLabels=["A", "C"], notes="quick"
    )


@pytest.mark.parametrize(
    "payload",
    [
        {"answer": 3},
        {"selectedLabels": "A"},
        {"selectedLabels": [1]},
        {"otherText": ["x"]},
        {"notes": 5},
    ],
)
def test_malformed_poll_payload_is_refused(payload: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Handoff.model_validate(payload)


def test_error_sentences_tell_claude_what_to_do() -> None:
    assert answers.timed_out(300) == (
        "User did not respond within 300 seconds. Proceed with your best judgment."
    )
    assert answers.CANCELLED == "The question was cancelled (the run is ending). Do not wait for an answer."
    assert answers.unreachable("connection refused") == (
        "Could not reach PromptManager to ask the user (connection refused). Proceed with your best judgment."
    )
    assert answers.not_configured("the config has no apiUrl") == (
        "ask_user is not configured: the config has no apiUrl"
    )


def test_approval_denials_name_the_call_and_say_not_to_retry_it_blindly() -> None:
    no_retry = (
        "Do not retry the same call unchanged: carry on without it if you can, or end your turn and "
        "tell the user what you wanted to do and why."
    )
    assert answers.approval_unreachable("Bash", "connection refused") == (
        "The Bash call was denied because PromptManager could not ask the user for permission "
        "(connection refused). " + no_retry
    )
    assert answers.approval_malformed("Write", "a deny without a message") == (
        "The Write call was denied because PromptManager sent an invalid permission decision "
        "(a deny without a message). " + no_retry
    )
    assert answers.approval_not_configured("Bash", "the config has no apiUrl") == (
        "The Bash call was denied because the approve tool is not configured (the config has no apiUrl). "
        + no_retry
    )
    assert answers.approval_rejected("Bash", "tool_use_id: Field required") == (
        "The Bash call was denied because PromptManager refused the permission request "
        "(tool_use_id: Field required). " + no_retry
    )
    assert answers.approval_timed_out("Edit", 300) == (
        "The Edit call was denied because no decision arrived within 300 seconds. " + no_retry
    )
    assert answers.approval_run_ended("Bash") == (
        "The Bash call was denied because the run has ended, so nobody can approve it. "
        "Do not retry it; end your turn."
    )


@pytest.mark.parametrize(
    ("question", "labels", "problem"),
    [
        ("   ", [], "an empty question"),
        ("Which?", ["A", " "], "an option whose label is empty"),
        ("Which?", ["A", "A "], "two options with the same label"),
        ("Which?", ["A", "B"], None),
        ("Anything else?", [], None),
    ],
)
def test_argument_problems_are_named(question: str, labels: list[str], problem: str | None) -> None:
    assert answers.argument_problem(question, labels) == problem
