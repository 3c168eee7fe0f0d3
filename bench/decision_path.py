"""Where a person's decision spends its time inside the app, before the waiting tool call wakes.

Run: ``.venv/bin/python bench/decision_path.py [--rounds 200]``.

In this process, against a private SQLite file and the real Redis (``harness.Stack``), a
permission request is made, a waiting side parks in ``permission_wait`` exactly as
poll-decision and the SDK engine do, and ``POST /api/askuser/submit-decision`` goes
through Django's async handler (``AsyncClient``: the path uvicorn takes, without the
socket). Stamps split it into: the middleware and the CSRF check before the view; the
decision written (the session and the person are loaded in that same step, since
``askuser.api.ClickAuth``); and from there both the push to Redis returning and the
waiting side running again (Redis wakes it before the pusher reads its own reply); then the whole
request, to its acknowledgement (which does not wait for the push's reply; the rule and the
run's status come after it), and the CPU it took in this process (every thread).

The same rounds run with this app's middleware (``core.middleware``) and with Django's
stock classes, which hand every step to a thread, so the difference is measured in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
from bench.report import LATENCY_HEADERS, latency_row, table  # noqa: E402

STOCK_MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
STEPS = (
    "-> view",
    "-> decision written",
    "written -> push returns",
    "written -> waiting side runs",
    "whole request",
    "CPU of the request",
)


def _instrument(marks: dict[str, int]) -> None:
    """Stamp the steps by wrapping the functions the request passes through (this process only)."""
    from askuser import approvals, live

    def timed_sync(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            marks[name] = time.perf_counter_ns()
            return result

        return wrapper

    # A decision's hand-off is the unless-taken kind (approvals.permission_decide).
    decide, push = approvals.permission_decide, live.answer_replace_unless_taken

    async def timed_decide(**kwargs: Any) -> Any:
        marks["view"] = time.perf_counter_ns()
        return await decide(**kwargs)

    async def timed_push(*args: Any, **kwargs: Any) -> bool:
        handed = await push(*args, **kwargs)
        marks["pushed"] = time.perf_counter_ns()
        return handed

    approvals._decide = timed_sync("written", approvals._decide)
    approvals.permission_decide = timed_decide
    live.answer_replace_unless_taken = timed_push


async def _rounds(
    rounds: int, run_id: int, user: Any, marks: dict[str, int], over_channel: bool = False
) -> dict[str, list[float]]:
    from asgiref.sync import sync_to_async
    from django.test import AsyncClient

    from askuser import approvals, permission_asking
    from askuser.models import QuestionSource
    from promptmgr import live
    from promptmgr.runner import WORKER_ID

    client = AsyncClient()
    await sync_to_async(client.force_login)(user)
    channel = ChannelClient(client.cookies["sessionid"].value) if over_channel else None
    # Owned by this process, as a supervised run is: a decision for a run nobody owns fails it.
    await live.set_owner(run_id, WORKER_ID, ttl=600)
    samples: dict[str, list[float]] = {step: [] for step in STEPS}
    warm_up = 10
    for index in range(rounds + warm_up):
        # Keyed as the MCP server keys every relay-permission (its Idempotency-Key).
        created = await permission_asking.permission_request_create(
            run_id=run_id,
            source=QuestionSource.MCP,
            tool_name="Bash",
            tool_input={"command": f"echo {index}"},
            tool_use_id=f"toolu_{index}",
            call_key=f"call-{index}",
        )
        request_id = created["request_id"]

        async def wait(request_id: str = request_id) -> int:
            await approvals.permission_wait(run_id=run_id, request_id=request_id, wait_seconds=10)
            return time.perf_counter_ns()

        waiter = asyncio.create_task(wait())
        await asyncio.sleep(0.005)  # parked, as a poll is when a person clicks
        marks.pop("pushed", None)
        start, cpu = time.perf_counter_ns(), time.process_time_ns()
        body = {"request_id": request_id, "decision": "allow"}
        if channel is not None:
            status, reply = await channel.post("decision", body)
        else:
            response = await client.post(
                "/api/askuser/submit-decision", body, content_type="application/json"
            )
            status, reply = response.status_code, response.content
        end, cpu = time.perf_counter_ns(), time.process_time_ns() - cpu
        woken = await waiter
        # The push's reply is read by the decision's work after its acknowledgement
        # (approvals.permission_decide), which may come after the waiting side ran.
        async with asyncio.timeout(5):
            while "pushed" not in marks:
                await asyncio.sleep(0.001)
        if status != 200:
            raise RuntimeError(f"submit-decision answered {status}: {str(reply)[:300]}")
        if index < warm_up:
            continue
        # The waiting side often runs before the push's own reply is read (Redis wakes it
        # first), so both are timed from the written decision, not one after the other.
        spans = [
            (start, marks["view"]),
            (marks["view"], marks["written"]),
            (marks["written"], marks["pushed"]),
            (marks["written"], woken),
        ]
        for step, (before, after) in zip(STEPS, spans, strict=False):
            samples[step].append((after - before) / 1e6)
        samples["whole request"].append((end - start) / 1e6)
        samples["CPU of the request"].append(cpu / 1e6)
    if channel is not None:
        await channel.aclose()
    return samples


class ChannelClient:
    """``askuser.clicks.serve`` driven in this process, as uvicorn drives it for the page's
    click channel without the socket: ``post`` sends one click and waits for its reply."""

    def __init__(self, session_key: str) -> None:
        from askuser import clicks
        from promptmgr.request_threads import PooledThreadHandler

        self.incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.outgoing: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.next_id = 0
        scope = {
            "type": "websocket",
            "path": clicks.PATH,
            "scheme": "ws",
            "server": ("testserver", 80),
            "client": ("127.0.0.1", 5000),
            "headers": [
                (b"host", b"testserver"),
                (b"origin", b"http://testserver"),
                (b"cookie", f"sessionid={session_key}".encode()),
            ],
        }
        self.incoming.put_nowait({"type": "websocket.connect"})
        handler = PooledThreadHandler(2)
        self.task = asyncio.create_task(
            clicks.serve(scope, self.incoming.get, self.outgoing.put, handler.borrowed_thread)
        )

    async def post(self, kind: str, body: dict[str, Any]) -> tuple[int, Any]:
        if self.next_id == 0:
            accepted = await self.outgoing.get()
            if accepted["type"] != "websocket.accept":
                raise RuntimeError(f"the click channel refused: {accepted}")
        self.next_id += 1
        self.incoming.put_nowait(
            {
                "type": "websocket.receive",
                "text": json.dumps({"id": self.next_id, "kind": kind, "body": body}),
            }
        )
        reply = json.loads((await self.outgoing.get())["text"])
        return int(reply["status"]), reply["body"]

    async def aclose(self) -> None:
        self.incoming.put_nowait({"type": "websocket.disconnect", "code": 1000})
        await self.task


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    print(f"Decision path on {harness.machine()} …")
    with harness.Stack.create(name="decision", ask_user=True) as stack:
        from django.conf import settings

        from promptmgr.models import Conversation, Run, RunStatus

        settings.ALLOWED_HOSTS = ["testserver"]  # the test client's host; no socket is opened
        project = stack.project()
        project.permission_mode = "default"
        project.save()
        user = project.owner
        marks: dict[str, int] = {}
        _instrument(marks)
        ours = list(settings.MIDDLEWARE)
        for label, middleware, over_channel in (
            ("the page's click channel", ours, True),
            ("core.middleware", ours, False),
            ("Django's stock middleware", STOCK_MIDDLEWARE, False),
        ):
            settings.MIDDLEWARE = middleware
            conversation = Conversation.objects.create(project=project, user=user)
            run = Run.objects.create(
                conversation=conversation, user=user, prompt="bench", status=RunStatus.RUNNING
            )
            samples = asyncio.run(_rounds(args.rounds, run.pk, user, marks, over_channel))
            rows = [latency_row(step, samples[step]) for step in STEPS]
            print(table(LATENCY_HEADERS, rows, title=f"\na decision in-process, {label} (ms)"))
        settings.MIDDLEWARE = ours
    print(f"\nFinished on {harness.machine()}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
