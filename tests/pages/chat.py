"""Plain helpers for driving the chat page in tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from playwright.sync_api import expect

PROMPT = "#chat-prompt"

OpenChat = Callable[[Any], Any]


def send_prompt(page: Any, text: str) -> None:
    page.fill(PROMPT, text)
    page.press(PROMPT, "Enter")


def wait_until_the_run_ended(page: Any) -> None:
    """The run is over, not only its last words shown: a message sent before then goes into
    the running turn (issue 20), not into a next run of the conversation."""
    expect(page.locator("[data-role=status]")).to_have_text("Completed")


def last_reply(page: Any) -> Any:
    """Claude's last complete (Markdown-rendered) text block."""
    return page.locator(".msg-claude .msg-text.markdown").last


# Installed before the page loads (page.add_init_script). The real server's events still
# arrive, but everything after the first ask_user_answered is held back until
# window.__releaseEvents(): what the card shows between the answer and Claude going on
# stays on screen for as long as the test looks. window.__injectEvent delivers an event
# the server cannot be made to send on cue.
HOLD_EVENTS_AFTER_ANSWER = """
(() => {
  const Native = window.EventSource;
  const latest = {};
  let armed = true;
  let holding = false;
  window.__heldEvents = [];
  window.__releaseEvents = () => {
    holding = false;
    for (const held of window.__heldEvents.splice(0)) held.deliver();
  };
  window.__injectEvent = (type, data) => {
    latest[type](new MessageEvent(type, { data: JSON.stringify(data), lastEventId: "" }));
  };
  window.EventSource = class extends Native {
    addEventListener(type, listener, options) {
      if (type === "open" || type === "error") return super.addEventListener(type, listener, options);
      latest[type] = (message) => listener.call(this, message);
      return super.addEventListener(type, (message) => {
        if (holding) {
          window.__heldEvents.push({ type, deliver: () => listener.call(this, message) });
          return;
        }
        listener.call(this, message);
        if (armed && type === "ask_user_answered") {
          armed = false;
          holding = true;
        }
      }, options);
    }
  };
})();
"""


def wait_until_claude_went_on(page: Any) -> None:
    """Claude got the answer and went on: its tool result is among the held-back events."""
    # A function, not an expression string: Playwright evals a string, which the CSP forbids.
    page.wait_for_function("() => window.__heldEvents.some((held) => held.type === 'tool_result')")


def release_events(page: Any) -> None:
    page.evaluate("window.__releaseEvents()")


# Both ways a click leaves the page: the click channel (a WebSocket) and its POST endpoint.
CLICKS_URL = "**/api/askuser/clicks"
ENDPOINTS = {"answer": "**/api/askuser/submit-answer", "decision": "**/api/askuser/submit-decision"}


class StubClicks:
    """Stands in for the server on both ways a card's click can leave the page (the click
    channel and, when the channel is not open, the endpoint): records each body and the way it
    came, and replies with ``reply(body) -> (status, body)``, as the server would on either.

    With ``channel=False`` the channel's socket is closed as soon as it opens, so every click
    takes its endpoint. The page opens its channel as it loads, so the stubs are installed
    and the page reloaded (before anything else happens on it).
    """

    def __init__(
        self,
        page: Any,
        kind: str,
        reply: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]],
        *,
        channel: bool = True,
    ) -> None:
        self.page = page
        self.kind = kind
        self.reply = reply
        self.bodies: list[dict[str, Any]] = []
        self.ways: list[str] = []
        self.headers: list[dict[str, str]] = []
        page.route(ENDPOINTS[kind], self._endpoint)
        page.route_web_socket(CLICKS_URL, self._channel if channel else lambda socket: socket.close())
        page.reload()

    def _endpoint(self, route: Any) -> None:
        body = json.loads(route.request.post_data or "null")
        self.bodies.append(body)
        self.ways.append("endpoint")
        self.headers.append(route.request.all_headers())
        status, answer = self.reply(body)
        route.fulfill(status=status, content_type="application/json", body=json.dumps(answer))

    def _channel(self, socket: Any) -> None:
        def received(message: str | bytes) -> None:
            click = json.loads(message)
            if click["kind"] != self.kind:  # a click of the other kind: not this stub's to answer
                socket.send(json.dumps({"id": click["id"], "status": 503, "body": {"detail": "not stubbed"}}))
                return
            self.bodies.append(click["body"])
            self.ways.append("channel")
            status, answer = self.reply(click["body"])
            socket.send(json.dumps({"id": click["id"], "status": status, "body": answer}))

        socket.on_message(received)

    def wait_for(self, count: int) -> None:
        """Until ``count`` clicks have arrived (the page's events run while it waits)."""
        for _ in range(200):
            if len(self.bodies) >= count:
                return
            self.page.wait_for_timeout(50)
        raise AssertionError(f"{len(self.bodies)} clicks arrived, not {count}")
