// A tool call waiting for the user's approval, inline in the stream: allow it once, always, or deny it.
// Tool names, inputs, rules and messages come from Claude or users: text nodes only.

import { Countdown } from "./countdown.js";
import { el } from "./dom.js";
import { renderPreview } from "./permission-preview.js";
import { toolLabel, toolSummary } from "./render.js";

const HEADLINES = {
  bash: "Claude wants to run a command",
  diff: "Claude wants to change a file",
  write: "Claude wants to create a file",
  url: "Claude wants to fetch a web page",
  mcp: "Claude wants to use an MCP tool",
  json: "Claude wants to use a tool",
};

const CLOSED = {
  timeout: { stateClass: "is-expired", heading: "Expired" },
  cancelled: { stateClass: "is-cancelled", heading: "Cancelled" },
};

/** "Allowed once by alice", "Always allowed by alice: Bash(npm test:*)", "Denied by alice: not now", "Denied by policy". */
function decisionText({ decision, by, by_policy: byPolicy, rule, message }) {
  // The policy's note under the card says why and what Claude was told (policy-note.js).
  if (byPolicy) return decision === "deny" ? "Denied by policy" : "Allowed by policy";
  const who = by ? ` by ${by}` : "";
  if (decision === "allow") return `Allowed once${who}`;
  if (decision === "always") return `Always allowed${who}${rule ? `: ${rule}` : ""}`;
  if (decision === "deny") return `Denied${who}${message ? `: ${message}` : ""}`;
  return `Decided${who}`;
}

export class PermissionCard {
  /**
   * @param data the permission_request event (see conversation.js)
   * @param submit async (body) => response body; rejects with ApiError
   * @param username the signed-in user, who made a decision this page sent
   * @param onChange called when the card stops (or starts) waiting for the user
   */
  constructor(data, { submit, username, onChange }) {
    this.id = data.request_id;
    this.toolName = typeof data.tool_name === "string" ? data.tool_name : "";
    this.input = data.input;
    this.rule = typeof data.suggested_rule === "string" && data.suggested_rule ? data.suggested_rule : null;
    this.submitDecision = submit;
    this.username = username;
    this.onChange = onChange || (() => {});
    this.state = "pending";

    this.countdown = new Countdown(data.expires_at);
    this.message = el("textarea", {
      id: `pcard-message-${this.id}`,
      class: "pcard-message",
      rows: 2,
      placeholder: "Why not, or what to do instead",
    });
    this.buttons = [
      this.button("Allow once", "pcard-allow", "allow"),
      this.rule ? this.button(["Always allow ", el("code", { class: "pcard-rule", text: this.rule })], "pcard-always", "always") : null,
      this.button("Deny", "pcard-deny", "deny"),
    ].filter(Boolean);
    this.error = el("p", { class: "pcard-error", role: "alert", hidden: true });
    this.status = el("p", { class: "pcard-status", role: "status", hidden: true });
    this.outcome = el("span", { class: "pcard-outcome" });
    this.preview = renderPreview(data.preview, data.input);
    // What the answering policy said (policy-note.js).
    this.policy = el("div", { class: "pcard-policy" });
    // What the card folds to once it is over: the outcome, then the tool and what it would have done.
    this.summary = el(
      "p",
      { class: "pcard-summary", hidden: true },
      this.outcome,
      el("span", { class: "pcard-tool", text: toolLabel(this.toolName) }),
      el("span", { class: "pcard-what", text: toolSummary(this.input) }),
    );
    this.form = el(
      "div",
      { class: "pcard-form" },
      el("div", { class: "pcard-actions" }, ...this.buttons),
      el(
        "div",
        { class: "pcard-deny-box" },
        el("label", { class: "pcard-message-label", for: this.message.id, text: "Message for Claude if you deny (optional)" }),
        this.message,
        el("span", { class: "pcard-keys", text: "Enter in the message denies · Shift+Enter new line" }),
      ),
      this.error,
      this.status,
    );
    const headline = HEADLINES[this.preview.dataset.kind];
    this.element = el(
      "section",
      { class: "pcard is-pending", dataset: { requestId: this.id }, "aria-label": `${headline}: ${toolLabel(this.toolName)}`, tabindex: "-1" },
      el(
        "div",
        { class: "qcard-top pcard-top" },
        el("span", { class: "pcard-badge", text: "Permission needed" }),
        this.countdown.element,
      ),
      el("p", { class: "pcard-headline" }, headline, " ", el("span", { class: "pcard-tool", text: toolLabel(this.toolName) })),
      this.preview,
      this.form,
      this.summary,
      this.policy,
    );
    this.message.addEventListener("keydown", (event) => {
      if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
      event.preventDefault();
      this.send("deny");
    });
  }

