"""The SDK engine: one prompt through claude-agent-sdk's ``ClaudeSDKClient``.

``SDKTurn`` drives the client in a task of its own and is a ``base.Turn`` to the run
supervisor, which reads the CLI's stream-json messages with its 2-second timeouts and
translates them with the same code as the CLI engine's, so both engines produce the same
events, limits, cancel and clean-up. Messages come from the transport's tap, as the CLI
printed them, not from the SDK's typed objects, which drop message types
(``tool_progress``) the browser shows. The built-in ``AskUserQuestion`` reaches the app
through ``can_use_tool`` (``permissions``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid
from dataclasses import replace
from pathlib import Path
from typing import cast

from claude_agent_sdk import (
    TERMINAL_TASK_STATUSES,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    CLIConnectionError,
    Message,
    ProcessError,
    ResultMessage,
    TaskNotificationMessage,
    TaskStartedMessage,
    TaskUpdatedMessage,
)
from claude_agent_sdk.types import PermissionMode as SDKPermissionMode
from django.conf import settings

from core.tool_names import ASK_USER_QUESTION
from promptmgr import sandbox
from promptmgr.cli import child_env, child_path, find_claude_cli
from promptmgr.models import PermissionMode, Project
from promptmgr.processes import TIMEOUT, LineTimeout

from .base import Item, TurnRequest, started
from .base import Message as StreamMessage
from .inbox import Delivery, TurnInput
from .permissions import PermissionGate
from .transport import IsolatedCLITransport, sdk_command

MSG_NO_BYPASS = "The SDK engine cannot run in bypassPermissions mode; choose another permission mode."
MSG_SDK_FAILED = "Claude Agent SDK: {error}"
# The transport's close() waits up to 5 s for the CLI to exit after its input ends (it
# saves the session meanwhile), then reaps the tree: ~13 s at worst.
DISCONNECT_TIMEOUT = 30.0
CAUGHT_UP_TIMEOUT = 2.0
# How long a message sent while the CLI starts waits for the prompt to be written first.
PROMPT_WAIT = 30.0
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
    *,
    project: Project,
    root: Path,
    resume_session_id: str,
    gate: PermissionGate,
    confinement: sandbox.Confinement,
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
        env=child_env(ask_user_config=None, ask_user_timeout=None) | confinement.cli_env,
        # The sandbox's settings, as the CLI engine passes them (``--settings``).
        settings=confinement.settings,
        include_partial_messages=True,
        can_use_tool=gate.can_use_tool,
        disallowed_tools=[] if gate.ask_user else [ASK_USER_QUESTION],
    )


class Handoff:
    """Items on their way from the transport's tap to the supervisor, and how far the
    supervisor has got with them (see ``Turn.next_item``)."""

    def __init__(self) -> None:
        self._items: asyncio.Queue[Item | None] = asyncio.Queue()
        self._received = 0  # items put so far
        self._handed_out = 0  # items the supervisor took
        self._handled = 0  # items the supervisor is done with
        self._progress = asyncio.Event()

    def put(self, item: Item) -> None:
        self._received += 1
        self._items.put_nowait(item)

    def end(self) -> None:
        self._items.put_nowait(None)

    async def next(self, timeout: float) -> Item | None | LineTimeout:
        """The next item, None at the end, or TIMEOUT; asking says those taken before are handled."""
        self._handled = self._handed_out
        self._progress.set()
        try:
            item = await asyncio.wait_for(self._items.get(), timeout)
        except TimeoutError:
            return TIMEOUT
        return self._hand_out(item)

    def ready(self) -> Item | None | LineTimeout:
        try:
            item = self._items.get_nowait()
        except asyncio.QueueEmpty:
            return TIMEOUT
        return self._hand_out(item)

    def _hand_out(self, item: Item | None) -> Item | None:
        if item is not None:
            self._handed_out += 1
        return item

    async def caught_up(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until every item put so far is handled."""
        target = self._received
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self._handled < target:
                    self._progress.clear()
                    await self._progress.wait()


