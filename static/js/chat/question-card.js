// A question from Claude, inline in the stream: answer it, then follow it to Claude.

import { Countdown } from "./countdown.js";
import { el } from "./dom.js";
import { QuestionFields } from "./question-form.js";
import { CLOSED_REASONS, UNKNOWN_REASON, answerLines, answeredBy } from "./question-summary.js";

export class QuestionCard {
  /**
   * @param data the ask_user_question event: {question_id, source, expires_at, questions}
   * @param submit async (body) => response body; rejects with ApiError
   * @param username the signed-in user, to say "You answered" rather than a name
   * @param onChange called when the card stops (or starts) waiting for the user
   */
  constructor(data, { submit, username, onChange }) {
    this.id = data.question_id;
    this.questions = Array.isArray(data.questions) ? data.questions : [];
    this.submitAnswer = submit;
    this.username = username;
    this.onChange = onChange || (() => {});
    this.state = "pending";
    this.answer = null;
    this.submitted = false;

    this.fields = this.questions.map(
      (spec, index) => new QuestionFields(spec, { name: `q-${this.id}-${index}`, index }),
    );
    this.countdown = new Countdown(data.expires_at);
    this.notes = el("textarea", {
      id: `qcard-notes-${this.id}`,
      class: "qcard-notes",
      rows: 2,
      placeholder: "Anything else Claude should know?",
    });
    this.error = el("p", { class: "qcard-error", role: "alert", hidden: true });
    this.status = el("p", { class: "qcard-status", role: "status", hidden: true });
    this.summary = el("div", { class: "qcard-summary", hidden: true });
    // What the answering policy said (policy-note.js); kept when the summary is redrawn.
    this.policy = el("div", { class: "qcard-policy" });
    this.sendButton = el("button", { type: "submit", class: "qcard-send", text: "Send answer" });
    this.form = el(
      "form",
      { class: "qcard-form", novalidate: true },
      this.fields.map((field) => field.element),
      el(
        "details",
        { class: "qcard-notes-box" },
        el("summary", {}, "Add a note (optional)"),
        el("label", { class: "qcard-notes-label", for: this.notes.id, text: "Note for Claude (Enter: new line, Ctrl+Enter sends)" }),
        this.notes,
      ),
      this.error,
      el(
        "div",
        { class: "qcard-actions" },
        this.sendButton,
        el("span", { class: "qcard-keys", text: this.hasOptions() ? "1–9 pick · Enter sends" : "Enter sends · Shift+Enter new line" }),
      ),
    );
    const title = this.questions.length > 1 ? `Claude has ${this.questions.length} questions` : "Claude is asking";
    this.badge = el("span", { class: "qcard-badge", text: title });
    this.element = el(
      "section",
      { class: "qcard is-pending", dataset: { questionId: this.id }, "aria-label": title, tabindex: "-1" },
      el("div", { class: "qcard-top" }, this.badge, this.countdown.element),
      this.form,
      this.summary,
      this.policy,
      this.status,
    );
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    this.form.addEventListener("keydown", (event) => this.onKeydown(event));
    this.form.addEventListener("change", () => this.clearMissing());
    this.form.addEventListener("input", () => this.clearMissing());
  }

  get pending() {
    return this.state === "pending" || this.state === "sending";
  }

  hasOptions() {
    return this.fields.some((field) => field.options.length > 0);
  }

  questionSummary() {
    return this.questions.map((q) => q.question).join(" · ");
  }

  onKeydown(event) {
    if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    if (event.target instanceof HTMLButtonElement || event.target.closest("summary")) return;
    // A note is free text: Enter starts a new line there; Ctrl+Enter (⌘+Enter) sends from anywhere.
    if (event.target === this.notes && !(event.ctrlKey || event.metaKey)) return;
    event.preventDefault();
    this.send();
  }

