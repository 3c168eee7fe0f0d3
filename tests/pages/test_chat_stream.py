"""The chat page's event stream (static/js/chat/stream.js) when the connection drops mid-run."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from promptmgr.models import Run
from tests.helpers import make_project, script
from tests.pages.chat import OpenChat, last_reply, send_prompt

pytestmark = pytest.mark.browser

TEXT = "Streamed in pieces, shown once."


def event_ids(body: str) -> list[int]:
    return [int(i) for i in re.findall(r"^id: (\d+)$", body, re.MULTILINE)]


class EventRequests:
    """The events requests as Chromium put them on the wire.

    Playwright's request and route objects leave out the Last-Event-ID header EventSource
    adds when it reconnects; the DevTools protocol's on-the-wire headers include it.
    """

    def __init__(self, page: Any) -> None:
        self.urls: dict[str, str] = {}
        self.headers: dict[str, dict[str, str]] = {}
        cdp = page.context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.on("Network.requestWillBeSent", self._sent)
        cdp.on("Network.requestWillBeSentExtraInfo", self._wire_headers)

    def _sent(self, event: dict[str, Any]) -> None:
        if "/events" in event["request"]["url"]:
            self.urls[event["requestId"]] = event["request"]["url"]

    def _wire_headers(self, event: dict[str, Any]) -> None:
        self.headers[event["requestId"]] = {k.lower(): v for k, v in event["headers"].items()}

    def resumed_from(self) -> list[int | None]:
        """Per request, in order: the event id it asked to resume after, if any."""
        found: list[int | None] = []
        for request_id, url in self.urls.items():
            header = self.headers.get(request_id, {}).get("last-event-id")
            query = parse_qs(urlsplit(url).query).get("last_event_id", [None])[0]
            value = header or query
            found.append(int(value) if value else None)
        return found


def test_a_cut_stream_reconnects_from_the_last_event_id_the_page_had(open_chat: OpenChat, alice: Any) -> None:
    project = make_project(owner=alice)
    page = open_chat(project)
    requests = EventRequests(page)
    connections: list[str] = []
    delivered: list[int] = []

    def cut_the_first_connection(route: Any) -> None:
        connections.append(route.request.url)
        if len(connections) > 1:
            route.continue_()
            return
        # The run so far, cut after some streamed text: the page gets events 1..N only.
        blocks = route.fetch(headers={"Accept": "text/event-stream"}).text().split("\n\n")
        first_delta = next(i for i, b in enumerate(blocks) if "event: text_delta" in b)
        body = "\n\n".join(blocks[: first_delta + 2]) + "\n\n"
        delivered.extend(event_ids(body))
        route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body=body)

    page.route("**/api/runs/*/events*", cut_the_first_connection)
    send_prompt(page, script({"text": TEXT, "chunk_chars": 4}))

    expect(page.locator(".run-footer .status-chip")).to_have_text("Completed", timeout=30_000)
    last_seen = max(delivered)
    assert last_seen > 0
    assert requests.resumed_from() == [None, last_seen]
    expect(page.locator(".msg-user")).to_have_count(1)
    expect(page.locator(".run-meta")).to_have_count(1)
    expect(page.locator(".msg-claude")).to_have_count(1)
    expect(last_reply(page)).to_have_text(TEXT)
    assert Run.objects.get(conversation__project=project).status == "completed"
