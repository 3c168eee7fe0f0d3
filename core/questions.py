"""The one shape of a question and of its answer, from the MCP server's relay to the card and back.

Every side speaks these models: the MCP server posts a ``QuestionSpec`` to relay-question,
the SDK engine turns AskUserQuestion's input into ``QuestionSpec``s (``questions_from_tool_input``),
the store keeps them and pushes a ``Card`` to the browser, the browser answers with an
``AnswerIn`` (either of its two shapes), the store validates it into a ``FormAnswer``, and the
waiting side receives its ``Handoff`` (poll-answer's 200 body, the SDK callback's input), which
``mcp_server.answers.format_answer`` turns into the text Claude reads.

Pure pydantic with no Django import, so the MCP server process can use it too. Wire names
(``multiSelect``, ``selectedOptions``…) are those the ask_user tool's schema gives Claude, so
they stay camelCase.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MAX_QUESTIONS = 4
MAX_OPTIONS = 20
MAX_TEXT = 10_000

MSG_BAD_QUESTIONS = (
    "AskUserQuestion needs 1 to 4 questions, each with its question text. Fix the input and call it again."
)

# What a card asks for. Tool approvals add "permission" cards to the same store.
CardKind = Literal["question", "permission"]
CardSource = Literal["mcp", "sdk"]


def _none_as_empty(value: Any) -> Any:
    return "" if value is None else value


# A field that takes null for its empty value says so in the API's schema too: its
# validator names the input type, constraints and all.
DescriptionText = Annotated[str, Field(max_length=2000)]
HeaderText = Annotated[str, Field(max_length=60)]


class Option(BaseModel):
    model_config = ConfigDict(extra="ignore")

    label: str = Field(min_length=1, max_length=200)
    description: DescriptionText = ""

    _empty_description = field_validator(
        "description", mode="before", json_schema_input_type=DescriptionText | None
    )(_none_as_empty)


OptionList = Annotated[list[Option], Field(max_length=MAX_OPTIONS)]


class QuestionSpec(BaseModel):
    """One question of a card. Texts are kept verbatim: the CLI looks answers up by question text."""

    model_config = ConfigDict(extra="ignore")

    question: str = Field(min_length=1, max_length=5000)
    header: HeaderText = ""
    options: OptionList = Field(default_factory=list)
    multiSelect: bool = False  # noqa: N815 (the wire name)

    _empty_header = field_validator("header", mode="before", json_schema_input_type=HeaderText | None)(
        _none_as_empty
    )

    @field_validator("options", mode="before", json_schema_input_type=OptionList | None)
    @classmethod
    def _no_options(cls, value: Any) -> Any:
        return [] if value is None else value

    @field_validator("multiSelect", mode="before", json_schema_input_type=bool | None)
    @classmethod
    def _false_when_null(cls, value: Any) -> Any:
        return False if value is None else value

    @field_validator("question")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the question text is empty")
        return value

    def labels(self) -> list[str]:
        return [option.label for option in self.options]

    def wire(self) -> dict[str, Any]:
        """The JSON stored and shown on the card; multi-select only where there is a choice."""
        return {**self.model_dump(), "multiSelect": self.multiSelect and bool(self.options)}


def questions_from_tool_input(tool_input: dict[str, Any]) -> list[QuestionSpec]:
    """AskUserQuestion's input as the card's questions; ValueError(MSG_BAD_QUESTIONS) when unusable."""
    raw = tool_input.get("questions")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_QUESTIONS:
        raise ValueError(MSG_BAD_QUESTIONS)
    try:
        return [QuestionSpec.model_validate(item) for item in raw]
    except ValidationError:
        raise ValueError(MSG_BAD_QUESTIONS) from None


class Card(BaseModel):
    """The ``ask_user_question`` event's data: one card of 1–4 questions, for either engine."""

    question_id: str
    kind: CardKind = "question"
    source: CardSource
    expires_at: datetime
    timeout: int
    questions: list[dict[str, Any]]

    def wire(self) -> dict[str, Any]:
        return {**self.model_dump(), "expires_at": self.expires_at.isoformat()}


class ItemAnswer(BaseModel):
    """The validated answer to one question: chosen option indices and labels, and typed text."""

    question: str
    selected: list[int] = Field(default_factory=list)
    labels: list[str] = Field(default_factory=list)
    other: str = ""

    @property
    def display(self) -> str:
        """What Claude reads for this question: the labels, then the typed text, comma-joined."""
        return ", ".join([*self.labels, *([self.other] if self.other else [])])


class Handoff(BaseModel):
    """What the waiting engine receives: poll-answer's 200 body, the SDK callback's input.

    The first question's answer is spread out (the MCP tool asks one question per card);
    ``answers`` holds every question's display text.
    """

    model_config = ConfigDict(extra="ignore")

    answer: str = ""
    selectedOptions: list[int] = Field(default_factory=list)  # noqa: N815
    selectedLabels: list[str] = Field(default_factory=list)  # noqa: N815
    otherText: str | None = None  # noqa: N815
    notes: str | None = None
    answers: dict[str, str] = Field(default_factory=dict)

    @field_validator("answer", mode="before")
    @classmethod
    def _answer_text(cls, value: Any) -> Any:
        return _none_as_empty(value)

    @field_validator("selectedOptions", "selectedLabels", "answers", mode="before")
    @classmethod
    def _empty_collections(cls, value: Any, info: Any) -> Any:
        if value is None:
            return {} if info.field_name == "answers" else []
        return value


class FormAnswer(BaseModel):
    """A whole card's validated answer: one ``ItemAnswer`` per question, in order, and notes."""

    items: list[ItemAnswer]
    notes: str = ""

    @property
    def display(self) -> dict[str, str]:
        return {item.question: item.display for item in self.items}

    def selections(self) -> list[list[int]]:
        return [item.selected for item in self.items]

    def handoff(self) -> Handoff:
        first = self.items[0]
        return Handoff(
            answer=first.display,
            selectedOptions=first.selected,
            selectedLabels=first.labels,
            otherText=first.other or None,
            notes=self.notes or None,
            answers=self.display,
        )


class AnswerIn(BaseModel):
    """A submitted answer, in either accepted shape (``askuser.answers`` validates it).

    - one question (the MCP card): ``{"answer": "text", "selectedOptions": [0, 2], "notes"}``;
    - a form of 1–4 questions: ``{"answers": {"<question text>": "<label, labels or text>"
      | {"selected": [0], "other": "text"}}, "notes"}``.
    """

    # Lengths (MAX_TEXT) and option indices are checked against the question, with
    # sentences a person can act on, so the fields here only fix the types.
    answer: str | None = None
    selectedOptions: list[Any] | None = Field(None, max_length=50)  # noqa: N815
    answers: dict[str, Any] | None = None
    notes: str | None = None
