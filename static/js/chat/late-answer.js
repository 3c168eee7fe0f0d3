// A question that timed out still takes an answer: it reaches Claude as a message, into the
// running turn or as the conversation's next prompt, and the card says which.

import { el } from "./dom.js";
import { DELIVERY_TEXT } from "./user-messages.js";

const LATE_SENT = {
  pending: "Late answer sent — waiting for Claude to read it…",
  forwarded: "Late answer sent into the conversation's running turn…",
  next_prompt: "Late answer sent as the conversation's next prompt.",
};

/**
 * Offer a late answer on a card that timed out.
 * @param card the QuestionCard, closed as expired
 * @param submitLate async (body) => the late-answer response {delivery, run_id, events_url}
 * @param onNextPrompt called with the response when the answer started a new run
 */
export function offerLateAnswer(card, { submitLate, onNextPrompt }) {
  const button = el("button", { type: "button", class: "qcard-late", text: "Answer anyway" });
  const hint = el("p", { class: "qcard-late-hint" }, "Claude went on without an answer; yours still reaches it as a message. ", button);
  card.summary.append(hint);
  button.addEventListener("click", () => {
    hint.remove();
    card.reopen({
      label: "Send late answer",
      submit: submitLate,
      afterSend: (result) => {
        card.showStatus(LATE_SENT[result?.delivery] || LATE_SENT.pending, result?.delivery === "pending");
        card.element.classList.add("is-late");
        if (result?.delivery === "next_prompt" && onNextPrompt) onNextPrompt(result);
      },
    });
  });
}

/**
 * user_message_delivered for a late answer: how it reached Claude. On a card answered in
 * time, it is an answer the turn ended before reading, sent on the same way.
 */
export function lateDelivered(card, data) {
  const how = DELIVERY_TEXT[data.delivery] || "delivered";
  const text = card.state === "answered" ? `Claude's turn ended before it read this answer. ${how}.` : `Late answer: ${how}`;
  card.showStatus(text, false);
}
