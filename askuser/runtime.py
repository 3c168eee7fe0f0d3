"""Per-run ask-user secrets: the relay token and the MCP server's config file.

The relay token is the MCP server's only credential: 256 bits from ``secrets``, stored in
Redis only as a SHA-256 hash with a TTL (and, as that hash, in the memory of the process
that supervises the run, which checks its run's calls itself), revoked the moment the run
ends. It travels in the 0600 config file (inside a 0700 per-run directory, removed when
the run ends) and in an ``Authorization`` header — never in a URL, a log line or the
browser.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from . import live
from .warm_server import WarmHold, warm_server

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "pmr"
_TOKEN_RE = re.compile(r"^pmr_(\d{1,18})_([A-Za-z0-9_-]{43,})$")
# Anywhere in a line of output: a token a tool printed (cat $ASK_USER_CONFIG) is hidden.
_TOKEN_IN_TEXT_RE = re.compile(rb"pmr_\d{1,18}_[A-Za-z0-9_-]{43,}")
REDACTED = b"pmr_[redacted]"
_RUN_DIR_RE = re.compile(r"^run-(\d{1,18})-[0-9a-f]+$")


# The token hashes of the runs this process supervises. Their relay calls (a question, a
# tool call's card, a poll) are checked here without a Redis round trip: in the embedded
# default and on any worker that also serves requests, the MCP server's call lands in the
# process whose run it is (0.65 ms of a question's way to its card). This process drops a
# run's entry (``remove_secrets``) before it revokes the token in Redis, so the entry
# never outlives the token. Other runs' tokens are checked in Redis.
_own_token_hashes: dict[int, str] = {}


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class RelaySession:
    run_id: int
    directory: Path
    # The worker's warm ask-user server while this session holds it (warm_server).
    warm: WarmHold | None = None

    @property
    def warm_socket(self) -> str | None:
        return self.warm.socket_path if self.warm is not None else None

    @property
    def config_path(self) -> Path:
        return self.directory / "ask-user.json"


def _secrets_root() -> Path:
    root = Path(settings.RUN_SECRETS_DIR)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    return root


def _write_private(path: Path, content: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)


async def relay_session_open(
    *, run_id: int, project_id: int, stream_token: str, timeout: int
) -> RelaySession:
    """Mint the run's relay token and write the MCP server's config file."""
    # The run id rides in the token so the check is one lookup plus a constant-time compare.
    token = f"{TOKEN_PREFIX}_{run_id}_{secrets.token_urlsafe(32)}"
    directory = _secrets_root() / f"run-{run_id}-{secrets.token_hex(4)}"
    directory.mkdir(mode=0o700)
    session = RelaySession(run_id=run_id, directory=directory)
    config = {
        "apiUrl": settings.INTERNAL_BASE_URL,
        "streamToken": stream_token,
        "relayToken": token,
        "projectId": project_id,
        "runId": run_id,
        "timeout": timeout,
    }
    _write_private(session.config_path, json.dumps(config))
    ttl = settings.RUN_MAX_DURATION + live.RELAY_TOKEN_TTL_GRACE
    token_hash = hash_token(token)
    await live.relay_token_store(run_id, token_hash, ttl=ttl)
    _own_token_hashes[run_id] = token_hash
    _encoded_tokens[run_id] = EncodedToken.of(token)
    session.warm = warm_server().acquire()
    return session


async def relay_session_close(session: RelaySession) -> None:
    """Kill the token and remove the secrets directory; safe to call twice."""
    remove_secrets(session)
    await live.relay_token_revoke(session.run_id)


def remove_secrets(session: RelaySession) -> None:
    _own_token_hashes.pop(session.run_id, None)
    shutil.rmtree(session.directory, ignore_errors=True)
    _encoded_tokens.pop(session.run_id, None)
    if session.warm is not None:
        hold, session.warm = session.warm, None
        warm_server().release(hold)


class RunEnded(Exception):
    """The token was genuine, but its run has finished."""


async def relay_token_run_id(token: str) -> int | None:
    """The run a presented relay token belongs to; None when it is not a valid token.

    Raises RunEnded for the genuine token of a finished run.
    """
    match = _TOKEN_RE.match(token or "")
    if match is None or len(token) > 200:
        return None
    run_id = int(match.group(1))
    presented = hash_token(token)
    own = _own_token_hashes.get(run_id)
    if own is not None:  # a live run of this process: its token is this one or none
        return run_id if hmac.compare_digest(own, presented) else None
    stored = await live.relay_token_hash(run_id)
    if stored is None:
        return None
    ended = stored.startswith(live.ENDED_MARK)
    # Constant-time: the comparison time says nothing about how much of the token matched.
    if not hmac.compare_digest(stored.removeprefix(live.ENDED_MARK), presented):
        return None
    if ended:
        raise RunEnded(run_id)
    return run_id


# Characters a tool's output may put inside an encoded token: a line break (raw or escaped
# in a JSON string, as ``base64`` wraps at 76 columns) or the spaces of a hex dump.
_BREAK = rb"(?:\\[nr]|[\r\n \t])*"
_BREAK_BYTES = b" \t\r\n"


@dataclass(frozen=True)
class EncodedToken:
    """The hex and base64 spellings of one live relay token, found even when wrapped.

    Base64 depends on where the token starts in the encoded data (its offset modulo 3):
    for each offset, the characters made of the token's bits alone are the same whatever
    surrounds it, so those are looked for.
    """

    needles: tuple[bytes, ...]
    texts: tuple[str, ...]  # the same, as text (streamed deltas are text)
    pattern: re.Pattern[bytes]

    @classmethod
    def of(cls, token: str) -> EncodedToken:
        raw = token.encode()
        needles = {raw.hex().encode(), raw.hex().upper().encode()}
        for shift in range(3):
            first = -(-shift * 8 // 6)  # the first character with no bit of what precedes
            end = (shift + len(raw)) * 8 // 6  # past the last one with no bit of what follows
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                needles.add(encode(b"\0" * shift + raw)[first:end])
        ordered = tuple(sorted(needles, key=len, reverse=True))
        spelled = [_BREAK.join(re.escape(bytes([c])) for c in needle) for needle in ordered]
        return cls(
            needles=ordered, texts=tuple(n.decode() for n in ordered), pattern=re.compile(b"|".join(spelled))
        )

    def redact(self, data: bytes) -> bytes:
        # The cheap test first, in C: the line without its breaks holds a spelling or not.
        squeezed = _squeeze(data)
        if not any(needle in squeezed for needle in self.needles):
            return data
        return self.pattern.sub(REDACTED, data)


def _squeeze(data: bytes) -> bytes:
    """``data`` without the breaks a spelling may be wrapped with."""
    return data.translate(None, _BREAK_BYTES).replace(b"\\n", b"").replace(b"\\r", b"")


# Encodings of the relay tokens of this process's live runs (the runs whose output it reads).
_encoded_tokens: dict[int, EncodedToken] = {}
PREFIX_BYTES = 4  # of each spelling, in the test every line of output passes


@dataclass(frozen=True)
class _Spellings:
    """The spellings of all live tokens at once, so that a line or a delta is looked at
    once, not once per live run: with 60 runs, each of their lines was squeezed and
    searched 60 times, and each delta's end compared with 300 spellings (bench/scale.py).
    """

    tokens: tuple[EncodedToken, ...]  # what it was made of
    heads: tuple[bytes, ...]  # the distinct first PREFIX_BYTES of every spelling
    any_head: re.Pattern[bytes] | None  # finds any of them in one scan
    head_at: re.Pattern[str] | None  # matches (empty) where a head starts, overlapping ones too
    head_starts: frozenset[str]  # the beginnings of the heads, shorter than a head
    texts: tuple[str, ...]  # every spelling, sorted
    longest: int

    @classmethod
    def of(cls, tokens: tuple[EncodedToken, ...]) -> _Spellings:
        texts = sorted({text for encoded in tokens for text in encoded.texts})
        heads = tuple(sorted({needle[:PREFIX_BYTES] for encoded in tokens for needle in encoded.needles}))
        any_head = re.compile(b"|".join(re.escape(head) for head in heads)) if heads else None
        head_texts = [head.decode() for head in heads]
        head_at = (
            re.compile("(?=" + "|".join(re.escape(head) for head in head_texts) + ")") if heads else None
        )
        head_starts = frozenset(head[:size] for head in head_texts for size in range(1, len(head)))
        longest = max((len(text) for text in texts), default=0)
        return cls(tokens, heads, any_head, head_at, head_starts, tuple(texts), longest)

    def partial_start(self, text: str) -> int:
        """Where ``text`` ends with the beginning (not the whole) of a spelling, the
        earliest such place; len(text) when it does not."""
        end = len(text)
        if self.head_at is None:
            return end
        # A tail as long as a head begins with one (every spelling does), so only where a
        # head starts (one scan in C) and in the last few characters, which may begin one,
        # can a spelling's beginning start: looking at every character of the window that
        # begins some spelling took about twice as long with 60 live runs (5-8 µs a delta here).
        window = max(0, end - self.longest + 1)
        places = [found.start() for found in self.head_at.finditer(text, window)]
        places += (
            start
            for start in range(max(window, end - PREFIX_BYTES + 1), end)
            if text[start:] in self.head_starts
        )
        for start in places:  # in order: a head found ends before the last few characters
            if self._begun_by(text[start:]):
                return start
        return end

    def _begun_by(self, tail: str) -> bool:
        """Some spelling starts with ``tail`` and is longer."""
        # The spellings that start with ``tail`` follow each other in sorted order.
        index = bisect.bisect_left(self.texts, tail)
        while index < len(self.texts) and self.texts[index].startswith(tail):
            if len(self.texts[index]) > len(tail):
                return True
            index += 1
        return False


_spellings = _Spellings.of(())


def _live_spellings() -> _Spellings:
    """The spellings of the live tokens, made again only when those have changed."""
    global _spellings
    tokens = tuple(_encoded_tokens.values())
    if tokens != _spellings.tokens:
        _spellings = _Spellings.of(tokens)
    return _spellings


def redact_tokens(data: bytes) -> bytes:
    """``data`` with every relay token replaced, so none reaches the browser or the database:
    any token by its shape, and the live runs' tokens in hex and base64 too."""
    if b"pmr_" in data:  # the token as such: one scan in the usual case
        data = _TOKEN_IN_TEXT_RE.sub(REDACTED, data)
    any_head = _live_spellings().any_head
    # No spelling can be in a line that holds none of their beginnings (the usual case).
    if any_head is not None and any_head.search(_squeeze(data)) is not None:
        for encoded in list(_encoded_tokens.values()):
            data = encoded.redact(data)
    return data


