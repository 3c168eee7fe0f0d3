"""Relay tokens printed by a tool are hidden before a line becomes events."""

from __future__ import annotations

import secrets

import pytest

from askuser.runtime import REDACTED, DeltaRedactor, redact_tokens

pytestmark = pytest.mark.unit


def test_every_relay_token_in_a_line_is_replaced() -> None:
    token = f"pmr_42_{secrets.token_urlsafe(32)}"
    other = f"pmr_7_{secrets.token_urlsafe(32)}"
    line = f'{{"content": "relayToken: {token}\\n{other}"}}'.encode()

    redacted = redact_tokens(line)

    assert token.encode() not in redacted and other.encode() not in redacted
    assert redacted.count(REDACTED) == 2


def test_lines_without_a_token_are_returned_as_they_are() -> None:
    line = b'{"content": "pmr_ is just a prefix, pmr_1_short too"}'
    assert redact_tokens(line) == line


def stream(redactor: DeltaRedactor, pieces: list[str]) -> str:
    """What a browser would show: every released piece, then what was held at the end."""
    shown = [redactor.feed((0, None), piece) for piece in pieces]
    shown += [text for _block, text in redactor.flush()]
    return "".join(shown)


def test_a_token_split_across_deltas_at_any_point_is_never_shown() -> None:
    token = f"pmr_42_{secrets.token_urlsafe(32)}"
    text = f'{{"relayToken": "{token}", "runId": 42}}'
    for cut in range(1, len(text)):
        for second_cut in (cut + 1, cut + 7, len(text)):
            pieces = [text[:cut], text[cut:second_cut], text[second_cut:]]
            shown = stream(DeltaRedactor(), pieces)
            assert token not in shown, (cut, second_cut)
            assert shown == text.replace(token, REDACTED.decode())


def test_ordinary_text_comes_through_whole_and_in_order() -> None:
    pieces = ["Let me help", " with the pm", "r_ notes: pmr_", "7 is not a token. Stop"]
    assert stream(DeltaRedactor(), pieces) == "".join(pieces)


def test_blocks_are_held_apart() -> None:
    redactor = DeltaRedactor()
    assert redactor.feed((0, None), "first p") == "first "
    assert redactor.feed((1, None), "second") == "second"
    assert redactor.flush() == [((0, None), "p")]
