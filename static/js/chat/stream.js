// One run's Server-Sent Events: named events in id order, resumed after any disconnect.

export const EVENT_NAMES = [
  "prompt",
  "run_status",
  "session",
  "text_delta",
  "assistant_text",
  "tool_use",
  "tool_result",
  "tool_progress",
  "result",
  "error",
  "ask_user_question",
  "ask_user_answered",
  "ask_user_expired",
  "ask_user_delivered",
  "permission_request",
  "permission_decided",
  "permission_expired",
  "changes",
  "policy_decision",
  "user_message",
  "user_message_delivered",
  "user_message_undelivered",
  "done",
];

const MAX_BACKOFF_MS = 15000;

/**
 * Follows a run's events until "done".
 *
 * EventSource reconnects by itself (sending Last-Event-ID) after a dropped connection; when
 * it gives up (readyState CLOSED, e.g. the server answered 502 while restarting) we reopen
 * it ourselves with ?last_event_id= so nothing is missed. The caller deduplicates by id.
 */
export class RunStream {
  constructor(url, { after = 0, onEvent, onConnection }) {
    this.url = url;
    this.lastId = after;
    this.onEvent = onEvent;
    this.onConnection = onConnection || (() => {});
    this.source = null;
    this.closed = false;
    this.retryTimer = null;
    this.backoff = 1000;
    this.open();
  }

  open() {
    if (this.closed) return;
    const url = new URL(this.url, window.location.href);
    if (this.lastId > 0) url.searchParams.set("last_event_id", String(this.lastId));
    const source = new EventSource(url.toString(), { withCredentials: true });
    this.source = source;
    source.addEventListener("open", () => {
      this.backoff = 1000;
      this.onConnection("live");
    });
    source.addEventListener("error", () => this.handleError(source));
    for (const name of EVENT_NAMES) {
      source.addEventListener(name, (message) => this.handleMessage(name, message));
    }
  }

  handleMessage(name, message) {
    const id = Number.parseInt(message.lastEventId, 10);
    let data;
    try {
      data = JSON.parse(message.data);
    } catch {
      data = {};
    }
    if (Number.isFinite(id)) this.lastId = Math.max(this.lastId, id);
    this.onEvent(name, Number.isFinite(id) ? id : 0, data ?? {});
    if (name === "done") this.close();
  }

  handleError(source) {
    if (this.closed || source !== this.source) return;
    if (source.readyState === EventSource.CONNECTING) {
      this.onConnection("reconnecting");
      return;
    }
    // EventSource gave up: reopen from the last event we saw, backing off.
    source.close();
    this.onConnection("reconnecting");
    this.retryTimer = window.setTimeout(() => this.open(), this.backoff);
    this.backoff = Math.min(this.backoff * 2, MAX_BACKOFF_MS);
  }

  close() {
    this.closed = true;
    window.clearTimeout(this.retryTimer);
    if (this.source) this.source.close();
    this.onConnection("closed");
  }
}
