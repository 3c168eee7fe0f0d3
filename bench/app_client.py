"""Talking to the app as a browser does: a session with CSRF, starting runs, reading SSE."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import httpx

from bench import harness


async def login(app_url: str) -> httpx.AsyncClient:
    """An httpx client with a real session cookie and the CSRF header, as a browser has."""
    client = httpx.AsyncClient(base_url=app_url, trust_env=False, timeout=30)
    await client.get("/accounts/login/")
    response = await client.post(
        "/accounts/login/",
        data={
            "username": harness.USERNAME,
            "password": harness.PASSWORD,
            "csrfmiddlewaretoken": client.cookies.get("csrftoken"),
        },
        headers={"Referer": f"{app_url}/accounts/login/"},
    )
    if response.status_code != 302:
        await client.aclose()
        raise RuntimeError(f"login failed: HTTP {response.status_code}")
    client.headers["X-CSRFToken"] = client.cookies.get("csrftoken") or ""
    client.headers["Referer"] = f"{app_url}/"
    return client


def cookie_header(client: httpx.AsyncClient) -> str:
    """The ``Cookie`` header's value for a raw request with ``client``'s session (``login``)."""
    return "; ".join(f"{name}={value}" for name, value in client.cookies.items())


class Clicks:
    """A person's clicks (an answer, a decision) as JSON posts on one kept-alive socket, with
    the session cookie and CSRF header of ``login``'s client, as a browser's ``fetch`` sends them.

    A browser's HTTP client is native code. httpx's own Python costs this 2-core machine
    about 1.5 ms of every round trip (askuser_latency's "client share" rows), which a
    figure that starts as the click leaves would count against the app. Here nothing but
    building the bytes lies between the caller's stamp and the socket, and the reply is
    read as it arrives.
    """

    # uvicorn closes a connection idle for 5 s (its --timeout-keep-alive): reconnect before.
    IDLE_SECONDS = 4.0

    def __init__(self, app_url: str, client: httpx.AsyncClient) -> None:
        self.host, port = app_url.removeprefix("http://").split(":")
        self.port = int(port)
        self.headers = (
            f"Host: {self.host}:{self.port}\r\nCookie: {cookie_header(client)}\r\n"
            f"X-CSRFToken: {client.headers['X-CSRFToken']}\r\nReferer: {client.headers['Referer']}\r\n"
            "Content-Type: application/json\r\n"
        )
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.last_used = 0.0

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        """``POST path`` with ``body`` as JSON: the status and the reply's body."""
        if (
            self.streams is None
            or self.streams[0].at_eof()
            or time.monotonic() - self.last_used > self.IDLE_SECONDS
        ):
            await self.aclose()
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        payload = json.dumps(body).encode()
        writer.write(
            f"POST {path} HTTP/1.1\r\n{self.headers}Content-Length: {len(payload)}\r\n\r\n".encode() + payload
        )
        head = await reader.readuntil(b"\r\n\r\n")
        self.last_used = time.monotonic()
        status_line, *lines = head.decode("latin-1").split("\r\n")
        fields = dict(line.lower().split(": ", 1) for line in lines if ": " in line)
        if "content-length" not in fields:
            raise RuntimeError(f"{path}: a reply without Content-Length: {head[:300]!r}")
        reply = await reader.readexactly(int(fields["content-length"]))
        if fields.get("connection") == "close":
            await self.aclose()
        return int(status_line.split(" ", 2)[1]), reply

    async def aclose(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


class ClickSocket:
    """A person's clicks over the page's click channel (``askuser.clicks``), as the chat page
    sends them: one WebSocket opened with the session cookie and the page's ``Origin``, one
    text frame per click, its reply read as it arrives.

    A browser's WebSocket is native code; as with ``Clicks``, nothing but building the
    frame lies between the caller's stamp and the socket (a client frame is masked, RFC 6455
    5.3; a server's is not).
    """

    def __init__(self, app_url: str, client: httpx.AsyncClient) -> None:
        self.host, port = app_url.removeprefix("http://").split(":")
        self.port = int(port)
        self.origin = app_url
        self.cookie = cookie_header(client)
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.next_id = 0

    async def connect(self, path: str = "/api/askuser/clicks") -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: {self.origin}\r\nCookie: {self.cookie}\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            writer.close()
            raise RuntimeError(f"the click channel refused the handshake: {head[:300]!r}")
        self.streams = (reader, writer)

    async def click(self, kind: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One click: the reply's status and body."""
        if self.streams is None:
            await self.connect()
        assert self.streams is not None
        reader, writer = self.streams
        self.next_id += 1
        payload = json.dumps({"id": self.next_id, "kind": kind, "body": body}).encode()
        mask = os.urandom(4)
        length = len(payload)
        header = bytes([0x81]) + (
            bytes([0x80 | length]) if length < 126 else bytes([0x80 | 126]) + length.to_bytes(2, "big")
        )
        masked = (
            int.from_bytes(payload, "big") ^ int.from_bytes((mask * (length // 4 + 1))[:length], "big")
        ).to_bytes(length, "big")
        writer.write(header + mask + masked)
        while True:
            first, second = await reader.readexactly(2)
            size = second & 0x7F
            if size == 126:
                size = int.from_bytes(await reader.readexactly(2), "big")
            elif size == 127:
                size = int.from_bytes(await reader.readexactly(8), "big")
            data = await reader.readexactly(size)
            if first & 0x0F == 0x8:
                raise RuntimeError(f"the click channel closed: {data[:2].hex()} {data[2:]!r}")
            if first & 0x0F == 0x1:
                reply = json.loads(data)
                if reply["id"] == self.next_id:
                    return int(reply["status"]), reply["body"]

    async def aclose(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


async def start_run(
    client: httpx.AsyncClient, project_id: int, prompt: str, conversation_id: int | None = None
) -> str:
    """``POST /api/projects/{id}/runs`` (in a new conversation, or ``conversation_id``);
    returns the run's events URL."""
    body: dict[str, Any] = {"prompt": prompt}
    if conversation_id is not None:
        body["conversation_id"] = conversation_id
    response = await client.post(f"/api/projects/{project_id}/runs", json=body)
    if response.status_code != 201:
        raise RuntimeError(f"starting a run failed: HTTP {response.status_code} {response.text[:300]}")
    return str(response.json()["events_url"])


async def run_error(client: httpx.AsyncClient, events_url: str) -> str:
    """Why a run did not complete, for the benchmark's error message."""
    response = await client.get(events_url.removesuffix("/events"))
    body = response.json() if response.status_code == 200 else {}
    return f"status {body.get('status')!r}: {str(body.get('error') or response.text)[:1500]}"


@dataclass(frozen=True)
class SSEEvent:
    id: int
    event: str
    data: Any
    ts_ns: int  # when the bytes that completed this event arrived
    size: int  # bytes of the event on the wire


class SSEParser:
    """Incremental SSE parsing: feed chunks as they arrived, get the events they completed."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, chunk: bytes, ts_ns: int) -> list[SSEEvent]:
        *blocks, self.pending = (self.pending + chunk).split(b"\n\n")
        events = []
        for block in blocks:
            fields: dict[str, str] = {}
            for line in block.decode().split("\n"):
                if line and not line.startswith(":"):
                    key, _, value = line.partition(":")
                    fields[key] = value.removeprefix(" ")
            if "event" in fields:
                data = json.loads(fields.get("data", "null"))
                events.append(SSEEvent(int(fields["id"]), fields["event"], data, ts_ns, len(block) + 2))
        return events


async def sse_events(
    client: httpx.AsyncClient, url: str, *, timeout: float = 120
) -> AsyncGenerator[SSEEvent, None]:
    """Parse the stream as it arrives, stamping each event with its arrival time."""
    async with client.stream("GET", url, timeout=httpx.Timeout(timeout, read=timeout)) as response:
        if response.status_code != 200:
            raise RuntimeError(f"SSE: HTTP {response.status_code}")
        parser = SSEParser()
        async for chunk in response.aiter_raw():
            for event in parser.feed(chunk, harness.now_ns()):
                yield event


async def sse_record(client: httpx.AsyncClient, url: str, *, timeout: float = 120) -> list[SSEEvent]:
    """Read the stream to its end (the app closes it after ``done``) doing nothing but keep
    each chunk and its arrival time, then parse: like the direct baseline's reader, the
    consumer's own parsing stays off the clock and off the CPU the app is measured on."""
    received: list[tuple[int, bytes]] = []
    async with client.stream("GET", url, timeout=httpx.Timeout(timeout, read=timeout)) as response:
        if response.status_code != 200:
            raise RuntimeError(f"SSE: HTTP {response.status_code}")
        async for chunk in response.aiter_raw():
            received.append((harness.now_ns(), chunk))
    parser = SSEParser()
    return [event for ts, chunk in received for event in parser.feed(chunk, ts)]


def script_prompt(steps: list[dict[str, Any]]) -> str:
    """A prompt that makes the scripted model play these steps."""
    return "SCRIPT: " + json.dumps(steps)
