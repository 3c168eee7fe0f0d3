"""What the run supervisor needs from a turn, whichever engine runs it.

An engine starts a turn from a ``TurnRequest`` (``cli.start_turn``, ``sdk.start_turn``)
and hands the supervisor (``runner``) a ``Turn``: the stream-json messages the CLI prints,
parsed, with what is not stream-json kept as ``Garbage`` so the supervisor can report it.
The supervisor's read loop, limits, cancel, outcome and clean-up are the same for both.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from askuser import facade as askuser
from core.redis import decode_json
from promptmgr.models import Project
from promptmgr.processes import Line, LineTimeout

from .inbox import Delivery

if TYPE_CHECKING:
    from promptmgr.sandbox import Confinement


@dataclass(frozen=True, slots=True)
class Message:
    """One stream-json message and the line it was printed as (relay tokens redacted),
    which an error shows when the message turns out not to be shaped like stream-json."""

    data: dict[str, Any]
    line: bytes


@dataclass(frozen=True, slots=True)
class Garbage:
    """A line that is no JSON object, or the head of a line cut for its length."""

    data: bytes
    truncated: bool = False


Item = Message | Garbage


def read_line(line: Line) -> Item:
    """A line the CLI printed on stdout, as the supervisor's item.

    Relay tokens are redacted before the line is parsed, so none can reach the stream.
    """
    if line.truncated:
        return Garbage(line.data, truncated=True)
    raw = askuser.redact_tokens(line.data)
    try:
        data = decode_json(raw)
    except ValueError:  # not JSON, or not UTF-8
        return Garbage(raw)
    return Message(data, raw) if isinstance(data, dict) else Garbage(raw)


@dataclass(frozen=True)
class TurnRequest:
    """What an engine needs to start one run's turn."""

    run_id: int
    project: Project
    root: Path  # the conversation's workspace, the CLI's working directory
    prompt: str
    resume_session_id: str  # Claude's session to resume, or ""
    stream_token: str
    # The prompt's uuid on the CLI's stream-json input (``engines.inbox``).
    prompt_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    # What must be done before Claude gets the prompt or any command of the run starts, under
    # way while the run's sandbox starts (the run's start snapshot,
    # ``services.changes.record_start``): the CLI engine spawns the CLI meanwhile
    # (``Confinement.open``), the SDK engine awaits it before its spawn. A future, since
    # more than one step may await it.
    before_prompt: asyncio.Future[None] | None = None


class Turn(Protocol):
    """One running turn, as the supervisor reads and ends it."""

    @property
    def ask_user(self) -> bool:
        """Whether Claude can ask the user in this turn (the supervisor then looks for cards)."""

    @property
    def errors(self) -> Sequence[str]:
        """What went wrong in the engine itself, for the run's error; complete once stopped."""

    async def next_item(self, timeout: float) -> Item | None | LineTimeout:
        """The next item, None at the end of output, or ``TIMEOUT`` after ``timeout`` seconds.

        Asking says that every item handed out before has been handled: its events are
        in the run's stream (the SDK engine shows a question's card only after them).
        """

    def ready_item(self) -> Item | None | LineTimeout:
        """An item that is already waiting, None at the end of output, else ``TIMEOUT``."""

    def terminate(self) -> None:
        """Ask the turn's whole process tree to exit, killing it after a grace period;
        the output then ends."""

    async def stop(self) -> int:
        """End the turn, reap what is left of it, and return the CLI's exit code.

        Called when the output ends and again when the run finishes: the second call
        returns the same code."""

    def stderr_tail(self, limit: int = 4000) -> str:
        """The end of what the CLI printed on stderr."""

    async def send_message(self, text: str, message_id: str) -> bool:
        """Write a user message into the running turn (``engines.inbox``); False once the
        turn takes no more input (it is over, or ending)."""

    def take_deliveries(self) -> list[Delivery]:
        """The messages the CLI took in since the last call, and how."""

    def unstarted_messages(self) -> list[str]:
        """Ids of messages written that the CLI never took in (for once the turn is over)."""


TurnT = TypeVar("TurnT", bound=Turn)


async def started(
    turn: TurnT, confinement: Confinement, *, first: Callable[[], Awaitable[None]] | None = None
) -> TurnT:
    """``turn``, its CLI spawned, once ``first`` (sending the prompt) is done and its
    confinement serves in full (``Confinement.serving``: the sandbox's egress starts beside
    the CLI, which takes far longer); a turn either of them fails is stopped, and the error
    raised."""
    try:
        if first is not None:
            await first()
        await confinement.serving()
    except BaseException:
        await turn.stop()
        raise
    return turn


TurnStarter = Callable[[TurnRequest], Awaitable[Turn]]
