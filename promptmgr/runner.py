"""The run supervisor: one asyncio task per run, in the queue worker that took it.

It starts the run's turn on the project's engine (``engines.cli``: ``claude -p
--output-format stream-json``; ``engines.sdk``: the same CLI through claude-agent-sdk),
reads the turn's stream-json messages with the design card's 2-second timeouts,
translates each into named events appended to the run's Redis stream (which any
worker's SSE view can serve), and on each timeout checks the Redis question cache so a
question the relay could not push still reaches the browser. It enforces the run's
limits, obeys cancel requests from any worker, and on every ending stops the turn (which
reaps the CLI's whole process tree), records the outcome and keeps the events in the
database. Both engines share all of this; only starting the turn differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import logging
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from askuser import facade as askuser
from core import events
from core.events import Event

from . import live, markdown, run_control
from .engines import cli as cli_engine
from .engines.base import Garbage, Item, Turn, TurnRequest, TurnStarter
from .event_history import persist_events, store_events_after
from .models import Conversation, Engine, Project, Run, RunStatus
from .processes import LineTimeout
from .services import changes as run_changes
from .services import run_state
from .services.run_state import Outcome
from .services.worktrees import setup_before_run as worktree_setup
from .steering import RunInbox
from .translate import translate
from .workspaces import workspace_path, workspace_sync

logger = logging.getLogger(__name__)

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
OWNER_TTL = 30  # seconds; refreshed on every loop turn while the run lives
MAX_GARBAGE_EVENTS = 5
BATCH_ITEMS = 500  # the most ready messages handled before one flush to Redis

MSG_CANCELLED = "Cancelled by the user."
MSG_SHUTDOWN = "The server shut down while Claude was working."
MSG_MAX_DURATION = "Stopped: the run exceeded the maximum duration of {seconds} s."
MSG_IDLE = "Stopped: Claude Code printed nothing for {seconds} s."
MSG_NO_RESULT = "Claude Code exited with code {code} before finishing the turn."
CLI_REASON_LINES = 3  # of the CLI's stderr, shown with MSG_NO_RESULT
CLI_REASON_CHARS = 600
MSG_NOT_JSON = "Claude Code printed a line that is not stream-json: {preview}"
MSG_TRUNCATED = "Claude Code printed a line of more than {limit} MB; it was left out of the stream."
MSG_SPAWN_FAILED = "Could not start Claude Code: {error}"
MSG_REDIS_LOST = "Lost the connection to Redis ({error}); the run was stopped."
MSG_DUPLICATE = "run %s was delivered again, but it started or ended already: it does not run twice"
# How long a stopped actor waits for its run's clean-up (it reaps the CLI in seconds).
STOP_TIMEOUT = 20.0

_tasks: dict[int, asyncio.Task[None]] = {}


async def _sdk_start_turn(request: TurnRequest) -> Turn:
    """The SDK engine, imported with its first run: claude-agent-sdk (and the MCP SDK it
    brings) is 30 MiB of a worker's memory that only projects on that engine need
    (bench/scale.py, idle RSS); imported off the event loop, which it would hold up."""
    sdk_engine = await asyncio.to_thread(importlib.import_module, "promptmgr.engines.sdk")
    return await sdk_engine.start_turn(request)  # type: ignore[no-any-return]


ENGINES: dict[str, TurnStarter] = {Engine.CLI: cli_engine.start_turn, Engine.SDK: _sdk_start_turn}


@dataclass
class RunContext:
    run: Run
    project: Project
    conversation: Conversation


def _load_context(run_id: int) -> RunContext:
    run = Run.objects.select_related("conversation__project").get(pk=run_id)
    return RunContext(run=run, project=run.conversation.project, conversation=run.conversation)


def _save_session_id(conversation_id: int, session_id: str) -> None:
    Conversation.objects.filter(pk=conversation_id).update(
        claude_session_id=session_id, updated_at=timezone.now()
    )


def _record_outcome(run_id: int, outcome: Outcome) -> None:
    try:
        run_state.run_finish(run_id, outcome)
    except run_state.IllegalTransition as exc:
        # The sweep ended it first (its owner key had lapsed); its record stands.
        logger.warning("run %s: outcome %s not recorded: %s", run_id, outcome.status, exc)


def cli_reason(stderr: str) -> str:
    """The first lines the CLI printed on stderr: why it stopped, in its own words."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()][:CLI_REASON_LINES]
    text = "\n".join(lines)[:CLI_REASON_CHARS]
    return askuser.redact_tokens(text.encode()).decode("utf-8", "replace")


