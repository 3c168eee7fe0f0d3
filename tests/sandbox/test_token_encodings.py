"""A relay token is hidden from the stream in every spelling a tool could print it in:
as such, in hex (either case) and in base64 (standard or URL-safe, at any offset,
wrapped as ``base64`` wraps it), inside a stream-json line."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from askuser import runtime

pytestmark = pytest.mark.unit

TOKEN = "pmr_42_" + "k3Jq-_Zx" * 5 + "abc"
CONFIG = json.dumps({"relayToken": TOKEN, "projectId": 7}).encode()


@pytest.fixture
def live_token() -> Iterator[None]:
    runtime._encoded_tokens[42] = runtime.EncodedToken.of(TOKEN)
    yield
    runtime._encoded_tokens.pop(42, None)


def line_with(printed: bytes) -> bytes:
    """A tool result as the CLI prints it: the output inside a JSON string."""
    return json.dumps({"type": "user", "tool_use_result": {"stdout": printed.decode()}}).encode()


def wrapped_base64(data: bytes) -> bytes:
    return subprocess.run(["base64"], input=data, capture_output=True, check=True).stdout


SPELLINGS = {
    "plain": CONFIG,
    "hex": CONFIG.hex().encode(),
    "HEX": CONFIG.hex().upper().encode(),
    "base64": base64.b64encode(CONFIG),
    "base64 at offset 1": base64.b64encode(b"x" + CONFIG),
    "base64 at offset 2": base64.b64encode(b"xy" + CONFIG),
    "url-safe base64": base64.urlsafe_b64encode(b"?" + CONFIG),
    "base64 wrapped at 76 columns": wrapped_base64(CONFIG * 3),
    "hex with spaces": b" ".join(CONFIG.hex().encode()[i : i + 4] for i in range(0, len(CONFIG) * 2, 4)),
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_a_live_runs_token_is_redacted_in_every_spelling(live_token: None, spelling: str) -> None:
    line = line_with(SPELLINGS[spelling])
    redacted = runtime.redact_tokens(line)
    assert runtime.REDACTED in redacted
    for encoded in runtime._encoded_tokens[42].needles:
        assert encoded not in redacted.replace(b"\\n", b"").replace(b" ", b"")
    assert TOKEN.encode() not in redacted
    json.loads(redacted)  # still one valid stream-json line


def test_other_text_is_left_alone(live_token: None) -> None:
    line = line_with(base64.b64encode(b"an ordinary file, nothing secret in it" * 4))
    assert runtime.redact_tokens(line) == line


def test_an_ended_runs_encodings_are_no_longer_looked_for(tmp_path: Path) -> None:
    session = runtime.RelaySession(run_id=43, directory=tmp_path / "run-43-aa")
    runtime._encoded_tokens[43] = runtime.EncodedToken.of(TOKEN)
    runtime.remove_secrets(session)
    assert 43 not in runtime._encoded_tokens
    line = line_with(CONFIG.hex().encode())
    assert runtime.redact_tokens(line) == line


def test_a_spelling_streamed_in_pieces_is_held_back_and_redacted(live_token: None) -> None:
    spelled = base64.b64encode(CONFIG).decode()
    text = f"Here it is: {spelled} - done."
    redactor = runtime.DeltaRedactor()
    shown = [redactor.feed((0, None), text[i : i + 7]) for i in range(0, len(text), 7)]
    shown += [text for _block, text in redactor.flush()]
    joined = "".join(shown)
    assert joined.startswith("Here it is: ") and joined.endswith(" - done.")
    assert "pmr_[redacted]" in joined
    assert [n for n in runtime._encoded_tokens[42].texts if n in joined] == []
