// Talking to Claude while it works, and the answering policy, on the open conversation:
// messages into the running turn, late answers, the policy's notes on cards, and the next
// run a message or a late answer started.

import { withId } from "./api.js";
import { lateDelivered, offerLateAnswer } from "./late-answer.js";
import { answeredByPolicy, decidedByPolicy, policyNote } from "./policy-note.js";
import { UserMessages } from "./user-messages.js";

export class Talk {
  /** @param view the ConversationView (its cards, runs, api, config and followRun) */
  constructor(view) {
    this.view = view;
    this.messages = new Map(); // run id → UserMessages
  }

  /** Send a message into the latest run's running turn; rejects with ApiError (410 once it ended). */
  async sendMessage(text) {
    const run = this.view.latestRun;
    return this.view.api.post(withId(this.view.config.messagesUrl, run.runId), { text });
  }

  bubbles(run) {
    if (!this.messages.has(run.runId)) this.messages.set(run.runId, new UserMessages());
    return this.messages.get(run.runId);
  }

  /** Every event of a run, after the conversation view handled it. */
  handle(run, name, data) {
    const card = this.view.cards.get(data.question_id || data.request_id);
    switch (name) {
      case "policy_decision":
        card?.showPolicy(policyNote(data, { onAccept: (button) => this.accept(card, data, button) }));
        break;
      case "ask_user_answered":
        if (data.by_policy && card) card.showPolicy(answeredByPolicy(data, { onOverride: () => this.override(card) }));
        break;
      case "ask_user_expired":
        if (data.reason === "timeout" && card?.element.classList.contains("is-expired")) this.offerLate(card);
        break;
      case "permission_decided":
        if (data.by_policy) card?.showPolicy(decidedByPolicy(data));
        break;
      case "user_message":
        this.bubbles(run).show(run, data, this.view.config.username);
        if (card && data.kind === "late_answer") card.summary.querySelector(".qcard-late-hint")?.remove();
        break;
      case "user_message_delivered":
      case "user_message_undelivered":
        this.bubbles(run).delivered(data);
        if (card && data.delivery) lateDelivered(card, data);
        // An answer the run's turn never read (the run was cancelled before it could).
        else if (card && data.detail) card.showStatus(data.detail, false);
        if (data.delivery === "next_prompt" && data.run_id) this.view.followRun(data.run_id, data.events_url);
        break;
      default:
        break;
    }
  }

  offerLate(card) {
    offerLateAnswer(card, {
      submitLate: (body) => this.view.api.post(withId(this.view.config.lateAnswerUrl, card.id), body),
      onNextPrompt: (result) => this.view.followRun(result.run_id, result.events_url),
    });
  }

  /** The person accepts the policy's suggestion: it is sent as their answer (labels by question). */
  async accept(card, data, button) {
    button.disabled = true;
    try {
      await this.view.clicks.answer({ question_id: card.id, answers: data.answers });
    } catch (error) {
      button.disabled = false;
      card.showError(error.detail || String(error));
    }
  }

  /** A member answers in place of the policy (the same endpoint; 409 once Claude took it). */
  override(card) {
    card.reopen({
      label: "Send my answer instead",
      submit: (body) => this.view.clicks.answer(body),
    });
  }
}
