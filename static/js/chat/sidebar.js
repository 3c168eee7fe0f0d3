// The project's conversations, newest first; the open one is highlighted.

import { el } from "./dom.js";

const TIME_FORMAT = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });

export class Sidebar {
  constructor({ list, empty, url, api, onSelect }) {
    this.list = list;
    this.empty = empty;
    this.url = url;
    this.api = api;
    this.onSelect = onSelect;
    this.currentId = null;
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
      el("span", { class: "chat-conversation-time", text: TIME_FORMAT.format(new Date(conversation.updated_at)) }),
    );
    link.addEventListener("click", (event) => {
      if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      this.onSelect(conversation.id);
    });
    return el("li", {}, link);
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