_TOKEN_IN_STR_RE = re.compile(_TOKEN_IN_TEXT_RE.pattern.decode())
# The end of a text that may be the start of a token the next delta completes.
_TOKEN_START_RE = re.compile(r"(?:p|pm|pmr|pmr_\d{0,18}|pmr_\d{1,18}_[A-Za-z0-9_-]*)\Z")
MAX_HELD_CHARS = 256


class DeltaRedactor:
    """Redacts relay tokens from streamed text, which may split a token across deltas.

    Each line is redacted on its own (``redact_tokens``), but a model that quotes a token
    streams it in pieces no single line holds whole. The tail of each block's text that
    could still become a token is held back until the next delta decides it; ``flush``
    releases what is held (redacted) before any other event of the run.
    """

    def __init__(self) -> None:
        self._held: dict[tuple[object, object], str] = {}

    def feed(self, block: tuple[object, object], text: str) -> str:
        """The part of ``text`` (after what was held for ``block``) that is safe to show now."""
        text = _redact_text(self._held.pop(block, "") + text)
        starts = [len(text)]
        if (found := _TOKEN_START_RE.search(text)) is not None:
            starts.append(found.start())
        # The start of a live token's hex or base64 spelling that the next delta may complete.
        starts.append(_live_spellings().partial_start(text))
        start = min(starts)
        if start == len(text) or len(text) - start > MAX_HELD_CHARS:
            return text
        self._held[block] = text[start:]
        return text[:start]

    def flush(self) -> list[tuple[tuple[object, object], str]]:
        held, self._held = self._held, {}
        return [(block, _redact_text(text)) for block, text in held.items()]


def _redact_text(text: str) -> str:
    return redact_tokens(text.encode()).decode("utf-8", "replace")


def sweep_stale_secrets() -> int:
    """Remove per-run secret directories of runs that no longer run (a crashed worker's).

    Decided by the run's status, not the directory's age: a run may last up to
    ``RUN_MAX_DURATION``, and another worker's live run must keep its config.
    """
    from promptmgr.models import Run

    root = Path(settings.RUN_SECRETS_DIR)
    if not root.exists():
        return 0
    entries = {entry: _RUN_DIR_RE.match(entry.name) for entry in root.iterdir() if entry.is_dir()}
    run_ids = {int(match[1]) for match in entries.values() if match}
    active = set(Run.objects.active().filter(pk__in=run_ids).values_list("pk", flat=True))
    removed = 0
    for entry, match in entries.items():
        if match and int(match[1]) not in active:
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    if removed:
        logger.info("swept %d stale run secret directories", removed)
    return removed
