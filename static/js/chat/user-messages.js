// Messages sent to Claude while it works, and late answers: their bubbles in the stream and
// how each reached Claude (user_message, user_message_delivered, user_message_undelivered).

import { el } from "./dom.js";

export const DELIVERY_TEXT = {
  turn: "Reached Claude in the running turn",
  next_turn: "Started Claude's next turn",
  next_prompt: "Sent as the conversation's next prompt",
  forwarded: "Sent into the conversation's running turn",
  pending: "Waiting for Claude to read it…",
};

/** One run's message bubbles, by message id. */
export class UserMessages {
  constructor() {
    this.bubbles = new Map();
    this.early = new Map(); // deliveries heard before their message (replays in any order)
  }

  /** user_message: a bubble in the run (late answers say which question they answer). */
  show(run, data, username) {
    if (this.bubbles.has(data.message_id)) return;
    const who = data.user === username ? "You" : data.user;
    const label = data.kind === "late_answer" ? `${who} (late answer)` : `${who} (while Claude works)`;
    const state = el("p", { class: "msg-delivery", role: "status", text: DELIVERY_TEXT.pending });
    const bubble = el(
      "div",
      { class: "msg msg-user msg-steer", dataset: { messageId: data.message_id } },
      el("p", { class: "msg-who", text: label }),
      el("p", { class: "msg-text", text: data.text }),
      state,
    );
    run.add(bubble);
    this.bubbles.set(data.message_id, state);
    const early = this.early.get(data.message_id);
    if (early) this.delivered(early);
  }

  /** user_message_delivered / user_message_undelivered. */
  delivered(data) {
    const state = this.bubbles.get(data.message_id);
    if (!state) {
      this.early.set(data.message_id, data);
      return;
    }
    state.textContent = data.detail ? `Not delivered: ${data.detail}` : DELIVERY_TEXT[data.delivery] || "Delivered";
    state.classList.toggle("is-failed", Boolean(data.detail));
  }
}
