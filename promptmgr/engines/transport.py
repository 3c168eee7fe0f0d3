"""The SDK engine's Claude Code process, held to the rules the CLI engine's follows.

claude-agent-sdk 0.2.187's own ``SubprocessCLITransport`` starts the CLI with the whole
server environment underneath ``options.env`` (so SECRET_KEY, DATABASE_URL… would reach
Claude and every tool it runs), in the server's own process group, and its ``close()``
signals the CLI alone. ``IsolatedCLITransport`` implements the SDK's public ``Transport``
over a ``processes.ManagedProcess`` instead: the SDK's command line with only the
allowlisted environment, in a session of its own, started with vfork, read as the CLI
engine reads its CLI (lines of any length, paced), and on close the whole process tree
is reaped. Every item read is handed to a tap, so the run supervisor sees exactly what
the CLI printed, as the CLI engine's supervisor does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, CLIConnectionError, ProcessError, Transport, __version__
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
from django.conf import settings

from core.redis import decode_json
from promptmgr.processes import ChildInput, Line, ManagedProcess

from .base import Item, Message, read_line

# What the SDK's own transport adds to the CLI's environment (see its ``connect()``).
SDK_ENV = {
    "CLAUDE_CODE_ENTRYPOINT": "sdk-py",
    "CLAUDE_AGENT_SDK_VERSION": __version__,
    "CLAUDE_CODE_SDK_READS_SESSION_STATE": "1",
}
# As the SDK's close(): the CLI saves its session once its input ends; give it this long
# (seconds) to exit by itself before the tree is terminated.
EXIT_AFTER_INPUT = 5.0


def sdk_command(options: ClaudeAgentOptions) -> list[str]:
    """The command line ``ClaudeSDKClient`` would start for ``options``."""
    # The SDK offers no public way to turn options into CLI flags; copying them would drift.
    return SubprocessCLITransport(prompt="", options=options)._build_command()


class IsolatedCLITransport(Transport):
    """The SDK's ``Transport`` over a CLI started with our environment, in a new session,
    each item it prints handed to ``on_item`` (and its end to ``on_end``)."""

    def __init__(
        self,
        command: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        on_item: Callable[[Item], None],
        on_end: Callable[[], None],
    ) -> None:
        self._command = command
        self._cwd = cwd
        self._env = env
        self._on_item = on_item
        self._on_end = on_end
        # Kept after close(): the supervisor asks it for the exit code and the stderr tail.
        self.process: ManagedProcess | None = None
        self._ready = False

    async def connect(self) -> None:
        if self.process is not None:
            return
        env = {**self._env, **SDK_ENV, "PWD": str(self._cwd)}
        try:
            self.process = await ManagedProcess.spawn(
                self._command, cwd=self._cwd, env=env, stdin_data=None, nice=settings.CLAUDE_CLI_NICE
            )
        except OSError as exc:
            raise CLIConnectionError(f"Failed to start Claude Code: {exc}") from exc
        self._ready = True

    def is_ready(self) -> bool:
        return self._ready

    def _input(self) -> ChildInput:
        if self.process is None or self.process.input is None or not self._ready:
            raise CLIConnectionError("ProcessTransport is not ready for writing")
        return self.process.input

    async def write(self, data: str) -> None:
        stdin = self._input()
        try:
            await stdin.write(data.encode())
        except OSError as exc:  # the input was closed, or the CLI is gone
            self._ready = False
            raise CLIConnectionError(f"Failed to write to process stdin: {exc}") from exc

    async def end_input(self) -> None:
        if self.process is not None and self.process.input is not None:
            await self.process.input.end()

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        return self._read()

    async def _read(self) -> AsyncIterator[dict[str, Any]]:
        """Every line to the tap; to the SDK only the JSON objects, unredacted.

        As the SDK's own transport does, a CLI that exited with an error ends the reading
        with ``ProcessError``, so requests still waiting for an answer fail at once.
        """
        process = self.process
        if process is None:
            raise CLIConnectionError("Not connected")
        try:
            while (line := await process.line()) is not None:
                tapped = read_line(line)
                self._on_item(tapped)
                message = _for_sdk(line, tapped)
                if message is not None:
                    yield message
        finally:
            self._on_end()
        code = await process.wait()
        if code != 0:
            raise ProcessError(
                f"Command failed with exit code {code}", exit_code=code, stderr=process.stderr_tail()
            )

    async def close(self) -> None:
        """End the input, give the CLI ``EXIT_AFTER_INPUT`` to exit, then reap the whole tree.

        Bounded (``ManagedProcess.stop`` is), as the SDK's ``Transport`` asks."""
        self._ready = False
        process = self.process
        if process is None:
            return
        if process.input is not None:
            process.input.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(process.wait()), EXIT_AFTER_INPUT)
        await process.stop()


def _for_sdk(line: Line, tapped: Item) -> dict[str, Any] | None:
    """What the SDK gets of a line: the message as printed, tokens and all (the tap's copy
    is redacted), or None for a line that is no JSON object."""
    if not isinstance(tapped, Message):
        return None
    if tapped.line is line.data or tapped.line == line.data:  # no token: one parse serves both
        return tapped.data
    try:
        data = decode_json(line.data)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
