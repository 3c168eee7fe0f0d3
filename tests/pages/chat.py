"""Plain helpers for driving the chat page in tests."""

from __future__ import annotations

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
