"""The text Claude reads back from ``ask_user`` and ``approve``: answers and the error sentences.

Pure functions and constants only, so the exact wording is unit-tested and shared by tests.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.questions import Handoff

SELECTED = "User selected: {labels}"
SELECTED_AND_WROTE = "User selected: {labels}. User also wrote: {text}"
ANSWERED = "User answered: {text}"
EMPTY_ANSWER = "User answered without any text."
NOTES_SUFFIX = "\nNotes: {notes}"

TIMED_OUT = "User did not respond within {seconds} seconds. Proceed with your best judgment."
CANCELLED = "The question was cancelled (the run is ending). Do not wait for an answer."
SUPERSEDED = (
    "This question was replaced by a newer question before the user answered; "
    "rely on the answer to the newer question."
)
RUN_ENDED = "The run has already ended, so the question was not shown. Do not wait for an answer."
UNREACHABLE = "Could not reach PromptManager to ask the user ({reason}). Proceed with your best judgment."
REJECTED = "PromptManager rejected the question ({detail}). Fix the arguments and call ask_user again."
INVALID_ARGUMENTS = "ask_user was called with {problem}. Fix the arguments and call ask_user again."
NOT_CONFIGURED = "ask_user is not configured: {reason}"

# The deny messages ``approve`` writes itself (the server's own decisions pass through untouched).
# The CLI hands the message to Claude as the denied tool's error.
APPROVAL_NO_BLIND_RETRY = (
    "Do not retry the same call unchanged: carry on without it if you can, or end your turn and "
    "tell the user what you wanted to do and why."
)
APPROVAL_UNREACHABLE = (
    "The {tool_name} call was denied because PromptManager could not ask the user for permission "
    "({reason}). " + APPROVAL_NO_BLIND_RETRY
)
APPROVAL_MALFORMED = (
    "The {tool_name} call was denied because PromptManager sent an invalid permission decision "
    "({problem}). " + APPROVAL_NO_BLIND_RETRY
)
APPROVAL_NOT_CONFIGURED = (
    "The {tool_name} call was denied because the approve tool is not configured ({reason}). "
    + APPROVAL_NO_BLIND_RETRY
)
APPROVAL_REJECTED = (
    "The {tool_name} call was denied because PromptManager refused the permission request "
    "({detail}). " + APPROVAL_NO_BLIND_RETRY
)
APPROVAL_TIMED_OUT = (
    "The {tool_name} call was denied because no decision arrived within {seconds} seconds. "
    + APPROVAL_NO_BLIND_RETRY
)
APPROVAL_RUN_ENDED = (
    "The {tool_name} call was denied because the run has ended, so nobody can approve it. "
    "Do not retry it; end your turn."
)


def format_answer(answer: Handoff) -> str:
    """The one line (plus optional notes) that tells Claude what the user chose."""
    labels = [label.strip() for label in answer.selectedLabels if label.strip()]
    other = (answer.otherText or "").strip()
    if labels and other:
        text = SELECTED_AND_WROTE.format(labels=", ".join(labels), text=other)
    elif labels:
        text = SELECTED.format(labels=", ".join(labels))
    elif other or answer.answer.strip():
        # Free-text questions may report the text either as otherText or only as the display answer.
        text = ANSWERED.format(text=other or answer.answer.strip())
    else:
        text = EMPTY_ANSWER
    notes = (answer.notes or "").strip()
    return text + NOTES_SUFFIX.format(notes=notes) if notes else text


def timed_out(seconds: int) -> str:
    return TIMED_OUT.format(seconds=seconds)


def unreachable(reason: str) -> str:
    return UNREACHABLE.format(reason=reason)


def rejected(detail: str) -> str:
    return REJECTED.format(detail=detail)


def invalid_arguments(problem: str) -> str:
    return INVALID_ARGUMENTS.format(problem=problem)


def not_configured(reason: str) -> str:
    return NOT_CONFIGURED.format(reason=reason)


def approval_unreachable(tool_name: str, reason: str) -> str:
    return APPROVAL_UNREACHABLE.format(tool_name=tool_name, reason=reason)


def approval_malformed(tool_name: str, problem: str) -> str:
    return APPROVAL_MALFORMED.format(tool_name=tool_name, problem=problem)


def approval_not_configured(tool_name: str, reason: str) -> str:
    return APPROVAL_NOT_CONFIGURED.format(tool_name=tool_name, reason=reason)


def approval_rejected(tool_name: str, detail: str) -> str:
    return APPROVAL_REJECTED.format(tool_name=tool_name, detail=detail)


def approval_timed_out(tool_name: str, seconds: int) -> str:
    return APPROVAL_TIMED_OUT.format(tool_name=tool_name, seconds=seconds)


def approval_run_ended(tool_name: str) -> str:
    return APPROVAL_RUN_ENDED.format(tool_name=tool_name)


def argument_problem(question: str, labels: Sequence[str]) -> str | None:
    """Why the arguments cannot make a question card, or None when they can."""
    if not question.strip():
        return "an empty question"
    if any(not label.strip() for label in labels):
        return "an option whose label is empty"
    stripped = [label.strip() for label in labels]
    if len(set(stripped)) != len(stripped):
        return "two options with the same label"
    return None