  button(label, className, decision) {
    const button = el("button", { type: "button", class: `pcard-button ${className}` }, label);
    button.addEventListener("click", () => this.send(decision));
    return button;
  }

  get pending() {
    return this.state === "pending" || this.state === "sending";
  }

  /** The notification's text: which tool, doing what. */
  questionSummary() {
    const what = toolSummary(this.input);
    return what ? `${toolLabel(this.toolName)}: ${what}` : `Allow ${toolLabel(this.toolName)}?`;
  }

  /** Number keys answer questions only: a stray digit must never approve a tool. */
  pickOption() {
    return false;
  }

  focus() {
    this.element.focus({ preventScroll: true });
  }

  async send(decision) {
    if (this.state !== "pending") return;
    const body = { request_id: this.id, decision };
    const message = this.message.value.trim();
    if (decision === "deny" && message) body.message = message;
    this.showError("");
    this.setState("sending");
    this.setDisabled(true);
    this.status.replaceChildren(el("span", { class: "spinner", "aria-hidden": "true" }), "Sending your decision…");
    this.status.hidden = false;
    let answer;
    try {
      answer = await this.submitDecision(body);
    } catch (error) {
      this.onSubmitError(error);
      return;
    }
    // The server recorded it: this user decided, as the server says (an SSE event may already have said so).
    if (this.state === "decided") return;
    this.markDecided({
      decision: answer?.decision ?? decision,
      rule: answer?.rule ?? null,
      by: this.username,
      message: body.message || "",
    });
  }

  onSubmitError(error) {
    if (this.state !== "sending") return; // an SSE event already closed the card
    const detail = error.detail || String(error);
    if (error.status === 409) {
      this.close("is-closed", "Already decided", detail);
    } else if (error.status === 410) {
      const reason = CLOSED[error.code] || CLOSED.timeout;
      this.close(reason.stateClass, reason.heading, detail);
    } else {
      this.setState("pending");
      this.setDisabled(false);
      this.status.hidden = true;
      this.showError(detail);
    }
  }

  /** permission_decided (from this page, another tab or another user), live or replayed. */
  markDecided(data) {
    const known = ["allow", "always", "deny"].includes(data.decision);
    this.close(known ? `is-decided is-${data.decision}` : "is-decided", decisionText(data), "");
    this.setState("decided");
  }

  /** Show what the answering policy said (a node from policy-note.js). */
  showPolicy(node) {
    this.policy.replaceChildren(node);
  }

  /** permission_expired: nobody decided in time, or the run ended first. A decision stands. */
  markExpired(data) {
    if (this.state === "decided") return;
    const reason = CLOSED[data.reason] || CLOSED.timeout;
    this.close(reason.stateClass, reason.heading, "");
  }

  /** Claude went on: nothing to change, a permission card collapses when decided. */
  markContinued() {}

  /** The run ended while the request was still open: no decision can reach Claude any more. */
  markOrphaned() {
    if (this.pending) this.markExpired({ reason: "cancelled" });
  }

  /** The final one-line state: buttons gone, the preview folded away. */
  close(stateClass, heading, detail) {
    this.countdown.stop();
    this.setDisabled(true);
    this.form.hidden = true;
    this.preview.hidden = true;
    this.element.className = `pcard is-final ${stateClass}`;
    this.outcome.replaceChildren(el("strong", { text: heading }), detail ? ` — ${detail}` : "");
    this.summary.hidden = false;
    this.setState("closed");
  }

  setState(state) {
    const wasPending = this.pending;
    this.state = state;
    if (wasPending !== this.pending) this.onChange(this);
  }

  setDisabled(disabled) {
    for (const control of [...this.buttons, this.message]) control.disabled = disabled;
  }

  showError(text) {
    this.error.textContent = text;
    this.error.hidden = !text;
  }

  destroy() {
    this.countdown.stop();
  }
}
