"""The pure parts of the SDK engine's ``can_use_tool``: question shape, answers, refusals."""

from __future__ import annotations

from typing import Any

import pytest

from askuser.approvals import answered_input
from core.questions import MSG_BAD_QUESTIONS, Handoff, questions_from_tool_input
from promptmgr.engines.permissions import refusal

pytestmark = pytest.mark.unit

AUTH = {
    "question": "Which auth method?",
    "header": "Auth",
    "options": [{"label": "OAuth", "description": "o"}, {"label": "API key", "description": "k"}],
    "multiSelect": False,
}


def test_questions_keep_their_text_verbatim_and_get_defaults() -> None:
    raw = {"questions": [AUTH, {"question": "  Anything else? ", "options": [{"label": "No"}]}]}
    assert [q.wire() for q in questions_from_tool_input(raw)] == [
        AUTH,
        {
            "question": "  Anything else? ",
            "header": "",
            "options": [{"label": "No", "description": ""}],
            "multiSelect": False,
        },
    ]


@pytest.mark.parametrize(
    "tool_input",
    [
        {},
        {"questions": []},
        {"questions": [AUTH] * 5},
        {"questions": [{"header": "x"}]},
        {"questions": ["?"]},
    ],
    ids=["missing", "none", "five", "no-text", "not-an-object"],
)
def test_unusable_questions_are_refused_with_a_sentence(tool_input: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="1 to 4 questions") as caught:
        questions_from_tool_input(tool_input)
    assert str(caught.value) == MSG_BAD_QUESTIONS


def test_answers_join_the_input_and_notes_become_an_annotation() -> None:
    tool_input = {"questions": [AUTH]}
    answer = Handoff(answers={"Which auth method?": "OAuth"}, notes="rotate keys")
    assert answered_input(tool_input, answer) == {
        "questions": [AUTH],
        "answers": {"Which auth method?": "OAuth"},
        "annotations": {"Which auth method?": {"notes": "rotate keys"}},
    }
    assert "annotations" not in (
        answered_input(tool_input, Handoff(answers={"Which auth method?": "OAuth"})) or {}
    )


def test_a_hand_off_without_answers_is_never_allowed() -> None:
    assert answered_input({"questions": [AUTH]}, Handoff(answers={})) is None
    assert answered_input({"questions": [AUTH]}, Handoff(answers={"Which auth method?": ""})) is None


@pytest.mark.parametrize(
    ("tool", "tool_input", "mode", "message"),
    [
        (
            "Write",
            {"file_path": "/w/a.txt"},
            "default",
            "Claude requested permissions to write to /w/a.txt, but you haven't granted it yet.",
        ),
        ("Edit", {"file_path": "/w/a.txt"}, "plan", "Cannot write to /w/a.txt while in plan mode."),
        (
            "NotebookEdit",
            {"notebook_path": "/w/n.ipynb"},
            "default",
            "Claude requested permissions to write to /w/n.ipynb, but you haven't granted it yet.",
        ),
        (
            "Bash",
            {"command": "touch x"},
            "default",
            "Claude requested permissions to use Bash, but you haven't granted it yet.",
        ),
        (
            "ExitPlanMode",
            {},
            "plan",
            "Claude requested permissions to use ExitPlanMode, but you haven't granted it yet.",
        ),
    ],
)
def test_other_tools_are_refused_in_the_cli_engines_words(
    tool: str, tool_input: dict[str, Any], mode: str, message: str
) -> None:
    assert refusal(tool, tool_input, permission_mode=mode) == message