  /** Number keys: pick an option of the focused question, else of the first unanswered one. */
  pickOption(n) {
    if (this.state !== "pending") return false;
    const active = document.activeElement;
    const field =
      this.fields.find((f) => f.contains(active) && f.options.length) ||
      this.fields.find((f) => !f.answered() && f.options.length) ||
      this.fields.find((f) => f.options.length);
    if (!field || !field.pick(n)) return false;
    if (field.multi) {
      field.inputs[n].focus({ preventScroll: true });
    } else {
      // A single choice is made: move on to the next question, or to the send button.
      const next = this.fields.find((f) => f !== field && !f.answered());
      if (next) next.focus();
      else this.sendButton.focus({ preventScroll: true });
    }
    return true;
  }

  focus() {
    const first = this.fields.find((f) => !f.answered()) || this.fields[0];
    if (first) first.focus();
    else this.element.focus({ preventScroll: true });
  }

  /** An answer given where one was missing takes its mark away, and the error once none is left. */
  clearMissing() {
    for (const field of this.fields) if (field.answered()) field.setMissing(false);
    if (!this.error.hidden && this.fields.every((field) => field.answered())) this.showError("");
  }

  body() {
    const values = this.fields.map((field) => field.value());
    const notes = this.notes.value.trim();
    const body = { question_id: this.id };
    if (values.length === 1) {
      body.answer = values[0].other;
      body.selectedOptions = values[0].selected;
    } else {
      body.answers = Object.fromEntries(values.map((v) => [v.question, { selected: v.selected, other: v.other }]));
    }
    if (notes) body.notes = notes;
    return body;
  }

  async send() {
    if (this.state !== "pending" && this.state !== "reopened") return;
    const missing = this.fields.filter((field) => !field.answered());
    for (const field of this.fields) field.setMissing(missing.includes(field));
    if (missing.length) {
      const text = missing[0].spec.question;
      const hint = missing[0].options.length ? "Choose an option or type an answer first." : "Type an answer first.";
      this.showError(this.fields.length > 1 ? `Answer every question: “${text}” has no answer yet.` : hint);
      missing[0].focus();
      return;
    }
    this.showError("");
    this.setState("sending");
    this.setFormDisabled(true);
    this.showStatus("Sending your answer…", true);
    let result;
    try {
      result = await this.submitAnswer(this.body());
    } catch (error) {
      this.onSubmitError(error);
      return;
    }
    if (this.afterSend && this.state === "sending") {
      // A late answer: no ask_user_answered follows; the card tells how it reached Claude.
      this.setState("late");
      this.afterSend(result);
      return;
    }
    if (this.state === "sending") {
      this.submitted = true;
      this.setState("sent");
      this.showStatus("Answer sent, waiting for Claude…", true);
    }
  }

  onSubmitError(error) {
    if (this.state !== "sending") return; // an SSE event already closed the card
    const detail = error.detail || String(error);
    if (error.status === 409) {
      this.setState("sent");
      const already = "This question was already answered, perhaps in another tab.";
      this.showStatus(error.code === "already_taken" ? detail : already, true);
    } else if (error.status === 410) {
      this.close("is-expired", "Question closed", detail);
    } else {
      this.setState("pending");
      this.setFormDisabled(false);
      this.status.hidden = true;
      this.showError(detail);
    }
  }

  /**
   * ask_user_answered (from this tab or any other): the answer is on its way to Claude.
   * The card turns read-only and says who answered what; it collapses once Claude continues.
   */
  markAnswered(data) {
    if (this.state !== "pending" && this.state !== "sending" && this.state !== "sent") return;
    // Answered from another tab or by another user: these inputs do not hold that answer.
    const answeredHere = this.state === "sending" || this.submitted;
    this.answer = data;
    this.setState("sent");
    this.countdown.stop();
    this.setFormDisabled(true);
    this.form.hidden = !answeredHere;
    this.element.classList.remove("is-pending");
    this.element.classList.add("is-sent");
    this.badge.textContent = "Claude asked";
    const who = answeredBy(data, this.username);
    const heading = who === "You" ? "Answered by you" : `Answered by ${who}`;
    const asked = answeredHere ? null : this.askedLine();
    this.summary.replaceChildren(...[asked, ...answerLines(heading, this.questions, data.answers || {}, "sent")].filter(Boolean));
    this.summary.hidden = false;
    this.showStatus("Answer sent, waiting for Claude…", true);
  }