class SDKTurn:
    """One run's prompt through the SDK, a ``base.Turn`` to the run supervisor."""

    def __init__(
        self,
        *,
        run_id: int,
        project: Project,
        root: Path,
        resume_session_id: str,
        prompt: str,
        confinement: sandbox.Confinement,
        prompt_id: str = "",
    ) -> None:
        self.stopping = asyncio.Event()
        self._confinement = confinement
        self.errors: list[str] = []
        self.ask_user = ask_user_enabled(project)
        self.gate = PermissionGate(
            run_id=run_id,
            permission_mode=project.permission_mode,
            ask_user=self.ask_user,
            stopping=self.stopping,
            caught_up=self.caught_up,
        )
        options = sdk_options(
            project=project,
            root=root,
            resume_session_id=resume_session_id,
            gate=self.gate,
            confinement=confinement,
        )
        self._handoff = Handoff()
        self._ended = False
        self._exit_code: int | None = None
        self._agents: set[str] = set()
        self._prompt_sent = asyncio.Event()
        # Set once the run's commands may start (``start_turn``): the prompt waits for it.
        self.may_prompt = asyncio.Event()
        # The prompt and the messages sent while Claude works (engines.inbox); the input
        # ends once they are settled and no delegated agent still runs.
        self.input = TurnInput(write=self._write_input, end=self._end_input, may_end=lambda: not self._agents)
        self.transport = IsolatedCLITransport(
            # What ClaudeSDKClient does to the options of a transport it builds itself.
            sdk_command(replace(options, permission_prompt_tool_name="stdio")),
            cwd=root,
            env=options.env,
            on_item=self._tap,
            on_end=self._end_output,
        )
        self._client = ClaudeSDKClient(options, transport=self.transport)
        self._driver = asyncio.create_task(
            self._drive(prompt, prompt_id or str(uuid.uuid4())), name=f"sdk-run-{run_id}"
        )

    def _tap(self, item: Item) -> None:
        """Every line the CLI prints: followed by the input, then handed to the supervisor."""
        if isinstance(item, StreamMessage):
            self.input.observe(item.data)
        self._handoff.put(item)

    async def _write_input(self, line: bytes) -> None:
        try:
            await self.transport.write(line.decode())
        except CLIConnectionError as exc:
            raise BrokenPipeError(str(exc)) from exc

    def _end_input(self) -> None:
        process = self.transport.process
        if process is not None and process.input is not None:
            process.input.close()

    async def send_message(self, text: str, message_id: str) -> bool:
        # A message sent while the CLI still starts waits for the prompt to go first.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._prompt_sent.wait(), PROMPT_WAIT)
        return await self.input.send(text, message_id)

    def take_deliveries(self) -> list[Delivery]:
        return self.input.take_deliveries()

    def unstarted_messages(self) -> list[str]:
        return self.input.unstarted()

    async def _drive(self, prompt: str, prompt_id: str) -> None:
        """Connect, send the prompt, read until the input is settled, then end it.

        Like ``claude -p`` at the end of its input, the CLI then finishes what it started
        (a background command, the turn its completion wakes) and exits by itself; the
        supervisor's limits bound that wait. The messages themselves reach the supervisor
        through the transport's tap.
        """
        try:
            await self._client.connect()
            await _first_set(self.may_prompt, self.stopping)
            if self.stopping.is_set():
                self.terminate()  # cancelled while the CLI was starting
                return
            # The input's first stream-json message, with its uuid (query() sends none).
            await self.input.send_prompt(prompt, prompt_id)
            self._prompt_sent.set()
            async for message in self._client.receive_messages():
                track_agents(self._agents, message)
                if isinstance(message, ResultMessage | TaskNotificationMessage | TaskUpdatedMessage):
                    self.input.end_if_settled()
        except ProcessError:
            pass  # the supervisor reports the exit code and the stderr tail itself
        except Exception as exc:
            if not self.stopping.is_set():
                self.errors.append(MSG_SDK_FAILED.format(error=exc))
        finally:
            # Closing stdin lets the CLI save the session and exit (bounded by the transport).
            with contextlib.suppress(Exception):
                await self._client.disconnect()
            self._end_output()

    def _end_output(self) -> None:
        if not self._ended:
            self._ended = True
            self._handoff.end()

    async def next_item(self, timeout: float) -> Item | None | LineTimeout:
        item = await self._handoff.next(timeout)
        process = self.transport.process
        if item is TIMEOUT and process is not None:
            # A quiet moment: note the groups of Bash commands started meanwhile.
            process.tree.collect()
        return item

    def ready_item(self) -> Item | None | LineTimeout:
        return self._handoff.ready()

    async def caught_up(self) -> None:
        """Wait (briefly) until the supervisor has handled every message received so far."""
        await self._handoff.caught_up(CAUGHT_UP_TIMEOUT)

    def terminate(self) -> None:
        """SIGTERM the CLI and every process group below it (each Bash command has one).

        Whatever ignores SIGTERM is killed after a grace period, so the output ends and
        the supervisor's read loop with it.
        """
        self.stopping.set()
        if self.transport.process is not None:
            self.transport.process.terminate()

    async def stop(self) -> int:
        """End the turn: let the SDK close the CLI, reap what is left, return the exit code.

        The supervisor calls it when the output ends and again when the run finishes.
        """
        if self._exit_code is not None:
            return self._exit_code
        if not self._ended:
            self.terminate()  # stopped while output still flowed
        try:
            await asyncio.wait_for(asyncio.shield(self._driver), DISCONNECT_TIMEOUT)
        except TimeoutError:
            if self.transport.process is not None:
                self.transport.process.tree.send(signal.SIGKILL)
            self._driver.cancel()
        # The CLI's group and the groups seen below it go too, whatever the SDK left.
        process = self.transport.process
        self._exit_code = -1 if process is None else await process.stop()
        await self._confinement.aclose()
        return self._exit_code

    def stderr_tail(self, limit: int = 4000) -> str:
        process = self.transport.process
        return "" if process is None else process.stderr_tail(limit)


async def start_turn(request: TurnRequest) -> SDKTurn:
    """Confine the run (``sandbox``, as the CLI engine does) and start the SDK client on its
    prompt (it connects in a task of its own). In the ``run`` scope the CLI starts while the
    run's sandbox starts and its start snapshot is taken; the prompt goes in once both are
    done (``Confinement.open``), as in the CLI engine."""
    confinement = await sandbox.confine(run_id=request.run_id, workdir=request.root, path=child_path())
    try:
        await confinement.before_spawn(request.before_prompt)
        turn = SDKTurn(
            run_id=request.run_id,
            project=request.project,
            root=request.root,
            resume_session_id=request.resume_session_id,
            prompt=request.prompt,
            confinement=confinement,
            prompt_id=request.prompt_id,
        )
    except BaseException:
        await confinement.aclose()
        raise

    async def first() -> None:
        await confinement.open(after=request.before_prompt)
        turn.may_prompt.set()

    return await started(turn, confinement, first=first)


async def _first_set(*flags: asyncio.Event) -> None:
    """Return once any of ``flags`` is set."""
    waits = [asyncio.ensure_future(flag.wait()) for flag in flags]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
