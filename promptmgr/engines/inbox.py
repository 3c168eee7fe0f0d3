"""A turn's stream-json input: the prompt, and the user messages written while Claude works.

Both engines run the CLI with ``--input-format stream-json`` and keep its stdin open, so a
message a person sends mid-turn (steering, or a late answer to an expired question) can be
written as it comes. Every message carries a ``uuid``; the CLI reports in
``command_lifecycle`` lines when it takes each in (``started``). What the bundled CLI does
with them (``tests/harness/test_stream_json_input.py``):

- taken in while a turn runs, a message joins that turn (the model gets it with the next
  tool result): delivered into the running turn;
- taken in once the turn printed its result, it starts the next turn in the same process
  and session.

The input ends (EOF, the CLI then exits as ``claude -p`` does) once every message written
has been taken in and a result followed the last one: only then is nothing left to answer.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

DeliveryKind = Literal["turn", "next_turn"]


@dataclass(frozen=True)
class Delivery:
    """A message the CLI took in: into the running turn, or as the start of the next one."""

    message_id: str
    delivery: DeliveryKind


def user_message_line(text: str, message_id: str) -> bytes:
    """One user message as the CLI's stream-json input takes it."""
    message = {
        "type": "user",
        "message": {"role": "user", "content": text},
        "parent_tool_use_id": None,
        "uuid": message_id,
    }
    return (json.dumps(message, ensure_ascii=False) + "\n").encode()


class TurnInput:
    """The messages written to one CLI and what became of them.

    ``write`` sends a line (raising ``OSError`` once the input is closed); ``end`` closes the
    input; ``may_end`` says whether anything else still needs it. ``observe`` is given
    every stream-json message the CLI prints, in order.
    """

    def __init__(
        self,
        *,
        write: Callable[[bytes], Awaitable[None]],
        end: Callable[[], None],
        may_end: Callable[[], bool] = lambda: True,
    ) -> None:
        self._write = write
        self._end = end
        # Whether the engine has nothing else that needs the input (the SDK engine's agents).
        self._may_end = may_end
        self._prompt_id = ""
        self._unstarted: list[str] = []  # written, not yet taken in, in order
        self._running = False  # a turn is under way (taken-in messages join it)
        self._deliveries: list[Delivery] = []
        self.ended = False

    async def send_prompt(self, text: str, message_id: str) -> None:
        self._prompt_id = message_id
        await self.send(text, message_id)

    async def send(self, text: str, message_id: str) -> bool:
        """Write a message; False once the input has ended (nothing was written)."""
        if self.ended:
            return False
        self._unstarted.append(message_id)
        try:
            await self._write(user_message_line(text, message_id))
        except OSError:  # the CLI is gone, or the input closed meanwhile
            self._unstarted.remove(message_id)
            return False
        return True

    @property
    def settled(self) -> bool:
        """Every message was taken in, and the turn the last one joined is over."""
        return bool(self._prompt_id) and not self._unstarted and not self._running

    def unstarted(self) -> list[str]:
        """Messages written that the CLI never took in (its output ended first)."""
        return [m for m in self._unstarted if m != self._prompt_id]

    def observe(self, data: dict[str, Any]) -> None:
        """Follow one line the CLI printed; end the input once it is settled."""
        kind = data.get("type")
        if kind == "result":
            self._running = False
        elif kind == "command_lifecycle" and data.get("state") == "started":
            message_id = str(data.get("command_uuid") or "")
            if message_id not in self._unstarted:
                return
            self._unstarted.remove(message_id)
            if message_id != self._prompt_id:
                self._deliveries.append(Delivery(message_id, "turn" if self._running else "next_turn"))
            self._running = True
        else:
            return
        self.end_if_settled()

    def end_if_settled(self) -> None:
        if self.settled and self._may_end():
            self.end()

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self._end()

    def take_deliveries(self) -> list[Delivery]:
        taken, self._deliveries = self._deliveries, []
        return taken
