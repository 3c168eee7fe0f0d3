"""A real HTTP stand-in for PromptManager's relay endpoints (questions and permissions), plus config helpers.

``FakeRelay`` is a small Starlette app served by uvicorn on 127.0.0.1 in a background thread, so
the MCP server's HTTP client (in-process or in a subprocess) talks real HTTP to it. Tests script
its replies and inspect the requests it received.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mcp_server.config import AskUserConfig

RELAY_TOKEN = "relay-secret-7c1e4b9a-do-not-leak"
STREAM_TOKEN = "3f2a9c4e-5b6d-4e7f-8a9b-0c1d2e3f4a5b"
QUESTION_ID = "9b2f0d7e-1111-4c2a-9d3e-5f6a7b8c9d0e"
REQUEST_ID = "4e8a1c2b-2222-4d3e-8f9a-0b1c2d3e4f5a"


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any] | None = None
    # Seconds to hold the request first, like the real long-poll does.
    delay: float = 0.0
    # The connection dies mid-reply (a web process restarting): the client reads a
    # broken body, after the server did whatever the request asked.
    cut: bool = False


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    url: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def relayed(timeout: int = 300) -> Reply:
    return Reply(201, {"question_id": QUESTION_ID, "expires_at": "2030-01-01T00:00:00Z", "timeout": timeout})


def waiting(delay: float = 0.0) -> Reply:
    return Reply(202, {"status": "waiting"}, delay)


def answered(
    labels: list[str] | None = None, other: str | None = None, notes: str | None = None, answer: str = ""
) -> Reply:
    body = {
        "status": "answered",
        "answer": answer or ", ".join(labels or []) or other or "",
        "selectedOptions": list(range(len(labels or []))),
        "selectedLabels": labels or [],
        "otherText": other,
        "notes": notes,
    }
    return Reply(200, body)


def permission_relayed(timeout: int = 300) -> Reply:
    return Reply(201, {"request_id": REQUEST_ID, "expires_at": "2030-01-01T00:00:00Z", "timeout": timeout})


def decided(result: dict[str, Any]) -> Reply:
    """poll-decision's 200: ``result`` is the permission result the MCP server hands to the CLI."""
    return Reply(200, {"status": "decided", "result": result})


@dataclass
class FakeRelay:
    """Replies are consumed in order; the last one repeats."""

    question_replies: list[Reply] = field(default_factory=lambda: [relayed()])
    poll_replies: list[Reply] = field(default_factory=lambda: [waiting()])
    permission_replies: list[Reply] = field(default_factory=lambda: [permission_relayed()])
    decision_replies: list[Reply] = field(default_factory=lambda: [waiting()])
    received: list[Received] = field(default_factory=list)
    port: int = 0
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests_to(self, path_end: str) -> list[Received]:
        return [r for r in self.received if r.path.endswith(path_end)]

    async def _handle(self, request: Request, replies: list[Reply]) -> Response:
        self.received.append(
            Received(
                method=request.method,
                path=request.url.path,
                url=str(request.url),
                query=dict(request.query_params),
                headers={k.lower(): v for k, v in request.headers.items()},
                body=await request.body(),
            )
        )
        reply = replies.pop(0) if len(replies) > 1 else replies[0]
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.cut:
            return StreamingResponse(_cut_off(), status_code=reply.status, media_type="application/json")
        return JSONResponse(reply.body, status_code=reply.status)

    async def _relay_question(self, request: Request) -> Response:
        return await self._handle(request, self.question_replies)

    async def _poll_answer(self, request: Request) -> Response:
        return await self._handle(request, self.poll_replies)

    async def _relay_permission(self, request: Request) -> Response:
        return await self._handle(request, self.permission_replies)

    async def _poll_decision(self, request: Request) -> Response:
        return await self._handle(request, self.decision_replies)

    def start(self, port: int = 0) -> None:
        app = Starlette(
            routes=[
                Route("/api/askuser/relay-question", self._relay_question, methods=["POST"]),
                Route("/api/askuser/poll-answer", self._poll_answer, methods=["GET"]),
                Route("/api/askuser/relay-permission", self._relay_permission, methods=["POST"]),
                Route("/api/askuser/poll-decision", self._poll_decision, methods=["GET"]),
            ]
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the fake relay did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)


async def _cut_off() -> AsyncIterator[bytes]:
    yield b'{"question_id": '
    raise ConnectionResetError("the fake relay cut the reply off")


def free_port() -> int:
    """A port nothing listens on (for connection-refused tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_config(api_url: str, timeout: int = 300) -> AskUserConfig:
    return AskUserConfig(
        api_url=api_url,
        stream_token=STREAM_TOKEN,
        relay_token=RELAY_TOKEN,
        project_id=1,
        run_id=5,
        timeout=timeout,
    )


def config_data(api_url: str = "http://127.0.0.1:8000", **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "apiUrl": api_url,
        "streamToken": STREAM_TOKEN,
        "relayToken": RELAY_TOKEN,
        "projectId": 1,
        "runId": 5,
        "timeout": 300,
    }
    data.update(overrides)
    return data
