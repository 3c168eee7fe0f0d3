"""The text Claude reads back from ``ask_user``: answers and the error sentences.

Pure functions and constants only, so the exact wording is unit-tested and shared by tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class Answer:
    """What the user submitted, as the relay's poll-answer endpoint reports it."""

    text: str = ""
    selected_labels: tuple[str, ...] = ()
    other_text: str | None = None
    notes: str | None = None

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Answer:
        """Build from the JSON body of an answered poll; raises ValueError when it is malformed."""
        text = payload.get("answer") or ""
        labels = payload.get("selectedLabels") or []
        other = payload.get("otherText")
        notes = payload.get("notes")
        if not isinstance(text, str) or not isinstance(labels, list):
            raise ValueError("answer must be a string and selectedLabels a list")
        if not all(isinstance(label, str) for label in labels):
            raise ValueError("selectedLabels must hold strings")
        if not isinstance(other, str | None) or not isinstance(notes, str | None):
            raise ValueError("otherText and notes must be strings or null")
        return cls(text=text, selected_labels=tuple(labels), other_text=other, notes=notes)


def format_answer(answer: Answer) -> str:
    """The one line (plus optional notes) that tells Claude what the user chose."""
    labels = [label.strip() for label in answer.selected_labels if label.strip()]
    other = (answer.other_text or "").strip()
    if labels and other:
        text = SELECTED_AND_WROTE.format(labels=", ".join(labels), text=other)
    elif labels:
        text = SELECTED.format(labels=", ".join(labels))
    elif other or answer.text.strip():
        # Free-text questions may report the text either as otherText or only as the display answer.
        text = ANSWERED.format(text=other or answer.text.strip())
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
