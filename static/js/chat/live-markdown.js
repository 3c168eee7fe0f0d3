// Claude's text as it streams, shown as Markdown rather than raw until the end.
// The server renders and sanitizes the text so far (the same renderer as a complete reply);
// what arrived since that render waits beside it as plain text until the next one.

import { el } from "./dom.js";

// At most this often per reply, and never two requests for one reply at once.
const RENDER_INTERVAL_MS = 250;

export class LiveMarkdown {
  /**
   * @param target the reply's .msg-text element
   * @param render async (text) => sanitized HTML; rejects when the server cannot render
   */
  constructor(target, render) {
    this.target = target;
    this.render = render;
    this.text = "";
    this.renderedLength = 0;
    this.timer = null;
    this.busy = false;
    this.stopped = false;
    this.html = el("div", { class: "live-html" });
    this.tail = el("span", { class: "live-tail" });
    target.classList.add("markdown-live");
    target.replaceChildren(this.html, this.tail);
  }

  append(text) {
    this.text += text;
    this.tail.textContent = this.text.slice(this.renderedLength);
    this.schedule();
  }

  schedule() {
    if (this.stopped || this.busy || this.timer !== null) return;
    this.timer = window.setTimeout(() => this.flush(), RENDER_INTERVAL_MS);
  }

  async flush() {
    this.timer = null;
    const snapshot = this.text;
    this.busy = true;
    let html;
    try {
      html = await this.render(snapshot);
    } catch {
      // The text stays readable as plain text; the complete reply brings the Markdown.
      this.stop();
      return;
    } finally {
      this.busy = false;
    }
    if (this.stopped) return;
    // Sanitized on the server (nh3), as every HTML the page takes.
    this.html.innerHTML = html;
    this.renderedLength = snapshot.length;
    this.tail.textContent = this.text.slice(this.renderedLength);
    if (this.text.length > this.renderedLength) this.schedule();
  }

  /** The complete reply arrived, or the run ended: no more renders. */
  stop() {
    this.stopped = true;
    window.clearTimeout(this.timer);
    this.timer = null;
  }
}
