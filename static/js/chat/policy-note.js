// What the answering policy said about a card: its suggestion, its answer, or why it left
// the card to a person, with its reasoning. Everything the policy wrote goes in as text.

import { el } from "./dom.js";

const DECISIONS = { allow: "Allow", deny: "Deny", defer: "Left to you" };

function answerText(answers) {
  return Object.values(answers || {}).join(" · ");
}

/**
 * The note for a policy_decision event: {mode, decision, answers, reasoning, reserved, outcome, answer_at}.
 * ``onAccept`` (a suggested answer): the person sends the policy's answer as theirs.
 */
export function policyNote(data, { onAccept } = {}) {
  const note = el("div", { class: "policy-note", dataset: { policyDecision: data.decision } });
  let heading;
  if (data.decision === "defer") {
    heading = "The policy left this to you";
  } else if (data.decision === "answer") {
    heading = data.mode === "auto" ? "The policy will answer" : "The policy suggests";
  } else {
    heading = data.mode === "auto" ? `The policy will ${data.decision}` : `The policy suggests: ${DECISIONS[data.decision]}`;
  }
  const choice = data.decision === "answer" ? answerText(data.answers) : "";
  note.append(el("p", { class: "policy-heading" }, el("strong", { text: heading }), choice ? ": " : "", choice ? el("span", { class: "policy-choice", text: choice }) : ""));
  if (data.mode === "auto" && data.answer_at && data.decision !== "defer") {
    note.append(el("p", { class: "policy-when", text: "unless someone answers first" }));
  }
  if (data.reasoning) note.append(el("p", { class: "policy-reasoning", text: data.reasoning }));
  if (onAccept && data.mode === "suggest" && data.decision === "answer") {
    const accept = el("button", { type: "button", class: "policy-accept", text: "Use this answer" });
    accept.addEventListener("click", () => onAccept(accept));
    note.append(el("p", { class: "policy-actions" }, accept));
  }
  return note;
}

/** The lines a card shows once the policy's answer was given (ask_user_answered with by_policy). */
export function answeredByPolicy(data, { onOverride } = {}) {
  const box = el(
    "div",
    { class: "policy-note is-answered" },
    el("p", { class: "policy-heading" }, el("strong", { text: "Answered by policy" }), ": ", el("span", { class: "policy-choice", text: answerText(data.answers) })),
  );
  if (data.reasoning) box.append(el("p", { class: "policy-reasoning", text: data.reasoning }));
  if (onOverride) {
    const button = el("button", { type: "button", class: "policy-override", text: "Override" });
    button.addEventListener("click", () => onOverride());
    box.append(el("p", { class: "policy-override-note" }, "Any member can override this answer until Claude takes it. ", button));
  }
  return box;
}

/**
 * What a permission card shows under its outcome ("Denied by policy", permission-card.js) once
 * the policy decided it: the policy's reasoning, and for a deny what Claude was told.
 */
export function decidedByPolicy(data) {
  const box = el("div", { class: "policy-note is-answered" });
  if (data.reasoning) box.append(el("p", { class: "policy-reasoning", text: data.reasoning }));
  if (data.decision === "deny" && data.message) {
    box.append(el("p", { class: "policy-told" }, "Claude was told: ", el("q", { text: data.message })));
  }
  return box;
}
