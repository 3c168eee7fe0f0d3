// The project's conversations, newest first; the open one is highlighted, and each one with
// an unfinished run says so ("Waiting for you" above all), so no question goes unseen.

import { el } from "./dom.js";
import { ACTIVE_STATUSES, statusChip } from "./render.js";

const TIME_FORMAT = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "numeric", minute: "2-digit" });
// Runs in conversations that are not open (a colleague's, another tab's) are only seen
// through the list, so it is fetched again this often while the page is in view.
const POLL_MS = 10_000;

export class Sidebar {
  constructor({ list, empty, url, api, onSelect }) {
    this.list = list;
    this.empty = empty;
    this.url = url;
    this.api = api;
    this.onSelect = onSelect;
    this.currentId = null;
    // The open conversation's status as its own stream tells it: fresher than the list.
    this.live = { id: null, status: null };
  }

  /** Fetch the list now, then again every POLL_MS while the page is visible. */
  start() {
    this.refresh();
    window.setInterval(() => {
      if (document.visibilityState === "visible") this.refresh();
    }, POLL_MS);
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible") this.refresh();
    });
  }

  async refresh() {
    let conversations;
    try {
      conversations = await this.api.get(this.url);
    } catch {
      return; // the list is a convenience; the open conversation keeps working
    }
    this.list.replaceChildren(...conversations.map((c) => this.item(c)));
    this.empty.hidden = conversations.length > 0;
    this.highlight(this.currentId);
    if (this.live.id !== null) this.showStatus(this.live.id, this.live.status);
  }

  item(conversation) {
    const link = el(
      "a",
      {
        href: `?c=${encodeURIComponent(conversation.id)}`,
        class: "chat-conversation",
        dataset: { conversationId: String(conversation.id) },
      },
      el("span", { class: "chat-conversation-title", text: conversation.title || `Conversation ${conversation.id}` }),
      el(
        "span",
        { class: "chat-conversation-meta" },
        el("span", { class: "chat-conversation-time", text: TIME_FORMAT.format(new Date(conversation.updated_at)) }),
      ),
    );
    setChip(link, conversation.active_status);
    link.addEventListener("click", (event) => {
      if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      this.onSelect(conversation.id);
    });
    return el("li", {}, link);
  }

  /** The open conversation's latest run status, as its stream reports it. */
  showStatus(conversationId, status) {
    this.live = { id: conversationId, status };
    if (conversationId === null) return;
    const link = this.list.querySelector(`a[data-conversation-id="${conversationId}"]`);
    if (link) setChip(link, status);
  }

  highlight(conversationId) {
    this.currentId = conversationId;
    for (const link of this.list.querySelectorAll("a[data-conversation-id]")) {
      const current = link.dataset.conversationId === String(conversationId);
      link.classList.toggle("is-current", current);
      if (current) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
  }
}

/** A status chip on a conversation while its run is unfinished; none once it ended. */
function setChip(link, status) {
  const meta = link.querySelector(".chat-conversation-meta");
  meta.querySelector(".status-chip")?.remove();
  if (!ACTIVE_STATUSES.has(status)) return;
  meta.append(statusChip(status));
}