def _same_block(pending: tuple[str, dict[str, Any]], delta: dict[str, Any]) -> bool:
    event, data = pending
    return (
        event == "text_delta"
        and data.get("index") == delta.get("index")
        and data.get("parent_tool_use_id") == delta.get("parent_tool_use_id")
    )


class RunSupervisor:
    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.turn: Turn | None = None
        self.stop_status: str | None = None
        self.stop_message = ""
        self.result: dict[str, Any] | None = None
        self.errors: list[str] = []
        self.garbage = 0
        self.ask_user = False
        # Ids of the ask tools' calls: only their results are checked against the answer.
        self.ask_tool_use_ids: set[str] = set()
        self.emitted: list[Event] = []
        self.changes: dict[str, Any] | None = None  # the `changes` event, once the run has ended
        # What the turn printed, stored while its CLI exits and its changes are recorded.
        self._output_stored: asyncio.Task[int] | None = None
        self.redactor = askuser.DeltaRedactor()
        # Messages people send while Claude works, into the turn's input (steering).
        self.inbox = RunInbox(run_id, self.emit)
        self._pending: list[tuple[str, dict[str, Any]]] = []
        self._batching = False
        # Holds the run's events through a Redis outage of up to REDIS_OUTAGE_SECONDS.
        self.writer = events.EventWriter(run_id, max_outage=settings.REDIS_OUTAGE_SECONDS)

    async def emit(self, event: str, data: dict[str, Any]) -> None:
        """Append an event; inside a batch of ready messages it waits for the batch's flush."""
        if event == "text_delta" and self._pending and _same_block(self._pending[-1], data):
            # Deltas of one block that arrived together become one: the same text in the
            # same order, at a fraction of the per-event cost when the CLI prints in bursts.
            self._pending[-1][1]["text"] += data["text"]
            return
        self._pending.append((event, data))
        if not self._batching:
            await self._flush()

    async def _flush(self) -> None:
        if not self._pending and not self.writer.held:
            return
        batch, self._pending = self._pending, []
        # One round trip for the whole batch: at full speed the CLI prints thousands of
        # lines a second, and one Redis call per event could not keep up.
        self.emitted.extend(await self.writer.write(batch))

    def request_stop(self, status: str, message: str) -> None:
        """Stop the CLI; the read loop then sees end of output and records ``status``."""
        if self.stop_status is None:
            self.stop_status, self.stop_message = status, message
        if self.turn is not None:
            self.turn.terminate()

    async def execute(self) -> None:
        ctx = await sync_to_async(_load_context)(self.run_id)
        outcome = Outcome(status=RunStatus.FAILED)
        run_control.watch(
            run_control.RunControl(
                self.run_id,
                cancel=lambda: self.request_stop(RunStatus.CANCELLED, MSG_CANCELLED),
                message=self.inbox.wake,
            )
        )
        try:
            # Claimed already (``claim``): this worker holds the lease and the run is running.
            await self.emit("run_status", {"status": RunStatus.RUNNING})
            if await live.cancel_requested(self.run_id):
                self.request_stop(RunStatus.CANCELLED, MSG_CANCELLED)
            else:
                outcome = await self._run(ctx)
        except asyncio.CancelledError:
            self.request_stop(RunStatus.CANCELLED, MSG_SHUTDOWN)
            raise
        except redis.RedisError as exc:
            # The outage itself is logged once (core.redis); no traceback per run.
            logger.warning("run %s stopped: %s", self.run_id, exc)
            outcome = Outcome(status=RunStatus.FAILED, error=MSG_REDIS_LOST.format(error=exc))
        except Exception as exc:
            logger.exception("run %s failed", self.run_id)
            outcome = Outcome(status=RunStatus.FAILED, error=MSG_SPAWN_FAILED.format(error=exc))
        finally:
            run_control.forget(self.run_id)
            if self.stop_status is not None:
                outcome.status, outcome.error = self.stop_status, self.stop_message
            # Shielded: a shutdown must not interrupt the clean-up it asked for.
            await asyncio.shield(self._finish(ctx, outcome))

    async def _run(self, ctx: RunContext) -> Outcome:
        """Start the turn on the run's engine, read it to the end, judge how it went."""
        project = ctx.project
        # Where the run was created to work (what previews and approvals read too); runs
        # stored before the field existed have none.
        root = Path(ctx.run.workdir) if ctx.run.workdir else workspace_path(project)
        if not root.exists():
            await sync_to_async(workspace_sync)(project=project)
        # A new worktree's setup command (e.g. npm ci) runs before Claude starts there.
        failure = await worktree_setup(
            worktree=root,
            command=project.worktree_setup_command,
            emit=self.emit,
            stopping=lambda: self.stop_status is not None,
            keep_alive=lambda: live.set_owner(self.run_id, WORKER_ID, ttl=OWNER_TTL),
        )
        if failure is not None:
            return Outcome(status=RunStatus.FAILED, error=failure)
        # The worktree's state before Claude touches it: the run's changes are diffed against
        # it. Taken while the sandbox (and the CLI) start, all mostly waiting on other
        # programs; the engine gives Claude the prompt only once it is done.
        snapshot = asyncio.ensure_future(run_changes.record_start(self.run_id, root))
        start = ENGINES.get(ctx.run.engine, cli_engine.start_turn)
        try:
            self.turn = turn = await start(
                TurnRequest(
                    run_id=self.run_id,
                    project=project,
                    root=root,
                    prompt=ctx.run.prompt,
                    resume_session_id=ctx.conversation.claude_session_id,
                    stream_token=str(ctx.run.stream_token),
                    before_prompt=snapshot,
                )
            )
        finally:
            # A start that failed before it: the snapshot still ends before the run's end.
            await asyncio.wait([snapshot])
        self.ask_user = turn.ask_user
        self.inbox.attach(turn)
        if self.stop_status is not None:  # cancelled while starting
            turn.terminate()
        await self._read_until_the_end(ctx)
        await self._emit_held_text()
        self._store_output()
        code = await turn.stop()
        self.errors.extend(turn.errors)
        return self._outcome(code)

    async def _read_until_the_end(self, ctx: RunContext) -> None:
        assert self.turn is not None
        loop = asyncio.get_running_loop()
        started = last_output = loop.time()
        while True:
            item = await self.turn.next_item(settings.RUN_READ_TIMEOUT)
            now = loop.time()
            if item is None:
                return
            if isinstance(item, LineTimeout):
                if await self._on_idle():
                    last_output = now  # waiting for the user is not idleness
            else:
                last_output = now
                ended = await self._handle_ready(ctx, item)
                await self.inbox.report_deliveries()
                if ended:
                    return
            if self.stop_status is None:
                self._check_limits(now - started, now - last_output)

    async def _handle_ready(self, ctx: RunContext, first: Item) -> bool:
        """Handle ``first`` and every item already waiting behind it as one batch.

        A lone message (the usual, paced case) is flushed at once; a burst shares one
        Redis round trip. Returns True at the end of output.
        """
        assert self.turn is not None
        self._batching = True
        ended = False
        try:
            await self._on_item(ctx, first)
            for _ in range(BATCH_ITEMS - 1):
                item = self.turn.ready_item()
                if item is None:
                    ended = True
                    break
                if isinstance(item, LineTimeout):
                    break
                await self._on_item(ctx, item)
        finally:
            self._batching = False
        await self._flush()
        return ended

    def _check_limits(self, elapsed: float, idle: float) -> None:
        if elapsed > settings.RUN_MAX_DURATION:
            self.request_stop(RunStatus.TIMED_OUT, MSG_MAX_DURATION.format(seconds=settings.RUN_MAX_DURATION))
        elif idle > settings.RUN_IDLE_TIMEOUT:
            self.request_stop(RunStatus.TIMED_OUT, MSG_IDLE.format(seconds=settings.RUN_IDLE_TIMEOUT))

    def _store_output(self) -> None:
        """Start storing the turn's output in the database: the events are final once it has
        ended, and the end's waits (the CLI's exit, the sandbox's, the end snapshot's git)
        leave the loop and the database free meanwhile, so ``done`` no longer waits for a
        long run's whole history to be read back and written (``_stored_through``)."""
        self._output_stored = asyncio.ensure_future(store_events_after(self.run_id, 0))
        # Its failure is handled where it is awaited; an end that never gets there (Redis
        # lost mid-end) must not log it as never retrieved.
        self._output_stored.add_done_callback(lambda task: task.cancelled() or task.exception())

    async def _stored_through(self) -> int:
        """The id up to which ``_store_output`` stored the run's events; 0 when it did not run
        or Redis failed it (everything is then read again)."""
        if self._output_stored is None:
            return 0
        try:
            return await self._output_stored
        except redis.RedisError:
            return 0

    async def _on_idle(self) -> bool:
        """The 2-second read timeout: refresh ownership, look for an unshown question.

        Returns True while a question is waiting for the user.
        """
        await self._flush()  # what a Redis outage held goes out as soon as Redis is back
        self.inbox.wake()  # the safety net for a message whose wake-up was missed
        try:
            await live.set_owner(self.run_id, WORKER_ID, ttl=OWNER_TTL)
            if not self.ask_user:
                return False
            return await askuser.show_waiting_question(self.run_id)
        except redis.RedisError as exc:
            self.writer.outage(exc)  # past REDIS_OUTAGE_SECONDS this ends the run
            return False

    async def _on_item(self, ctx: RunContext, item: Item) -> None:
        if isinstance(item, Garbage):
            await self._on_garbage(item)
            return
        parsed = item.data
        try:
            translated = translate(parsed)
        except ValueError:  # JSON, but not shaped like stream-json
            await self._on_garbage(Garbage(item.line))
            return
        if parsed.get("type") == "system" and parsed.get("subtype") == "init" and parsed.get("session_id"):
            await sync_to_async(_save_session_id)(ctx.conversation.pk, str(parsed["session_id"]))
        for event, data in translated:
            if event == "text_delta":
                data["text"] = self.redactor.feed((data["index"], data["parent_tool_use_id"]), data["text"])
                if not data["text"]:
                    continue
            else:
                await self._emit_held_text()
            if event == "assistant_text":
                data["html"] = await self._render(data["text"])
            if event == "result":
                self.result = data
            await self.emit(event, data)
            if event == "tool_use" and self.ask_user and data.get("name") in askuser.ASK_TOOL_NAMES:
                self.ask_tool_use_ids.add(str(data.get("id")))
            elif event == "tool_result" and data.get("tool_use_id") in self.ask_tool_use_ids:
                self.ask_tool_use_ids.discard(str(data["tool_use_id"]))
                # The verdict must follow the tool result it is about.
                await self._flush()
                await askuser.question_result_seen(run_id=self.run_id, result=data)

    async def _render(self, text: str) -> str:
        """A reply's sanitized HTML, rendered while the event loop serves everyone else."""
        # What came before the reply (its last streamed text, above all) must reach the
        # browser now, not wait in this batch behind the render.
        await self._flush()
        return await markdown.render_markdown_async(text)

    async def _emit_held_text(self) -> None:
        """Release the streamed text held back in case it was the start of a token."""
        for (index, parent), text in self.redactor.flush():
            if text:
                await self.emit("text_delta", {"text": text, "index": index, "parent_tool_use_id": parent})

    async def _on_garbage(self, garbage: Garbage) -> None:
        if garbage.truncated:
            limit = len(garbage.data) // (1024 * 1024)
            await self.emit("error", {"message": MSG_TRUNCATED.format(limit=limit)})
            return
        self.garbage += 1
        preview = garbage.data[:200].decode("utf-8", "replace").strip()
        message = MSG_NOT_JSON.format(preview=preview)
        if len(self.errors) < MAX_GARBAGE_EVENTS:
            self.errors.append(message)
            await self.emit("error", {"message": message})

    def _outcome(self, code: int) -> Outcome:
        assert self.turn is not None
        if self.result is not None and not self.result.get("is_error") and code == 0:
            return Outcome(status=RunStatus.COMPLETED, exit_code=code, result=self.result)
        reasons = list(self.errors)
        if self.result is not None and self.result.get("is_error"):
            reasons.insert(
                0, f"Claude reported an error: {self.result.get('result') or self.result.get('subtype')}"
            )
        if self.result is None:
            reasons.insert(0, MSG_NO_RESULT.format(code=code))
            # Its own reason (bypassPermissions as root, a sandbox it cannot start) is on stderr.
            reason = cli_reason(self.turn.stderr_tail())
            if reason:
                reasons.insert(1, reason)
        return Outcome(
            status=RunStatus.FAILED,
            exit_code=code,
            error="\n".join(reasons),
            stderr=self.turn.stderr_tail().strip(),
            result=self.result or {},
        )

    async def _finish(self, ctx: RunContext, outcome: Outcome) -> None:
        """Stop the turn (which reaps the CLI and kills the relay secrets), then record the
        outcome: the database first, so a Redis outage cannot lose it, then the closing events."""
        if self.turn is not None:
            outcome.exit_code = await self.turn.stop()
        # Before the status is final, so a run seen as ended already has its changes recorded.
        self.changes = await run_changes.record_end(self.run_id)
        await sync_to_async(_record_outcome)(self.run_id, outcome)
        try:
            # The closing events follow what the run still holds, once Redis answers.
            self.emitted.extend(await self.writer.drain())
            await self._close_live(ctx, outcome)
        except redis.RedisError as exc:
            logger.warning("run %s ended while Redis was unreachable: %s", self.run_id, exc)
            # Keep what this worker streamed and what it still held for Redis (the CLI's
            # output during the outage), so the conversation can be shown with nothing lost.
            kept = [*self.emitted, *self.writer.held_events()]
            await sync_to_async(persist_events)(self.run_id, kept)

    async def _close_live(self, ctx: RunContext, outcome: Outcome) -> None:
        await askuser.cards_close_for_run(self.run_id)
        if self.changes:
            await self.emit("changes", self.changes)
        if outcome.error:
            await self.emit("error", {"message": outcome.error, "final": True})
        await self.emit(
            "run_status",
            {
                "status": outcome.status,
                "error": outcome.error,
                "cost_usd": (outcome.result or {}).get("cost_usd"),
                "duration_ms": (outcome.result or {}).get("duration_ms"),
            },
        )
        # What the turn never read goes on as the conversation's next prompt.
        await self.inbox.close(status=outcome.status, error=outcome.error)
        # Persisted before "done", so a client that saw "done" finds the history stored;
        # only the "done" row itself follows a moment later.
        stored = await store_events_after(self.run_id, await self._stored_through())
        await self.emit("done", {"status": outcome.status})
        await store_events_after(self.run_id, stored)
        await events.expire_stream(self.run_id, settings.EVENT_STREAM_TTL)
        await askuser.forget_questions(self.run_id)
        await live.clear_control(self.run_id)
        await live.release_run_slots([self.run_id], ctx.run.user_id)


