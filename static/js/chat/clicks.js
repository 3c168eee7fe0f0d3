// The click channel: a person's answers and decisions over one WebSocket the page keeps
// open (askuser/clicks.py), acknowledged without Django's per-request work. Each click
// falls back to its POST endpoint whenever the socket is not open, so a click is never
// held back by the channel; either way it resolves with the same body or rejects with
// the same ApiError.

import { ApiError, errorOf } from "./api.js";

// No reply this long after a click: the socket is taken for dead (a half-open connection).
const REPLY_TIMEOUT_MS = 20000;
const RETRY_MIN_MS = 1000;
const RETRY_MAX_MS = 30000;
// Under the server's WebSocket message limit (Makefile's UVICORN_WS, 4 MiB) in any encoding.
const MAX_MESSAGE_CHARS = 1000000;
// The server's refusal of a page that is not signed in: the endpoints say why; no retrying.
const FINAL_CLOSE_CODES = new Set([4401]);

const MSG_DROPPED =
  "The connection dropped before the server confirmed this. If it arrived, the card updates by itself; otherwise send it again.";

export class ClickChannel {
  /**
   * @param {string} path the channel's path (data-clicks-url)
   * @param {{post: (url: string, body: object) => Promise<object>}} api the endpoints' client
   * @param {{answer: string, decision: string}} urls the POST endpoint of each kind
   */
  constructor(path, api, urls) {
    this.api = api;
    this.urls = urls;
    this.url = path ? new URL(path, window.location.href) : null;
    if (this.url) this.url.protocol = this.url.protocol === "https:" ? "wss:" : "ws:";
    this.socket = null;
    this.nextId = 1;
    this.waiting = new Map(); // id -> {resolve, reject, timer}
    this.retryMs = RETRY_MIN_MS;
    this.stopped = !this.url || typeof WebSocket === "undefined";
  }

  /** Connect now, and again after each drop (with growing pauses). */
  open() {
    if (this.stopped || this.socket) return;
    let socket;
    try {
      socket = new WebSocket(this.url);
    } catch {
      this.stopped = true;
      return;
    }
    this.socket = socket;
    socket.addEventListener("open", () => {
      this.retryMs = RETRY_MIN_MS;
    });
    socket.addEventListener("message", (event) => this.received(event.data));
    socket.addEventListener("close", (event) => this.dropped(socket, event.code));
  }

  get ready() {
    return this.socket !== null && this.socket.readyState === WebSocket.OPEN;
  }

  answer(body) {
    return this.send("answer", body);
  }

  decide(body) {
    return this.send("decision", body);
  }

  /** The click over the socket when it is open, else through its endpoint. */
  send(kind, body) {
    const id = this.nextId;
    const text = JSON.stringify({ id, kind, body });
    // A very long answer goes as a request, which the server refuses with a clear 413 at
    // any size; the socket would be closed by a message above its limit.
    if (!this.ready || text.length > MAX_MESSAGE_CHARS) return this.api.post(this.urls[kind], body);
    this.nextId++;
    const socket = this.socket;
    return new Promise((resolve, reject) => {
      const timer = window.setTimeout(() => {
        this.waiting.delete(id);
        reject(new ApiError(0, MSG_DROPPED));
        socket.close();
      }, REPLY_TIMEOUT_MS);
      this.waiting.set(id, { resolve, reject, timer });
      socket.send(text);
    }).catch((error) => {
      // Signed out, or signed in again elsewhere since the socket opened: the endpoint,
      // which reads the page's current cookie, decides (and says why when it refuses too).
      if (error instanceof ApiError && error.status === 401) {
        this.socket?.close();
        return this.api.post(this.urls[kind], body);
      }
      throw error;
    });
  }

  received(text) {
    let reply;
    try {
      reply = JSON.parse(text);
    } catch {
      return;
    }
    const waiting = this.waiting.get(reply?.id);
    if (!waiting) return;
    this.waiting.delete(reply.id);
    window.clearTimeout(waiting.timer);
    if (reply.status >= 200 && reply.status < 300) waiting.resolve(reply.body);
    else waiting.reject(errorOf(reply.status, reply.body));
  }

  dropped(socket, code) {
    if (this.socket !== socket) return;
    this.socket = null;
    for (const [id, waiting] of this.waiting) {
      window.clearTimeout(waiting.timer);
      waiting.reject(new ApiError(0, MSG_DROPPED));
      this.waiting.delete(id);
    }
    if (FINAL_CLOSE_CODES.has(code)) {
      this.stopped = true;
      return;
    }
    window.setTimeout(() => this.open(), this.retryMs);
    this.retryMs = Math.min(this.retryMs * 2, RETRY_MAX_MS);
  }
}
