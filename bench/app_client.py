"""Talking to the app as a browser does: a session with CSRF, starting runs, reading SSE."""

from __future__ import annotations

import json
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


async def start_run(client: httpx.AsyncClient, project_id: int, prompt: str) -> str:
    """``POST /api/projects/{id}/runs``; returns the run's events URL."""
    response = await client.post(f"/api/projects/{project_id}/runs", json={"prompt": prompt})
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


async def sse_events(
    client: httpx.AsyncClient, url: str, *, timeout: float = 120
) -> AsyncGenerator[SSEEvent, None]:
    """Parse the stream as it arrives, stamping each event with its arrival time."""
    async with client.stream("GET", url, timeout=httpx.Timeout(timeout, read=timeout)) as response:
        if response.status_code != 200:
            raise RuntimeError(f"SSE: HTTP {response.status_code}")
        pending = b""
        async for chunk in response.aiter_raw():
            ts = harness.now_ns()
            *blocks, pending = (pending + chunk).split(b"\n\n")
            for block in blocks:
                fields: dict[str, str] = {}
                for line in block.decode().split("\n"):
                    if line and not line.startswith(":"):
                        key, _, value = line.partition(":")
                        fields[key] = value.removeprefix(" ")
                if "event" in fields:
                    data = json.loads(fields.get("data", "null"))
                    yield SSEEvent(int(fields["id"]), fields["event"], data, ts, len(block) + 2)


def script_prompt(steps: list[dict[str, Any]]) -> str:
    """A prompt that makes the scripted model play these steps."""
    return "SCRIPT: " + json.dumps(steps)