  /** Claude went on after the answer (its tool result, text, or the run's end): collapse. */
  markContinued() {
    // Claude took the answer: the policy's can no longer be overridden.
    this.policy.querySelector(".policy-override-note")?.remove();
    if (this.state !== "sent" || !this.answer) return;
    const data = this.answer;
    const lines = answerLines(`${answeredBy(data, this.username)} answered`, this.questions, data.answers || {}, "answer");
    if (data.notes) lines.push(el("p", { class: "qcard-answer-notes" }, "Note: ", data.notes));
    this.summary.replaceChildren(...[this.askedLine(), ...lines].filter(Boolean));
    this.element.classList.remove("is-sent");
    this.close("is-answered", "", "");
    this.setState("answered");
    this.status.hidden = true;
  }

  /** ask_user_delivered: did Claude receive exactly what the user sent? */
  markDelivered(data) {
    this.markContinued();
    if (this.state !== "answered" && this.state !== "delivered") return;
    if (data.ok) {
      this.setState("delivered");
      this.element.classList.add("is-delivered");
      this.showStatus("Delivered to Claude ✓", false);
    } else {
      this.element.classList.add("is-mismatch");
      this.showStatus("Warning: Claude received a different answer than the one sent.", false);
    }
  }

  /** ask_user_expired: timed out, the run ended, or Claude asked a newer question instead. */
  markExpired(data) {
    // An answer the server recorded is never expired; its card waits for Claude instead.
    if (this.answer || (!this.pending && this.state !== "sent")) return;
    const reason = CLOSED_REASONS[data.reason] || UNKNOWN_REASON;
    this.summary.replaceChildren(el("p", { class: "qcard-asked", text: this.questionSummary() }));
    this.element.classList.remove("is-sent");
    this.close(reason.stateClass, reason.heading, reason.detail);
  }

  /** The run ended: an answered card saw Claude finish; one never closed by an event is orphaned. */
  markOrphaned() {
    if (this.state === "sent" && this.answer) this.markContinued();
    else if (this.pending || this.state === "sent") this.markExpired({ reason: "cancelled" });
  }

  /** Show what the answering policy said (a node from policy-note.js). */
  showPolicy(node) {
    this.policy.replaceChildren(node);
  }

  /**
   * Open the form again: a late answer to a question that timed out, or a member's answer
   * in place of the policy's. ``afterSend`` (late answers) gets the response.
   */
  reopen({ label, submit, afterSend = null }) {
    this.submitAnswer = submit;
    this.afterSend = afterSend;
    this.answer = null;
    this.submitted = false;
    this.policy.querySelector(".policy-override-note")?.remove();
    this.element.classList.remove("is-expired", "is-sent", "is-answered");
    this.form.hidden = false;
    this.setFormDisabled(false);
    this.sendButton.textContent = label;
    this.status.hidden = true;
    this.state = "reopened";
    this.focus();
  }

  /** The question in one line, for a card whose inputs are hidden; a form's list names them. */
  askedLine() {
    return this.questions.length <= 1 ? el("p", { class: "qcard-asked", text: this.questionSummary() }) : null;
  }

  close(stateClass, heading, detail) {
    this.countdown.stop();
    this.form.hidden = true;
    this.setFormDisabled(true);
    this.summary.hidden = false;
    this.element.classList.remove("is-pending");
    this.badge.textContent = "Claude asked";
    if (stateClass) this.element.classList.add(stateClass);
    if (heading) {
      this.summary.append(el("p", { class: "qcard-closed" }, el("strong", { text: heading }), detail ? ` — ${detail}` : ""));
      this.status.hidden = true;
      this.setState("closed");
    }
  }

  setState(state) {
    const wasPending = this.pending;
    this.state = state;
    if (wasPending !== this.pending) this.onChange(this);
  }

  setFormDisabled(disabled) {
    for (const control of this.form.elements) control.disabled = disabled;
  }

  showStatus(text, busy) {
    this.status.replaceChildren(busy ? el("span", { class: "spinner", "aria-hidden": "true" }) : "", text);
    this.status.hidden = false;
  }

  showError(text) {
    this.error.textContent = text;
    this.error.hidden = !text;
  }

  destroy() {
    this.countdown.stop();
  }
}
