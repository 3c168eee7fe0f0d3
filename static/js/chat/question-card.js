// A question from Claude, inline in the stream: answer it, then follow it to Claude.

import { el, formatCountdown } from "./dom.js";
import { QuestionFields } from "./question-form.js";

const URGENT_SECONDS = 30;

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
    this.expiresAt = Date.parse(data.expires_at);
    this.submitAnswer = submit;
    this.username = username;
    this.onChange = onChange || (() => {});
    this.state = "pending";
    this.timer = null;

    this.fields = this.questions.map(
      (spec, index) => new QuestionFields(spec, { name: `q-${this.id}-${index}`, index }),
    );
    this.countdown = el("span", { class: "qcard-countdown", "aria-live": "off" });
    this.notes = el("textarea", { class: "qcard-notes", rows: 2, placeholder: "Anything else Claude should know?" });
    this.error = el("p", { class: "qcard-error", role: "alert", hidden: true });
    this.status = el("p", { class: "qcard-status", role: "status", hidden: true });
    this.summary = el("div", { class: "qcard-summary", hidden: true });
    this.sendButton = el("button", { type: "submit", class: "qcard-send", text: "Send answer" });
    this.form = el(
      "form",
      { class: "qcard-form", novalidate: true },
      this.fields.map((field) => field.element),
      el("details", { class: "qcard-notes-box" }, el("summary", {}, "Add a note (optional)"), this.notes),
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
      el("div", { class: "qcard-top" }, this.badge, this.countdown),
      this.form,
      this.summary,
      this.status,
    );
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    this.form.addEventListener("keydown", (event) => this.onKeydown(event));
    this.form.addEventListener("change", () => this.clearMissing());
    this.form.addEventListener("input", () => this.clearMissing());
    this.tick();
    this.timer = window.setInterval(() => this.tick(), 1000);
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

  tick() {
    if (!Number.isFinite(this.expiresAt)) return;
    const left = (this.expiresAt - Date.now()) / 1000;
    this.countdown.textContent = left > 0 ? `${formatCountdown(left)} left` : "Time is up";
    this.countdown.classList.toggle("is-urgent", left <= URGENT_SECONDS);
  }

  onKeydown(event) {
    if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    if (event.target instanceof HTMLButtonElement || event.target.closest("summary")) return;
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

  clearMissing() {
    for (const field of this.fields) if (field.answered()) field.setMissing(false);
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
    if (this.state !== "pending") return;
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
    try {
      await this.submitAnswer(this.body());
    } catch (error) {
      this.onSubmitError(error);
      return;
    }
    if (this.state === "sending") {
      this.setState("sent");
      this.showStatus("Answer sent, waiting for Claude…", true);
    }
  }

  onSubmitError(error) {
    if (this.state !== "sending") return; // an SSE event already closed the card
    const detail = error.detail || String(error);
    if (error.status === 409) {
      this.setState("sent");
      this.showStatus("This question was already answered, perhaps in another tab.", true);
    } else if (error.status === 410) {
      this.close("is-expired", "Question closed", detail);
    } else {
      this.setState("pending");
      this.setFormDisabled(false);
      this.status.hidden = true;
      this.showError(detail);
    }
  }

  /** ask_user_answered: collapse to a summary of what was answered (here or in any other tab). */
  markAnswered(data) {
    if (this.state === "answered" || this.state === "delivered") return;
    const who = data.answered_by && data.answered_by !== this.username ? `${data.answered_by} answered` : "You answered";
    const answers = data.answers || {};
    const texts = this.questions.map((q) => answers[q.question]).filter((t) => t !== undefined);
    const lines = [];
    if (this.questions.length <= 1) {
      lines.push(el("p", { class: "qcard-answer" }, `${who}: `, el("strong", { text: texts[0] ?? Object.values(answers)[0] ?? "" })));
    } else {
      lines.push(el("p", { class: "qcard-answer", text: `${who}:` }));
      const list = el("ul", { class: "qcard-answer-list" });
      for (const q of this.questions) {
        list.append(el("li", {}, el("span", { class: "qcard-answer-q", text: `${q.question} ` }), el("strong", { text: answers[q.question] ?? "" })));
      }
      lines.push(list);
    }
    if (data.notes) lines.push(el("p", { class: "qcard-answer-notes" }, "Note: ", data.notes));
    // A form of several questions lists them with their answers; one question says it above.
    const asked = this.questions.length <= 1 ? el("p", { class: "qcard-asked", text: this.questionSummary() }) : null;
    this.summary.replaceChildren(...[asked, ...lines].filter(Boolean));
    this.close("is-answered", "", "");
    this.setState("answered");
    this.showStatus("Waiting for Claude to continue…", false);
  }

  /** ask_user_delivered: did Claude receive exactly what the user sent? */
  markDelivered(data) {
    if (data.ok) {
      this.setState("delivered");
      this.element.classList.add("is-delivered");
      this.showStatus("Delivered to Claude ✓", false);
    } else {
      this.element.classList.add("is-mismatch");
      this.showStatus("Warning: Claude received a different answer than the one sent.", false);
    }
  }

  /** ask_user_expired: the question timed out, or the run ended before an answer. */
  markExpired(data) {
    if (!this.pending && this.state !== "sent") return;
    const timedOut = data.reason !== "cancelled";
    this.summary.replaceChildren(el("p", { class: "qcard-asked", text: this.questionSummary() }));
    this.close(
      timedOut ? "is-expired" : "is-cancelled",
      timedOut ? "Question timed out" : "Question cancelled",
      timedOut ? "Claude was told to continue without an answer." : "The run ended before it was answered.",
    );
  }

  /** The run ended with this question never closed by an event (an old, broken run). */
  markOrphaned() {
    if (this.pending || this.state === "sent") this.markExpired({ reason: "cancelled" });
  }

  close(stateClass, heading, detail) {
    window.clearInterval(this.timer);
    this.countdown.textContent = "";
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
    window.clearInterval(this.timer);
  }
}
