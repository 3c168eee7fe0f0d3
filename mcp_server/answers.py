"""The text Claude reads back from ``ask_user``: answers and the error sentences.

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
