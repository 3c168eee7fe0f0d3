// Getting the user's attention while Claude waits: the tab title, a notification, shortcuts.

import { isTextEntry } from "./dom.js";

const ASKED_KEY = "promptmanager.notifications-asked";
const WAITING_PREFIX = "(?) Claude is waiting — ";
// A replayed question is often answered a few events later; only notify if it stays open.
const NOTIFY_DELAY_MS = 400;

export class Attention {
  constructor() {
    this.baseTitle = document.title;
    this.cards = new Set();
    document.addEventListener("keydown", (event) => this.onKeydown(event));
  }

  /** Called whenever a card starts or stops waiting for the user. */
  update(card) {
    if (card.pending) this.cards.add(card);
    else this.cards.delete(card);
    document.title = this.cards.size ? `${WAITING_PREFIX}${this.baseTitle}` : this.baseTitle;
  }

  forget(card) {
    this.cards.delete(card);
    this.update({ pending: false });
  }

  /** A browser notification for a new question, when the user allowed them and is elsewhere. */
  notify(card) {
    if (!("Notification" in window) || Notification.permission !== "granted") return;
    window.setTimeout(() => {
      if (!card.pending || document.hasFocus()) return;
      try {
        const notification = new Notification("Claude is waiting for your answer", {
          body: card.questionSummary(),
          tag: `question-${card.id}`,
        });
        notification.addEventListener("click", () => {
          window.focus();
          card.focus();
        });
      } catch {
        // Some browsers only allow notifications from a service worker; the title still says it.
      }
    }, NOTIFY_DELAY_MS);
  }

  /** Number keys pick options of the card in focus, else of the first card still waiting. */
  onKeydown(event) {
    if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return;
    if (!/^[1-9]$/.test(event.key) || isTextEntry(event.target)) return;
    const cards = [...this.cards].filter((card) => card.state === "pending");
    const card = cards.find((c) => c.element.contains(document.activeElement)) || cards[0];
    if (card && card.pickOption(Number(event.key) - 1)) event.preventDefault();
  }
}

/** Ask for notification permission once, on the first prompt the user sends; never again. */
export function askNotificationPermissionOnce() {
  if (!("Notification" in window) || Notification.permission !== "default") return;
  try {
    if (window.localStorage.getItem(ASKED_KEY)) return;
    window.localStorage.setItem(ASKED_KEY, "1");
  } catch {
    // Storage may be blocked; asking once per page load is still not nagging.
  }
  Notification.requestPermission().catch(() => {});
}
