"""The SDK engine: one prompt through claude-agent-sdk's ``ClaudeSDKClient``.

``SDKTurn`` drives the client in a task of its own and offers the run supervisor the
interface of ``processes.ManagedProcess`` (``next_line``, ``terminate``, ``stop``,
``stderr_tail``): the supervisor reads the CLI's stream-json messages with its 2-second
timeouts and translates them with the CLI engine's code, so both engines produce the same
events, limits, cancel and clean-up. Messages come from the transport's tap, not from the
SDK's typed objects, which drop message types (``tool_progress``) the browser shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from claude_agent_sdk import (
    TERMINAL_TASK_STATUSES,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    Message,
    ProcessError,
    ResultMessage,
    TaskNotificationMessage,
    TaskStartedMessage,
    TaskUpdatedMessage,
)
from claude_agent_sdk.types import PermissionMode as SDKPermissionMode
from django.conf import settings

from promptmgr.cli import child_env, find_claude_cli
from promptmgr.models import PermissionMode, Project
from promptmgr.processes import DEFAULT_MAX_LINE, KILL_GRACE, TIMEOUT, Line, LineTimeout, ProcessTree

from .permissions import ASK_USER_QUESTION, PermissionGate
from .transport import IsolatedCLITransport

MSG_NO_BYPASS = "The SDK engine cannot run in bypassPermissions mode; choose another permission mode."
MSG_SDK_FAILED = "Claude Agent SDK: {error}"
# The SDK's close() waits up to 5 s for the CLI to exit after stdin closes (it flushes the
# session meanwhile), then 5 s after SIGTERM, then kills it: ~20 s at worst.
DISCONNECT_TIMEOUT = 30.0
CAUGHT_UP_TIMEOUT = 2.0
STDERR_TAIL_LINES = 200
# Task types whose completion starts another turn (the SDK's DEFERRING_TASK_TYPES).
AGENT_TASK_TYPES = frozenset({"local_agent", "local_workflow"})


def track_agents(agents: set[str], message: Message) -> None:
    """Keep the ids of delegated agents still running (as the SDK's own ``query()`` does).

    Their completion wakes the session for another turn, whose questions and permission
    requests need stdin, so the input stays open while any runs.
    """
    if isinstance(message, TaskStartedMessage) and message.task_type in AGENT_TASK_TYPES:
        agents.add(message.task_id)
    elif isinstance(message, TaskNotificationMessage) or (
        isinstance(message, TaskUpdatedMessage) and message.status in TERMINAL_TASK_STATUSES
    ):
        agents.discard(message.task_id)


def ask_user_enabled(project: Project) -> bool:
    """The SDK engine asks through the built-in AskUserQuestion unless ask-user is off."""
    return bool(settings.ASK_USER_ENABLED and project.ask_user_enabled)


def sdk_options(
    *, project: Project, root: Path, resume_session_id: str, gate: PermissionGate
) -> ClaudeAgentOptions:
    if project.permission_mode == PermissionMode.BYPASS:
        # The CLI would never call can_use_tool, so questions would go unanswered.
        raise ValueError(MSG_NO_BYPASS)
    return ClaudeAgentOptions(
        cli_path=find_claude_cli(),
        cwd=str(root),
        resume=resume_session_id or None,
        model=project.model or None,
        permission_mode=cast(SDKPermissionMode, project.permission_mode),
        # Claude Code's own system prompt, as the CLI engine has it (the SDK default is empty).
        system_prompt={"type": "preset", "preset": "claude_code"},
        env=child_env(ask_user_config=None, ask_user_timeout=None),
        include_partial_messages=True,
        can_use_tool=gate.can_use_tool,
        disallowed_tools=[] if gate.ask_user else [ASK_USER_QUESTION],
        # The CLI engine reads lines of any length; the SDK refuses those over 1 MB by default.
        max_buffer_size=DEFAULT_MAX_LINE,
    )


class SDKTurn:
    """One run's prompt through the SDK, seen by the run supervisor as a process."""

    def __init__(
        self, *, run_id: int, project: Project, root: Path, resume_session_id: str, prompt: str
    ) -> None:
        self.stopping = asyncio.Event()
        self.errors: list[str] = []
        self.gate = PermissionGate(
            run_id=run_id,
            permission_mode=project.permission_mode,
            ask_user=ask_user_enabled(project),
            stopping=self.stopping,
            caught_up=self.caught_up,
        )
        options = sdk_options(project=project, root=root, resume_session_id=resume_session_id, gate=self.gate)
        self._messages: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._unacked = 0  # lines handed out but not yet flushed to the event stream
        self._ended = False
        self._tree: ProcessTree | None = None
        self._exit_code: int | None = None
        self._stderr: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self.transport = IsolatedCLITransport(
            # What ClaudeSDKClient does to the options of a transport it builds itself.
            replace(options, permission_prompt_tool_name="stdio", stderr=self._stderr.append),
            env=options.env,
            on_message=self._messages.put_nowait,
            on_end=self._end_output,
        )
        self._client = ClaudeSDKClient(options, transport=self.transport)
        self._driver = asyncio.create_task(self._drive(prompt), name=f"sdk-run-{run_id}")

    async def _drive(self, prompt: str) -> None:
        """Connect, send the prompt, read up to the turn's result, then end the input.

        Like ``claude -p`` at the end of its input, the CLI then finishes what it started
        (a background command, the turn its completion wakes) and exits by itself; the
        supervisor's limits bound that wait. The messages themselves reach the supervisor
        through the transport's tap.
        """
        try:
            await self._client.connect()
            if self.stopping.is_set():
                self.terminate()  # cancelled while the CLI was starting
                return
            await self._client.query(prompt)
            agents: set[str] = set()
            input_open = True
            async for message in self._client.receive_messages():
                track_agents(agents, message)
                if input_open and isinstance(message, ResultMessage) and not agents:
                    await self.transport.end_input()
                    input_open = False
        except ProcessError:
            pass  # the supervisor reports the exit code and the stderr tail itself
        except Exception as exc:
            if not self.stopping.is_set():
                self.errors.append(MSG_SDK_FAILED.format(error=exc))
        finally:
            # Closing stdin lets the CLI save the session and exit (bounded inside the SDK).
            with contextlib.suppress(Exception):
                await self._client.disconnect()
            self._end_output()

    def _end_output(self) -> None:
        if not self._ended:
            self._ended = True
            self._messages.put_nowait(None)

    async def next_line(self, timeout: float) -> Line | None | LineTimeout:
        """The next stream-json line, None at the end of output, or TIMEOUT."""
        try:
            message = await asyncio.wait_for(self._messages.get(), timeout)
        except TimeoutError:
            # A quiet moment: note the groups of Bash commands started meanwhile.
            if self.tree is not None:
                self.tree.collect()
            return TIMEOUT
        return self._hand_out(message)

    def ready_line(self) -> Line | None | LineTimeout:
        """A line that is already waiting, without waiting; TIMEOUT when there is none."""
        try:
            message = self._messages.get_nowait()
        except asyncio.QueueEmpty:
            return TIMEOUT
        return self._hand_out(message)

    def _hand_out(self, message: dict[str, Any] | None) -> Line | None:
        if message is None:
            self._messages.task_done()
            return None
        self._unacked += 1
        return Line(json.dumps(message, ensure_ascii=False).encode())

    def ack(self) -> None:
        """The supervisor has put every line handed out so far into the event stream."""
        for _ in range(self._unacked):
            self._messages.task_done()
        self._unacked = 0

    async def caught_up(self) -> None:
        """Wait (briefly) until the supervisor has handled every message received so far."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._messages.join(), CAUGHT_UP_TIMEOUT)

    @property
    def tree(self) -> ProcessTree | None:
        """The CLI's process tree, once the transport has started it."""
        process = self.transport.spawned
        if self._tree is None and process is not None:
            self._tree = ProcessTree(process.pid)
        return self._tree

    def terminate(self) -> None:
        """SIGTERM the CLI and every process group below it (each Bash command has one).

        Whatever ignores SIGTERM is killed after a grace period, so the output ends and
        the supervisor's read loop with it.
        """
        self.stopping.set()
        if self.tree is not None:
            self.tree.terminate(kill_after=KILL_GRACE)

    def _exited(self) -> bool:
        process = self.transport.spawned
        return process is None or process.returncode is not None

    async def stop(self, *, grace: float = KILL_GRACE) -> int:
        """End the turn: let the SDK close the CLI, kill what is left, return the exit code.

        The supervisor calls it when the output ends and again when the run finishes.
        """
        if self._exit_code is not None:
            return self._exit_code
        if not self._ended:
            self.terminate()  # stopped while output still flowed
        tree = self.tree
        if self.stopping.is_set() and tree is not None and not await tree.wait_gone(grace):
            tree.send(signal.SIGKILL)
        try:
            await asyncio.wait_for(asyncio.shield(self._driver), DISCONNECT_TIMEOUT)
        except TimeoutError:
            if tree is not None:
                tree.send(signal.SIGKILL)
            self._driver.cancel()
        # Whatever is left of the CLI's group and the groups seen below it goes too.
        if self.tree is not None:
            await self.tree.reap(grace, also=self._exited)
        self._exit_code = await self._wait_for_exit()
        return self._exit_code

    async def _wait_for_exit(self) -> int:
        process = self.transport.spawned
        if process is None:
            return -1
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(process.wait(), 5)
        return -1

    def stderr_tail(self, limit: int = 4000) -> str:
        return "\n".join(self._stderr)[-limit:]
