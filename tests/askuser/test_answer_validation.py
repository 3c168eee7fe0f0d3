"""normalize_answers: what a submitted answer may look like, and what Claude then receives."""

from __future__ import annotations

from typing import Any

import pytest

from askuser.answers import (
    MSG_BAD_INDEX,
    MSG_DUPLICATE,
    MSG_MISSING,
    MSG_NO_OPTIONS,
    MSG_ONE_CHOICE,
    MSG_REQUIRED,
    MSG_SHAPE,
    MSG_SINGLE_ONLY,
    MSG_TOO_LONG,
    MSG_UNKNOWN,
    AnswerError,
    normalize_answers,
)
from core.questions import MAX_TEXT

pytestmark = pytest.mark.unit

DATABASE = "Which database?"
CHECKS = "Which checks?"
NAME = "What should the module be called?"


def make_question(question: str, labels: list[str] | None = None, *, multi: bool = False) -> dict[str, Any]:
    options = [{"label": label, "description": f"about {label}"} for label in labels or []]
    return {"question": question, "header": "", "options": options, "multiSelect": multi}


SINGLE = make_question(DATABASE, ["SQLite", "PostgreSQL"])
MULTI = make_question(CHECKS, ["Lint", "Types", "Tests"], multi=True)
FREE = make_question(NAME)


def rejected(questions: list[dict[str, Any]], body: dict[str, Any]) -> str:
    with pytest.raises(AnswerError) as raised:
        normalize_answers(questions, body)
    return str(raised.value)


# --- What Claude receives ------------------------------------------------------------------


def test_a_single_choice_becomes_its_label() -> None:
    form = normalize_answers([SINGLE], {"selectedOptions": [1]})

    assert form.display == {DATABASE: "PostgreSQL"}
    assert form.selections() == [[1]]
    assert form.handoff().answer == "PostgreSQL"
    assert form.handoff().selectedLabels == ["PostgreSQL"]


def test_the_label_echoed_as_answer_text_is_not_taken_for_an_other_answer() -> None:
    form = normalize_answers([SINGLE], {"selectedOptions": [0], "answer": "SQLite"})

    assert form.display == {DATABASE: "SQLite"}
    assert form.items[0].other == ""


def test_a_multi_select_answer_joins_its_labels_with_a_comma() -> None:
    form = normalize_answers([MULTI], {"selectedOptions": [0, 2]})

    assert form.display == {CHECKS: "Lint, Tests"}
    assert form.selections() == [[0, 2]]


def test_an_other_answer_is_the_typed_text() -> None:
    form = normalize_answers([SINGLE], {"answer": "  DuckDB  "})

    assert form.display == {DATABASE: "DuckDB"}
    assert form.items[0].other == "DuckDB"
    assert form.handoff().otherText == "DuckDB"
    assert form.selections() == [[]]


def test_a_free_text_question_takes_the_typed_answer() -> None:
    form = normalize_answers([FREE], {"answer": "billing_core"})

    assert form.display == {NAME: "billing_core"}


def test_a_two_question_form_is_answered_by_question_text() -> None:
    form = normalize_answers(
        [SINGLE, MULTI],
        {"answers": {DATABASE: "PostgreSQL", CHECKS: {"selected": [0, 2], "other": ""}}},
    )

    assert form.display == {DATABASE: "PostgreSQL", CHECKS: "Lint, Tests"}
    assert form.selections() == [[1], [0, 2]]
    assert form.handoff().answers == form.display


def test_labels_sent_as_a_string_to_a_multi_select_question_become_selections() -> None:
    form = normalize_answers([MULTI], {"answers": {CHECKS: "Lint, Types"}})

    assert form.selections() == [[0, 1]]
    assert form.display == {CHECKS: "Lint, Types"}


def test_notes_go_along_trimmed() -> None:
    form = normalize_answers([SINGLE], {"selectedOptions": [0], "notes": "  keep it small \n"})

    assert form.notes == "keep it small"
    assert form.handoff().notes == "keep it small"


def test_no_notes_hand_off_as_none() -> None:
    assert normalize_answers([SINGLE], {"selectedOptions": [0]}).handoff().notes is None


# --- What is refused ---------------------------------------------------------------------


def test_an_empty_answer_is_rejected() -> None:
    assert rejected([SINGLE], {"answer": "   ", "selectedOptions": []}) == MSG_REQUIRED.format(
        question=DATABASE
    )


