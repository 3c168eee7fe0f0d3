// The time a card has left before the server gives up waiting, ticking once a second.

import { el, formatCountdown } from "./dom.js";

const URGENT_SECONDS = 30;

export class Countdown {
  /** @param expiresAt ISO 8601 text; a missing or unreadable time shows no countdown. */
  constructor(expiresAt) {
    this.expiresAt = Date.parse(expiresAt);
    this.element = el("span", { class: "qcard-countdown", "aria-live": "off" });
    this.timer = null;
    if (!Number.isFinite(this.expiresAt)) return;
    this.tick();
    this.timer = window.setInterval(() => this.tick(), 1000);
  }

  tick() {
    const left = (this.expiresAt - Date.now()) / 1000;
    this.element.textContent = left > 0 ? `${formatCountdown(left)} left` : "Time is up";
    this.element.classList.toggle("is-urgent", left <= URGENT_SECONDS);
  }

  stop() {
    window.clearInterval(this.timer);
    this.element.textContent = "";
  }
}
