"""The live tokens' spellings, looked for all at once, find exactly what looking for each
token's spellings one by one found."""

from __future__ import annotations

import random
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from askuser import runtime

pytestmark = pytest.mark.unit


def one_by_one(text: str, needle: str) -> int:
    """The former search, per spelling: where ``text`` ends with the beginning of ``needle``."""
    position = text.find(needle[0], max(0, len(text) - len(needle) + 1))
    while position != -1:
        if needle.startswith(text[position:]):
            return position
        position = text.find(needle[0], position + 1)
    return len(text)


@pytest.fixture
def live_tokens(monkeypatch: Any) -> Iterator[list[runtime.EncodedToken]]:
    tokens = {
        run_id: runtime.EncodedToken.of(f"pmr_{run_id}_{secrets.token_urlsafe(32)}")
        for run_id in (3, 41, 977)
    }
    monkeypatch.setattr(runtime, "_encoded_tokens", tokens)
    yield list(tokens.values())


def test_the_held_back_end_of_a_delta_is_the_same_as_found_spelling_by_spelling(
    live_tokens: list[runtime.EncodedToken],
) -> None:
    rng = random.Random(7)
    spellings = [text for encoded in live_tokens for text in encoded.texts]
    texts = ["", "plain words, nothing held", "ends in 7", "ends in c", "wB7c"]
    for _ in range(3000):
        needle = rng.choice(spellings)
        cut = rng.randrange(0, len(needle) + 1)
        filler = "".join(rng.choice("abc7wBxyz 0123") for _ in range(rng.randrange(0, 30)))
        texts.append(filler + needle[:cut])
    for text in texts:
        expected = min([len(text), *(one_by_one(text, needle) for needle in spellings if text)])
        assert runtime._live_spellings().partial_start(text) == expected, text


def test_a_line_holding_a_wrapped_spelling_is_still_redacted(live_tokens: list[runtime.EncodedToken]) -> None:
    needle = live_tokens[1].needles[-1]
    wrapped = needle[:20] + b"\\n" + needle[20:]
    line = b'{"type":"user","content":"' + wrapped + b'"}'

    assert needle not in runtime.redact_tokens(line).replace(b"\\n", b"")
    assert runtime.redact_tokens(b'{"text":"nothing here"}') == b'{"text":"nothing here"}'


def test_the_spellings_follow_the_live_tokens(monkeypatch: Any) -> None:
    monkeypatch.setattr(runtime, "_encoded_tokens", {})
    assert runtime._live_spellings().heads == ()
    encoded = runtime.EncodedToken.of(f"pmr_5_{secrets.token_urlsafe(32)}")
    runtime._encoded_tokens[5] = encoded
    assert runtime._live_spellings().tokens == (encoded,)
    del runtime._encoded_tokens[5]
    assert runtime._live_spellings().tokens == ()
