"""Validate a submitted answer against its question form and shape it for Claude.

Two request shapes are accepted:

* a single question (the MCP engine's form of one): ``{"answer": "free text",
  "selectedOptions": [0, 2], "notes": "..."}``;
* a form of 1–4 questions: ``{"answers": {"<question text>": "<label, labels or text>"
  | {"selected": [0], "other": "text"}}, "notes": "..."}``.

The display text per question is what Claude receives: a single choice is the label, a
multi-select is the labels joined with ", ", "Other" is the typed text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from core.questions import MAX_TEXT, AnswerIn, FormAnswer, ItemAnswer, QuestionSpec

MSG_REQUIRED = "An answer is required for “{question}”."
MSG_ONE_CHOICE = "“{question}” takes one choice: pick one option or type an answer, not both."
MSG_NO_OPTIONS = "“{question}” has no options; type an answer instead."
MSG_BAD_INDEX = "Option {index} does not exist for “{question}” (it has {count} options)."
MSG_DUPLICATE = "Option {index} was selected twice for “{question}”."
MSG_TOO_LONG = "Answers and notes are limited to {limit} characters."
MSG_MISSING = "Answer every question: “{question}” has no answer."
MSG_UNKNOWN = "“{question}” is not one of this card's questions."
MSG_SHAPE = "Send either answer/selectedOptions (one question) or answers (a form)."
MSG_SINGLE_ONLY = "This card has {count} questions: send answers keyed by question text."


class AnswerError(ValueError):
    pass


def _text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise AnswerError(MSG_SHAPE)
    text = value.strip()
    if len(text) > MAX_TEXT:
        raise AnswerError(MSG_TOO_LONG.format(limit=MAX_TEXT))
    return text


def _indices(value: Any) -> list[Any]:
    """The selected option indices as sent: absent means none, anything but a list is refused."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise AnswerError(MSG_SHAPE)
    return value


def _validate(spec: QuestionSpec, selected: list[Any], other: str) -> ItemAnswer:
    question = spec.question
    labels: list[str] = []
    indices: list[int] = []
    for index in selected:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(spec.options):
            if not spec.options:
                raise AnswerError(MSG_NO_OPTIONS.format(question=question))
            raise AnswerError(MSG_BAD_INDEX.format(index=index, question=question, count=len(spec.options)))
        if index in indices:
            raise AnswerError(MSG_DUPLICATE.format(index=index, question=question))
        indices.append(index)
        labels.append(spec.options[index].label)
    if labels and other == ", ".join(labels):
        other = ""  # a browser form may echo the chosen labels as the answer text
    if not indices and not other:
        raise AnswerError(MSG_REQUIRED.format(question=question))
    if spec.options and not spec.multiSelect and (len(indices) > 1 or (indices and other)):
        raise AnswerError(MSG_ONE_CHOICE.format(question=question))
    return ItemAnswer(question=question, selected=indices, labels=labels, other=other)


def _from_string(spec: QuestionSpec, value: str) -> tuple[list[int], str]:
    """A plain-string answer: option labels become selections, anything else is "Other"."""
    labels = spec.labels()
    if value in labels:
        return [labels.index(value)], ""
    if spec.multiSelect:
        parts = [p.strip() for p in value.split(",")]
        if parts and all(p in labels for p in parts):
            return [labels.index(p) for p in parts], ""
    return [], value


def _form_item(spec: QuestionSpec, value: Any) -> ItemAnswer:
    if isinstance(value, dict):
        return _validate(spec, _indices(value.get("selected")), _text(value.get("other")))
    selected, other = _from_string(spec, _text(value))
    return _validate(spec, selected, other)


def _parse(
    questions: Sequence[QuestionSpec | dict[str, Any]], body: AnswerIn | dict[str, Any]
) -> tuple[list[QuestionSpec], AnswerIn]:
    specs = [q if isinstance(q, QuestionSpec) else QuestionSpec.model_validate(q) for q in questions]
    if isinstance(body, AnswerIn):
        return specs, body
    try:
        return specs, AnswerIn.model_validate(body)
    except ValidationError:
        raise AnswerError(MSG_SHAPE) from None


def normalize_answers(
    questions: Sequence[QuestionSpec | dict[str, Any]], body: AnswerIn | dict[str, Any]
) -> FormAnswer:
    """The card's validated answer; AnswerError with a sentence for the user when it is not.

    Stored questions and request bodies may come as JSON; both are parsed into the shared
    models first.
    """
    questions, body = _parse(questions, body)
    notes = _text(body.notes)
    if body.answers is not None:
        # Both shapes at once would leave half of the request silently unused.
        if body.answer is not None or body.selectedOptions is not None:
            raise AnswerError(MSG_SHAPE)
        known = {spec.question for spec in questions}
        for key in body.answers:
            if key not in known:
                raise AnswerError(MSG_UNKNOWN.format(question=key))
        missing = next((spec.question for spec in questions if spec.question not in body.answers), None)
        if missing is not None:
            raise AnswerError(MSG_MISSING.format(question=missing))
        items = [_form_item(spec, body.answers[spec.question]) for spec in questions]
    else:
        if len(questions) != 1:
            raise AnswerError(MSG_SINGLE_ONLY.format(count=len(questions)))
        items = [_validate(questions[0], _indices(body.selectedOptions), _text(body.answer))]
    return FormAnswer(items=items, notes=notes)
