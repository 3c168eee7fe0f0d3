"""ASGI app that speaks the Anthropic Messages API the way the Claude Code CLI calls it."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .scenarios import Reply, next_reply
from .structured import is_structured, structured_text

MODEL_NAME = "scripted-demo-model"


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or []


def _usage(body: dict[str, Any], reply: Reply) -> dict[str, int]:
    return {
        "input_tokens": max(1, len(json.dumps(body.get("messages", []))) // 4),
        "output_tokens": max(1, len(reply.text) // 4),
    }


def _message(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    """The non-streaming form of a reply."""
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    if reply.tool_use:
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:24]}",
                "name": reply.tool_use.name,
                "input": reply.tool_use.input,
            }
        )
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", MODEL_NAME),
        "content": content,
        "stop_reason": "tool_use" if reply.tool_use else "end_turn",
        "stop_sequence": None,
        "usage": _usage(body, reply),
    }


async def _stream(
    body: dict[str, Any], reply: Reply, pace_ms: float, chunk_chars: int
) -> AsyncIterator[bytes]:
    message = _message(body, reply)
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": usage["input_tokens"], "output_tokens": 1}
    yield _sse("message_start", {"type": "message_start", "message": start})
    index = 0
    if reply.text:
        yield _sse(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
        )
        for piece in _chunks(reply.text, chunk_chars):
            if pace_ms:
                await asyncio.sleep(pace_ms / 1000)
            yield _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": piece},
                },
            )
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    if reply.tool_use:
        block = message["content"][-1]
        yield _sse(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}},
        )
        yield _sse(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
            },
        )
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


def create_app(*, pace_ms: float = 0.0, chunk_chars: int = 16, log_size: int = 200) -> Starlette:
    """Build the app. ``pace_ms`` is the pause before each text chunk (benchmarks set it)."""
    received: deque[dict[str, Any]] = deque(maxlen=log_size)

    async def messages(request: Request) -> Response:
        body = await request.json()
        received.append(body)
        # A structured-output request (the answering-by-policy agent's) gets its JSON as text.
        reply = Reply(text=structured_text(body)) if is_structured(body) else next_reply(body)
        if not body.get("stream"):
            return JSONResponse(_message(body, reply))
        pace = reply.pace_ms if reply.pace_ms is not None else pace_ms
        size = reply.chunk_chars or chunk_chars
        return StreamingResponse(
            _stream(body, reply, pace, size),
            media_type="text/event-stream",
            headers={"request-id": f"req_{uuid.uuid4().hex[:16]}"},
        )

    async def count_tokens(request: Request) -> Response:
        body = await request.json()
        return JSONResponse({"input_tokens": max(1, len(json.dumps(body)) // 4)})

    async def requests_log(request: Request) -> Response:
        # Tests read what the model was sent, e.g. to prove an answer reached it.
        return JSONResponse(list(received))

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True, "model": MODEL_NAME})

    return Starlette(
        routes=[
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/_scripted/requests", requests_log, methods=["GET"]),
            Route("/_scripted/health", health, methods=["GET"]),
        ]
    )
