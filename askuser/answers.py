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

from dataclasses import dataclass, field
from typing import Any

MAX_TEXT = 10_000

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


@dataclass(frozen=True)
class QuestionAnswer:
    question: str
    selected: list[int]
    labels: list[str]
    other: str

    @property
    def display(self) -> str:
        return ", ".join([*self.labels, *([self.other] if self.other else [])])


@dataclass(frozen=True)
class FormAnswer:
    items: list[QuestionAnswer]
    notes: str = ""
    display: dict[str, str] = field(default_factory=dict)

    def selections(self) -> list[list[int]]:
        return [item.selected for item in self.items]

    def handoff(self) -> dict[str, Any]:
        """What the waiting engine receives (poll-answer's 200 body, the SDK callback)."""
        first = self.items[0]
        return {
            "answer": first.display,
            "selectedOptions": first.selected,
            "selectedLabels": first.labels,
            "otherText": first.other or None,
            "notes": self.notes or None,
            "answers": self.display,
        }


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


def _validate(spec: dict[str, Any], selected: list[Any], other: str) -> QuestionAnswer:
    question = str(spec.get("question", ""))
    options = spec.get("options") or []
    labels: list[str] = []
    indices: list[int] = []
    for index in selected:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(options):
            if not options:
                raise AnswerError(MSG_NO_OPTIONS.format(question=question))
            raise AnswerError(MSG_BAD_INDEX.format(index=index, question=question, count=len(options)))
        if index in indices:
            raise AnswerError(MSG_DUPLICATE.format(index=index, question=question))
        indices.append(index)
        labels.append(str(options[index].get("label", "")))
    if labels and other == ", ".join(labels):
        other = ""  # the spec's browser form echoes the chosen labels as the answer text
    if not indices and not other:
        raise AnswerError(MSG_REQUIRED.format(question=question))
    if options and not spec.get("multiSelect") and (len(indices) > 1 or (indices and other)):
        raise AnswerError(MSG_ONE_CHOICE.format(question=question))
    return QuestionAnswer(question=question, selected=indices, labels=labels, other=other)


def _from_string(spec: dict[str, Any], value: str) -> tuple[list[int], str]:
    """A plain-string answer: option labels become selections, anything else is "Other"."""
    labels = [str(o.get("label", "")) for o in spec.get("options") or []]
    if value in labels:
        return [labels.index(value)], ""
    if spec.get("multiSelect"):
        parts = [p.strip() for p in value.split(",")]
        if parts and all(p in labels for p in parts):
            return [labels.index(p) for p in parts], ""
    return [], value


def normalize_answers(questions: list[dict[str, Any]], body: dict[str, Any]) -> FormAnswer:
    notes = _text(body.get("notes"))
    answers = body.get("answers")
    if answers is not None:
        # Both shapes at once would leave half of the request silently unused.
        mixed = body.get("answer") is not None or body.get("selectedOptions") is not None
        if mixed or not isinstance(answers, dict):
            raise AnswerError(MSG_SHAPE)
        known = {str(q.get("question", "")) for q in questions}
        for key in answers:
            if key not in known:
                raise AnswerError(MSG_UNKNOWN.format(question=key))
        items = []
        for spec in questions:
            text = str(spec.get("question", ""))
            if text not in answers:
                raise AnswerError(MSG_MISSING.format(question=text))
            value = answers[text]
            if isinstance(value, dict):
                selected = _indices(value.get("selected"))
                items.append(_validate(spec, selected, _text(value.get("other"))))
            else:
                selected, other = _from_string(spec, _text(value))
                items.append(_validate(spec, selected, other))
    else:
        if len(questions) != 1:
            raise AnswerError(MSG_SINGLE_ONLY.format(count=len(questions)))
        selected = _indices(body.get("selectedOptions"))
        items = [_validate(questions[0], selected, _text(body.get("answer")))]
    return FormAnswer(items=items, notes=notes, display={i.question: i.display for i in items})
