"""Relay tokens printed by a tool are hidden before a line becomes events."""

from __future__ import annotations

import secrets

from askuser.runtime import REDACTED, redact_tokens


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