def test_a_second_selection_on_a_single_choice_question_is_rejected() -> None:
    assert rejected([SINGLE], {"selectedOptions": [0, 1]}) == MSG_ONE_CHOICE.format(question=DATABASE)


def test_an_option_and_other_text_on_a_single_choice_question_are_rejected() -> None:
    assert rejected([SINGLE], {"selectedOptions": [0], "answer": "DuckDB"}) == MSG_ONE_CHOICE.format(
        question=DATABASE
    )


def test_selecting_an_option_of_a_free_text_question_is_rejected() -> None:
    assert rejected([FREE], {"selectedOptions": [0], "answer": "x"}) == MSG_NO_OPTIONS.format(question=NAME)


@pytest.mark.parametrize("index", [2, -1, "0", 1.0, True])
def test_an_option_that_does_not_exist_is_rejected(index: Any) -> None:
    assert rejected([SINGLE], {"selectedOptions": [index]}) == MSG_BAD_INDEX.format(
        index=index, question=DATABASE, count=2
    )


def test_the_same_option_selected_twice_is_rejected() -> None:
    assert rejected([MULTI], {"selectedOptions": [2, 2]}) == MSG_DUPLICATE.format(index=2, question=CHECKS)


def test_the_same_label_sent_twice_as_a_string_is_rejected() -> None:
    assert rejected([MULTI], {"answers": {CHECKS: "Lint, Lint"}}) == MSG_DUPLICATE.format(
        index=0, question=CHECKS
    )


@pytest.mark.parametrize(
    "body",
    [
        {"answer": "x" * (MAX_TEXT + 1)},
        {"selectedOptions": [0], "notes": "x" * (MAX_TEXT + 1)},
        {"answers": {DATABASE: {"selected": [], "other": "x" * (MAX_TEXT + 1)}}},
    ],
)
def test_answers_and_notes_past_the_limit_are_rejected(body: dict[str, Any]) -> None:
    assert rejected([SINGLE], body) == MSG_TOO_LONG.format(limit=MAX_TEXT)


def test_text_at_the_limit_is_accepted() -> None:
    assert normalize_answers([SINGLE], {"answer": "x" * MAX_TEXT}).display[DATABASE] == "x" * MAX_TEXT


def test_a_form_with_an_unanswered_question_is_rejected() -> None:
    assert rejected([SINGLE, MULTI], {"answers": {DATABASE: "SQLite"}}) == MSG_MISSING.format(question=CHECKS)


def test_an_answer_to_a_question_not_on_the_card_is_rejected() -> None:
    body = {"answers": {DATABASE: "SQLite", "Something else?": "Yes"}}

    assert rejected([SINGLE], body) == MSG_UNKNOWN.format(question="Something else?")


def test_a_single_answer_to_a_form_of_several_questions_is_rejected() -> None:
    assert rejected([SINGLE, MULTI], {"selectedOptions": [0]}) == MSG_SINGLE_ONLY.format(count=2)


@pytest.mark.parametrize(
    "body",
    [
        {"answers": ["SQLite"]},
        {"answers": {DATABASE: ["SQLite"]}},
        {"answers": {DATABASE: {"selected": 0}}},
        {"answers": {DATABASE: {"selected": [0], "other": 5}}},
        {"selectedOptions": 0},
        {"selectedOptions": "0"},
        {"answer": 5},
        {"selectedOptions": [0], "notes": ["a note"]},
    ],
    ids=[
        "answers-not-an-object",
        "answer-a-list",
        "selected-not-a-list",
        "other-not-text",
        "selectedOptions-zero",
        "selectedOptions-text",
        "answer-not-text",
        "notes-not-text",
    ],
)
def test_a_request_of_the_wrong_shape_is_rejected(body: dict[str, Any]) -> None:
    assert rejected([SINGLE], body) == MSG_SHAPE


@pytest.mark.parametrize(
    "extra", [{"answer": "DuckDB"}, {"selectedOptions": [1]}], ids=["answer", "selectedOptions"]
)
def test_both_request_shapes_at_once_are_rejected(extra: dict[str, Any]) -> None:
    assert rejected([SINGLE], {"answers": {DATABASE: "SQLite"}, **extra}) == MSG_SHAPE