async def claim(run_id: int) -> bool:
    """Take a run delivered by the queue: its lease (``SET NX EX``), then QUEUED -> RUNNING
    (a compare-and-set on its row). False for a delivery that must not run: another worker
    holds the lease, or the run started or ended already (the queue delivers at least once)."""
    if not await live.claim_owner(run_id, WORKER_ID, ttl=OWNER_TTL):
        return False
    try:
        started = await sync_to_async(run_state.run_mark_started)(run_id)
    except run_state.IllegalTransition:
        started = False
    except BaseException:
        with contextlib.suppress(redis.RedisError):
            await live.release_owner(run_id, WORKER_ID)
        raise
    if not started:
        # Its lease lapsed and the sweep fails it; holding the key would hide that.
        await live.release_owner(run_id, WORKER_ID)
    return started


async def supervise(run_id: int) -> bool:
    """What the run queue's actor does, on this worker's run loop: claim the run and
    supervise it to the end. False, having done nothing, for a duplicate delivery."""
    if not await claim(run_id):
        logger.warning(MSG_DUPLICATE, run_id)
        return False
    task = launch(run_id)
    try:
        # Not ``await task``: a run stopped by the shutdown is over, not an error to retry.
        await asyncio.wait({task})
    except asyncio.CancelledError:
        # The actor itself was stopped (past its time limit): the run stops with it.
        task.cancel()
        await asyncio.wait({task}, timeout=STOP_TIMEOUT)
        raise
    return True


def launch(run_id: int) -> asyncio.Task[None]:
    """Start supervising a run in this worker's event loop (claimed: ``supervise``)."""
    # A fresh context: the run outlives the request that starts it, and must not inherit
    # asgiref's executor of that request's sync thread (it quits when the request ends).
    task = asyncio.get_running_loop().create_task(
        RunSupervisor(run_id).execute(), name=f"run-{run_id}", context=contextvars.Context()
    )
    _tasks[run_id] = task
    task.add_done_callback(lambda _t: _tasks.pop(run_id, None))
    return task


def active_tasks() -> dict[int, asyncio.Task[None]]:
    return dict(_tasks)


async def shutdown_all(timeout: float = 20.0) -> list[int]:
    """Server shutdown: stop every run this worker owns and wait for their clean-up;
    returns the ids of the runs it stopped."""
    stopped = list(_tasks)
    tasks = list(_tasks.values())
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=timeout)
    markdown.stop_renderer()
    askuser.warm_server_stop()
    return stopped
